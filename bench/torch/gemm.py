#!/usr/bin/env python3
"""GEMM: tilerun's matmul against cuBLAS (torch.matmul) on the same shapes (bf16 by default).

For each M in --ms and each (N, K) in --nk (default: the V4-Flash projections of
../shared/V4_LAYER.md: q_lora 4096->1024, kv 4096->512, expert w13 4096->4096, expert w2
2048->4096, output 8192->4096), writes a one-op model (x[M, K] @ w[K, N]), runs
`tilerun MODEL --forward-only --steps S --report R` and reads the matmul op's kernel time (CUPTI:
the report's kernels of op `matmul`, a split K's partial products and their sum; not the
model's loss, whose read of the whole output the layer's `kernels_us` counted until the
forty-second session) and the layer's CUDA-graph device time (`device_us`, loss included,
median over the steps); then times
torch.matmul on random bf16 tensors of the same shapes: CUDA events around --reps back-to-back
products after warm-up, the median of --trials such runs, per product. Prints TFLOP/s (2MNK/t)
and the ratio tilerun/cuBLAS per shape and the geometric means over M >= 1024 and M = 128;
--json FILE writes all of it. --transpose-a times a^T w instead, a given as [K, M] (a weight
gradient dW = x^T dy: K runs over the tokens), the same on both sides; --transpose-b times
x w^T, w given as [N, K] (nn.Linear's layout). --dtype tf32 times an f32 product with
`precision: tf32` against torch.matmul in f32 with TF32 allowed; --dtype f32 the strict f32 kernels
against torch with TF32 off.

  python3 bench/torch/gemm.py --tilerun build/tilerun --json out/gemm.json
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

DEFAULT_NK = "1024x4096,512x4096,4096x4096,4096x2048,4096x8192"


def model_yaml(m, n, k, dtype, ta=False, tb=False):
    precision = ", precision: tf32" if dtype == "tf32" else ""
    return f"""model: gemm
dtype: {'f32' if dtype == 'tf32' else dtype}
dims: {{M: {m}, N: {n}, K: {k}}}
inputs:
  x: {{shape: {'[K, M]' if ta else '[M, K]'}}}
layers:
  - name: mm
    weights:
      w: {{shape: {'[N, K]' if tb else '[K, N]'}, init: {{normal: {{mean: 0, std: 0.02}}}}}}
    ops:
      - {{op: matmul, in: [x, w], out: y, transpose_a: {'true' if ta else 'false'}, transpose_b: {'true' if tb else 'false'}{precision}}}
outputs: [mm.y]
"""


def tilerun_time(binary, m, n, k, dtype, steps, workdir, ta=False, tb=False):
    path = os.path.join(workdir, f"gemm_{m}_{n}_{k}.yaml")
    rep = os.path.join(workdir, f"gemm_{m}_{n}_{k}.json")
    with open(path, "w") as f:
        f.write(model_yaml(m, n, k, dtype, ta, tb))
    cmd = [binary, path, "--forward-only", "--steps", str(steps), "--report", rep]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    with open(rep) as f:
        report = json.load(f)
    layer = [l for l in report["layers"] if l["direction"] == "forward"][0]
    mm_us = sum(kn["us"] for kn in report["kernels"]
                if kn["direction"] == "forward" and kn["op"] == "matmul")
    return mm_us, layer["device_us"]


def torch_time(torch, m, n, k, reps, trials, ta=False, tb=False, dtype="bf16"):
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16 if dtype == "f16" else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    x = torch.randn(k, m, device="cuda", dtype=dt).t() if ta else \
        torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt).t() * 0.02 if tb else \
        torch.randn(k, n, device="cuda", dtype=dt) * 0.02
    for _ in range(10):
        torch.matmul(x, w)
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.matmul(x, w)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / reps)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tilerun", default="tilerun")
    p.add_argument("--ms", default="128,1024,4096")
    p.add_argument("--nk", default=DEFAULT_NK, help="N x K pairs, comma separated")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--transpose-a", action="store_true", help="time a^T w, a given as [K, M]")
    p.add_argument("--transpose-b", action="store_true", help="time x w^T, w given as [N, K]")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for m in [int(v) for v in args.ms.split(",")]:
            for nk in args.nk.split(","):
                n, k = [int(v) for v in nk.split("x")]
                flops = 2.0 * m * n * k
                kern_us, dev_us = tilerun_time(args.tilerun, m, n, k, args.dtype, args.steps, workdir,
                                               args.transpose_a, args.transpose_b)
                t_us = torch_time(torch, m, n, k, args.reps, args.trials, args.transpose_a,
                                  args.transpose_b, args.dtype) if torch else None
                row = {"M": m, "N": n, "K": k, "tilerun_kernel_us": kern_us, "tilerun_graph_us": dev_us,
                       "torch_us": t_us, "tilerun_tflops": flops / kern_us / 1e6,
                       "torch_tflops": flops / t_us / 1e6 if t_us else None,
                       "ratio": t_us / kern_us if t_us else None}
                rows.append(row)
                print(f"M={m:5d} N={n:5d} K={k:5d}  tilerun {kern_us:9.1f} us ({row['tilerun_tflops']:6.1f} TFLOP/s,"
                      f" graph {dev_us:9.1f} us)  torch "
                      + (f"{t_us:9.1f} us ({row['torch_tflops']:6.1f} TFLOP/s)  ratio {row['ratio']:.3f}" if t_us else "-"),
                      flush=True)
    def geo(sel):
        vals = [r["ratio"] for r in rows if sel(r) and r["ratio"]]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
    summary = {"geomean_ratio_m_ge_1024": geo(lambda r: r["M"] >= 1024), "geomean_ratio_m_128": geo(lambda r: r["M"] == 128)}
    print(json.dumps(summary))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
