#!/usr/bin/env python3
"""Where a step's device time goes, from a tilerun --report: time per op (forward and backward),
each layer's kernel sum against its critical path (the longest dependency chain: what overlap of
independent branches could reach), the slowest kernels, and each one's distance from its
bandwidth floor (bytes / floor_gbps) and whether it is on its layer's critical path (only those
can shorten the layer when overlap is perfect).

  python3 bench/kernel_table.py REPORT.json [--top 15] [--layer block.0]
"""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--top", type=int, default=15, help="how many of the slowest kernels to list")
    ap.add_argument("--layer", help="only this layer's kernels (e.g. block.0)")
    a = ap.parse_args()
    with open(a.report) as f:
        r = json.load(f)
    ks = [k for k in r.get("kernels", []) if not a.layer or k["layer"] == a.layer]
    if not ks:
        print("no kernels in the report (it predates per-kernel timing, or --profile was off)",
              file=sys.stderr)
        return 1
    total = sum(k["us"] for k in ks)
    print(f"{r['model']} on {r['device']}: {len(ks)} kernels, {total:.1f} us "
          f"({r['kernel_timing']}); floor at {r['floor_gbps']:.0f} GB/s\n")
    by_op = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for k in ks:
        e = by_op[(k["op"], k["direction"])]
        e[0] += 1
        e[1] += k["us"]
        e[2] += k["floor_us"]
    print("| op | direction | kernels | us | share | floor us |")
    print("|---|---|---:|---:|---:|---:|")
    for (op, d), (n, us, fl) in sorted(by_op.items(), key=lambda x: -x[1][1]):
        print(f"| {op} | {d} | {n} | {us:.1f} | {100 * us / total:.1f}% | {fl:.1f} |")
    print("\n| layer | direction | kernels | kernel sum us | critical path us | device us |")
    print("|---|---|---:|---:|---:|---:|")
    for l in r["layers"]:
        if a.layer and l["name"] != a.layer:
            continue
        print(f"| {l['name']} | {l['direction']} | {l['kernels']} | {l['kernels_us']:.1f} | "
              f"{l.get('critical_us', float('nan')):.1f} | {l['device_us']:.1f} |")
    print(f"\n| slowest kernels | op | layer | direction | us | floor us | x floor | critical |")
    print("|---|---|---|---|---:|---:|---:|:-:|")
    for k in sorted(ks, key=lambda k: -k["us"])[:a.top]:
        ratio = k["us"] / k["floor_us"] if k["floor_us"] > 0 else float("inf")
        crit = {True: "yes", False: "", None: "?"}[k.get("critical")]
        print(f"| {k['kernel']} | {k['op']} | {k['layer']} | {k['direction']} | {k['us']:.1f} | "
              f"{k['floor_us']:.2f} | {ratio:.0f} | {crit} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
