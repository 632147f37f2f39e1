#!/usr/bin/env python3
"""The tiny model (configs/tiny.yaml) in tilerun and in PyTorch, on the same weights.

  1. Generates x and every block's g, w1, w2 (seeded, Python's own generator, so the file is the
     same with or without torch) and writes them as .safetensors by hand (8-byte little-endian
     header length, JSON header, raw bytes; no dependency) under tilerun's names: x,
     block.0.g, block.0.w1, block.0.w2, block.1.g, ...
  2. Runs `tilerun CONFIG --weights W --save S --report R --steps N` (graph and launch modes on
     CUDA; the CPU backend with --device cpu), the first run with --check, and checks that
     * tilerun's own --check passes,
     * the file covers every input and weight (a run with another --seed gives the same bits),
     * on CUDA, graph and launch results are bit-identical.
  3. With torch: the same forward + backward in PyTorch, fp32, TF32 off; the gradient is seeded
     with dL/dy = y (loss 0.5*sum(y^2), as tilerun does), no loss kernel. Every tilerun output
     and gradient must agree with PyTorch within relative L2 1e-4 (printed per tensor, with
     PyTorch fp32's own error against fp64 for scale).
  4. Times PyTorch eager and, on CUDA, a torch.cuda.CUDAGraph of the whole forward + backward:
     median over --torch-steps steps after --warmup; host us = time.perf_counter around the
     issuing calls, device us = CUDA events around them (on the CPU both are wall time).
  5. Prints one table: tilerun graph / launch from the CLI report (the median over --steps after
     one warm-up step), tilerun from tilerun_launch_bench when found (median, same
     statistic as PyTorch), PyTorch eager and CUDA graph. --json FILE writes all of it.

Exit status: 0 all checks passed, 1 a check failed or a run failed, 2 bad usage.

  python3 bench/torch/tiny.py --device cuda --json out/torch_comparison.json
  python3 bench/torch/tiny.py --device cpu --no-torch --tilerun build/tilerun   # I/O only
"""

import argparse
import array
import json
import math
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

TOLERANCE = 1e-4  # relative L2, tilerun vs PyTorch fp32

# ---- .safetensors by hand ---------------------------------------------------------------------


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (shape, array('f')). F32 only; tensors laid out in name order."""
    header, offset = {}, 0
    names = sorted(tensors)
    for name in names:
        shape, values = tensors[name]
        if len(values) != math.prod(shape):
            raise ValueError(f"{name}: {len(values)} values for shape {shape}")
        nbytes = len(values) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in names:
            values = tensors[name][1]
            if sys.byteorder != "little":
                values = array.array("f", values)
                values.byteswap()
            f.write(values.tobytes())


def read_safetensors(path):
    """name -> (shape, array('f')). F32 only (all tilerun writes for an f32 model)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} past the end of the file")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {info['dtype']}, only F32 is read here")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if not 0 <= begin <= end <= len(data) - base or end - begin != 4 * math.prod(shape):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {begin}..{end} for {shape}")
        values = array.array("f")
        values.frombytes(data[base + begin : base + end])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = (shape, values)
    return out


# ---- the model --------------------------------------------------------------------------------


def tiny_spec(config_path):
    """Dims, block count, layer name and eps of a tiny-style config (a light parse of its text)."""
    with open(config_path, encoding="utf-8") as f:
        text = f.read()

    def find(pattern, what):
        m = re.search(pattern, text, re.M)
        if not m:
            raise SystemExit(f"tiny.py: {config_path}: cannot find {what}; expected a tiny-style model")
        return m.group(1)

    dims = {k: int(v) for k, v in re.findall(r"([A-Za-z_]\w*)\s*:\s*(\d+)", find(r"^dims:\s*\{([^}]*)\}", "dims"))}
    for d in ("T", "D", "F"):
        if d not in dims:
            raise SystemExit(f"tiny.py: {config_path}: dims lack {d}")
    return {
        "T": dims["T"], "D": dims["D"], "F": dims["F"],
        "blocks": int(find(r"^\s*repeat:\s*(\d+)", "repeat")),
        "layer": find(r"^\s*-\s*name:\s*([A-Za-z_]\w*)", "the layer name"),
        "eps": float(find(r"\beps:\s*([-+0-9.eE]+)", "the rmsnorm eps")),
    }


def weight_names(spec):
    names = ["x"]
    for i in range(spec["blocks"]):
        names += [f"{spec['layer']}.{i}.{w}" for w in ("g", "w1", "w2")]
    return names


def output_name(spec):
    return f"{spec['layer']}.{spec['blocks'] - 1}.y"


def make_weights(spec, seed):
    """x ~ N(0,1); g ~ N(1, 0.1) (not all ones, so that g's layout matters); w1, w2 ~ N(0, 0.02)."""
    rng = random.Random(seed)

    def normal(count, mean, std):
        return array.array("f", (rng.gauss(mean, std) for _ in range(count)))

    T, D, F = spec["T"], spec["D"], spec["F"]
    tensors = {"x": ((T, D), normal(T * D, 0.0, 1.0))}
    for i in range(spec["blocks"]):
        p = f"{spec['layer']}.{i}."
        tensors[p + "g"] = ((D,), normal(D, 1.0, 0.1))
        tensors[p + "w1"] = ((D, F), normal(D * F, 0.0, 0.02))
        tensors[p + "w2"] = ((F, D), normal(F * D, 0.0, 0.02))
    return tensors


# ---- tilerun ------------------------------------------------------------------------------------


def run(cmd, log):
    log(f"$ {' '.join(cmd)}")
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log(proc.stdout.rstrip())
    log(f"(exit {proc.returncode}, {time.perf_counter() - start:.1f} s)")
    return proc


def report_totals(report):
    """Sums of a tilerun --report over layers, per direction: (kernels, host, device) each."""
    tot = {"forward": [0, 0.0, 0.0], "backward": [0, 0.0, 0.0]}
    for layer in report["layers"]:
        t = tot.setdefault(layer["direction"], [0, 0.0, 0.0])
        t[0] += layer["kernels"]
        t[1] += layer["host_us"]
        t[2] += layer["device_us"]
    return tot


def timing_row(source, statistic, kernels, host_f, host_b, dev_f, dev_b):
    def add(a, b):
        return None if a is None or b is None else a + b

    host_t = add(host_f, host_b)
    return {
        "source": source, "statistic": statistic, "kernels": kernels,
        "host_us": {"forward": host_f, "backward": host_b, "total": host_t},
        "device_us": {"forward": dev_f, "backward": dev_b, "total": add(dev_f, dev_b)},
        "host_us_per_kernel": host_t / kernels if kernels and host_t is not None else None,
    }


def bench_rows(bench, config, device, steps, warmup, log):
    """tilerun_launch_bench's medians for the config (its own seeded weights: same timing)."""
    cmd = [bench, f"--tilerun_config={config}", f"--tilerun_device={device}", f"--tilerun_steps={steps}",
           f"--tilerun_warmup={warmup}", "--benchmark_filter=/step/", "--benchmark_format=json"]
    log(f"$ {' '.join(cmd)}")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.stderr.strip():
        log(proc.stderr.rstrip())
    if proc.returncode != 0:
        log(f"(tilerun_launch_bench exit {proc.returncode}; its rows are left out)")
        return []
    rows = []
    for b in json.loads(proc.stdout).get("benchmarks", []):
        if b.get("error_occurred"):
            log(f"{b['name']}: {b.get('error_message')}")
            continue
        way = b["name"].split("/")[1]
        rows.append(timing_row(f"tilerun {way} (bench)", f"median/{b.get('iterations')}", int(b["kernels"]),
                               b["fwd_host_us"], b["bwd_host_us"], b["fwd_dev_us"], b["bwd_dev_us"]))
    return rows


# ---- PyTorch ------------------------------------------------------------------------------------


def torch_part(args, spec, weights, tilerun_results, log):
    """Agreement with tilerun and PyTorch timing rows. Returns (checks, rows, ok)."""
    import torch
    import torch.nn.functional as F

    cuda = args.device == "cuda"
    dev = torch.device(args.device)
    # fp32 everywhere: no TF32 in matmuls. torch >= 2.9 has the fp32_precision settings (and
    # refuses mixing them with the legacy flags); older versions only the legacy flags.
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    log(f"torch {torch.__version__} on {torch.cuda.get_device_name() if cuda else 'cpu'}; TF32 off")

    names = weight_names(spec)

    def leaves(dtype):
        out = []
        for n in names:
            shape, values = weights[n]
            t = torch.frombuffer(bytearray(values.tobytes()), dtype=torch.float32).reshape(shape)
            out.append(t.to(device=dev, dtype=dtype).requires_grad_(True))
        return out

    eps = spec["eps"]

    def forward(ts):
        x = ts[0]
        for i in range(spec["blocks"]):
            g, w1, w2 = ts[1 + 3 * i : 4 + 3 * i]
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g
            x = x + F.silu(h @ w1) @ w2
        return x

    def backward(ts, y):
        # dL/dy = y for L = 0.5 * sum(y^2): seeded directly, as tilerun does.
        return torch.autograd.grad(y, ts, grad_outputs=y.detach())

    def step(ts):
        y = forward(ts)
        return y, backward(ts, y)

    def as_map(y, grads):
        m = {output_name(spec): y.detach()}
        for n, g in zip(names, grads):
            m["grad." + n] = g.detach()
        return m

    def rel_l2(a, ref):
        a, ref = a.double().cpu(), ref.double().cpu()
        den = ref.norm().item()
        return (a - ref).norm().item() / den if den > 0 else (a - ref).norm().item()

    ts32 = leaves(torch.float32)
    ref32 = as_map(*step(ts32))
    ref64 = as_map(*step(leaves(torch.float64)))
    if cuda:
        torch.cuda.synchronize()

    ok = True
    checks = []
    log(f"\nagreement with PyTorch fp32 (relative L2, tolerance {TOLERANCE:.0e}):")
    log(f"  {'tensor':<22} {'torch32 vs 64':>14} " + " ".join(f"{m:>14}" for m in tilerun_results))
    for name in sorted(ref32):
        row = {"tensor": name, "torch_fp32_vs_fp64": rel_l2(ref32[name], ref64[name])}
        for mode, res in tilerun_results.items():
            if name not in res:
                row[mode] = None
                ok = False
                continue
            shape, values = res[name]
            got = torch.frombuffer(bytearray(values.tobytes()), dtype=torch.float32).reshape(shape)
            if tuple(got.shape) != tuple(ref32[name].shape):
                row[mode] = None
                ok = False
                continue
            row[mode] = rel_l2(got, ref32[name])
            ok = ok and row[mode] <= TOLERANCE
        checks.append(row)
        cells = " ".join(f"{row[m]:>14.3e}" if row[m] is not None else f"{'MISSING':>14}" for m in tilerun_results)
        log(f"  {name:<22} {row['torch_fp32_vs_fp64']:>14.3e} {cells}")
    log(f"agreement: {'ok' if ok else 'FAILED'}")

    # -- timing
    rows = []
    steps, warmup = args.torch_steps, args.warmup

    def kernel_count(fn):
        # Device kernels of one step, from the profiler; None where the profiler gives nothing.
        if not cuda:
            return None
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            n = sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))
            return n or None
        except Exception as e:  # the count is informative only
            log(f"(profiler kernel count unavailable: {e})")
            return None

    # Eager: host = perf_counter around issuing forward and backward; device = events around them.
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if cuda else None
    hf, hb, df, db = [], [], [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        if cuda:
            ev[0].record()
        y = forward(ts32)
        if cuda:
            ev[1].record()
        t1 = time.perf_counter()
        backward(ts32, y)
        if cuda:
            ev[2].record()
        t2 = time.perf_counter()
        if cuda:
            torch.cuda.synchronize()
        if i < warmup:
            continue
        hf.append((t1 - t0) * 1e6)
        hb.append((t2 - t1) * 1e6)
        if cuda:
            df.append(ev[0].elapsed_time(ev[1]) * 1e3)
            db.append(ev[1].elapsed_time(ev[2]) * 1e3)
    if not cuda:  # synchronous: device time is the wall time
        df, db = hf, hb
    med = statistics.median
    rows.append(timing_row("torch eager", f"median/{steps}", kernel_count(lambda: step(ts32)),
                           med(hf), med(hb), med(df), med(db)))

    if cuda:
        # CUDA graph of the whole forward + backward (warm-up on a side stream, as documented).
        # Fresh leaves made on the side stream: the eager runs above left AccumulateGrad nodes on
        # the default stream, which capture may not depend on.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ts32 = [t.detach().clone().requires_grad_(True) for t in ts32]
            for _ in range(3):
                step(ts32)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the autograd engine runs backward on its own thread, which the default
        # (global) capture mode would count as an unsafe call from outside the capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            static_y, static_grads = step(ts32)
        hs, ds = [], []
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            ev[0].record()
            graph.replay()
            ev[1].record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            if i >= warmup:
                hs.append((t1 - t0) * 1e6)
                ds.append(ev[0].elapsed_time(ev[1]) * 1e3)
        g_map = as_map(static_y, static_grads)
        worst = max(rel_l2(g_map[n], ref32[n]) for n in ref32)
        log(f"torch CUDA graph vs eager: worst relative L2 {worst:.3e}")
        ok = ok and worst <= TOLERANCE
        row = timing_row("torch cuda graph", f"median/{steps}", kernel_count(graph.replay),
                         None, None, None, None)
        row["host_us"]["total"], row["device_us"]["total"] = med(hs), med(ds)
        rows.append(row)
    return checks, rows, ok


# ---- the table ----------------------------------------------------------------------------------


def print_table(rows, log):
    def f(v, w=10):
        return f"{v:>{w}.1f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>{w}}"

    log(f"\n{'':<26} {'':<12} {'':>7} {'host us / step':^32} {'device us / step':^32} {'host us':>9}")
    log(f"{'run':<26} {'statistic':<12} {'kernels':>7} {'fwd':>10} {'bwd':>10} {'total':>10}"
        f" {'fwd':>10} {'bwd':>10} {'total':>10} {'/kernel':>9}")
    for r in rows:
        h, d = r["host_us"], r["device_us"]
        k = r["kernels"] if r["kernels"] is not None else "-"
        per = f"{r['host_us_per_kernel']:>9.2f}" if r["host_us_per_kernel"] is not None else f"{'-':>9}"
        log(f"{r['source']:<26} {r['statistic']:<12} {k:>7} {f(h['forward'])} {f(h['backward'])} {f(h['total'])}"
            f" {f(d['forward'])} {f(d['backward'])} {f(d['total'])} {per}")
    log("host = time spent issuing the work; device = CUDA events around it (CPU: both wall time).\n"
        "tilerun (CLI) is the report's median over --steps after one warm-up step; (bench) and torch rows are\n"
        "medians after warm-up. torch kernels: device activities of one step from torch.profiler.")


# ---- main ---------------------------------------------------------------------------------------


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.path.join(root, "configs", "tiny.yaml"))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="for tilerun and torch alike")
    p.add_argument("--tilerun", default=None, help="the tilerun binary (default: on PATH, else build/tilerun)")
    p.add_argument("--bench", default=None,
                   help="tilerun_launch_bench for median rows (default: on PATH if there; 'none' to skip)")
    p.add_argument("--steps", type=int, default=None, help="tilerun --steps (default 200 on cuda, 3 on cpu)")
    p.add_argument("--torch-steps", type=int, default=None, help="measured torch steps (200 cuda, 10 cpu)")
    p.add_argument("--warmup", type=int, default=None, help="torch and bench warm-up steps (20 cuda, 2 cpu)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated weights")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch part (file and tilerun checks only)")
    p.add_argument("--json", default=None, help="write everything measured and checked to this file")
    p.add_argument("--workdir", default=None, help="keep the weights, results and reports here (default: a temp dir)")
    args = p.parse_args()
    cuda = args.device == "cuda"
    args.steps = args.steps or (200 if cuda else 3)
    args.torch_steps = args.torch_steps or (200 if cuda else 10)
    args.warmup = args.warmup if args.warmup is not None else (20 if cuda else 2)

    def log(line=""):
        print(line, flush=True)

    tilerun = args.tilerun or shutil.which("tilerun") or os.path.join(root, "build", "tilerun")
    if not os.path.exists(tilerun) and not shutil.which(tilerun):
        log(f"tiny.py: tilerun not found ({tilerun}); pass --tilerun")
        return 2
    bench = None if args.bench == "none" else (args.bench or shutil.which("tilerun_launch_bench"))

    spec = tiny_spec(args.config)
    log(f"tiny.py: {args.config} on {args.device}: T={spec['T']} D={spec['D']} F={spec['F']}, "
        f"{spec['blocks']} blocks, eps {spec['eps']:g}")
    workdir = args.workdir or tempfile.mkdtemp(prefix="tilerun_tiny_")
    os.makedirs(workdir, exist_ok=True)
    failures = []

    # 1. weights
    start = time.perf_counter()
    weights = make_weights(spec, args.seed)
    wpath = os.path.join(workdir, "weights.safetensors")
    write_safetensors(wpath, weights, {"generator": f"bench/torch/tiny.py seed {args.seed}"})
    back = read_safetensors(wpath)
    if any(back[n][0] != tuple(weights[n][0]) or back[n][1] != weights[n][1] for n in weights):
        failures.append("the weights file does not read back identically")
    log(f"wrote {wpath}: {len(weights)} tensors ({', '.join(weight_names(spec))}) "
        f"in {time.perf_counter() - start:.1f} s; reads back identically")

    # 2. tilerun
    modes = ["graph", "launch"] if cuda else ["cpu"]
    results, reports = {}, {}
    for i, mode in enumerate(modes):
        save = os.path.join(workdir, f"tilerun_{mode}.safetensors")
        rep = os.path.join(workdir, f"tilerun_{mode}.json")
        cmd = [tilerun, args.config, "--device", args.device, "--weights", wpath, "--save", save,
               "--report", rep, "--steps", str(args.steps)]
        if cuda:
            cmd += ["--mode", mode]
        if i == 0:
            cmd.append("--check")
        if run(cmd, log).returncode != 0:
            failures.append(f"tilerun ({mode}) failed")
            continue
        results[mode] = read_safetensors(save)
        with open(rep, encoding="utf-8") as f:
            reports[mode] = json.load(f)
    expected = {output_name(spec)} | {"grad." + n for n in weight_names(spec)}
    for mode, res in results.items():
        if set(res) != expected:
            failures.append(f"tilerun ({mode}) saved {sorted(res)}, expected {sorted(expected)}")
    if len(results) == 2 and results["graph"] != results["launch"]:
        failures.append("tilerun graph and launch results are not bit-identical")
    elif len(results) == 2:
        log("tilerun graph and launch results: bit-identical")
    if results:
        first = modes[0]
        other = os.path.join(workdir, "tilerun_seed_check.safetensors")
        cmd = [tilerun, args.config, "--device", args.device, "--weights", wpath, "--save", other,
               "--seed", "987654321", "--steps", "1", "--forward-only"]
        if cuda:
            cmd += ["--mode", first]
        if run(cmd, log).returncode != 0:
            failures.append("tilerun (seed check) failed")
        else:
            out = output_name(spec)
            if read_safetensors(other)[out] != results[first][out]:
                failures.append("the weights file does not cover every input and weight "
                                "(another --seed changed the output)")
            else:
                log("the weights file covers every input and weight (another --seed: same output bits)")

    rows = []
    for mode, rep in reports.items():
        tot = report_totals(rep)
        kernels = tot["forward"][0] + tot["backward"][0]
        stat = f"median/{rep['steps'] - 1}" if rep['steps'] > 1 else "1 step"
        rows.append(timing_row(f"tilerun {mode} (CLI)", stat, kernels, tot["forward"][1],
                               tot["backward"][1], tot["forward"][2], tot["backward"][2]))
    if bench:
        rows += bench_rows(bench, args.config, args.device, args.torch_steps, args.warmup, log)

    # 3 + 4. torch
    checks, torch_status = [], "skipped (--no-torch)"
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
            torch_status = "skipped (torch is not installed)"
        if torch is not None and cuda and not torch.cuda.is_available():
            failures.append("--device cuda but torch sees no CUDA device")
            torch_status = "failed (no CUDA device for torch)"
        elif torch is not None:
            checks, torch_rows, ok = torch_part(args, spec, weights, results, log)
            rows += torch_rows
            torch_status = "ok" if ok else "FAILED"
            if not ok:
                failures.append("tilerun and PyTorch disagree (or torch graph and eager do)")
    log(f"torch part: {torch_status}")

    print_table(rows, log)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"config": args.config, "device": args.device, "spec": spec, "seed": args.seed,
                       "tolerance": TOLERANCE, "torch": torch_status, "agreement": checks,
                       "timings": rows, "tilerun_reports": reports, "failures": failures}, f, indent=2)
        log(f"wrote {args.json}")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    for msg in failures:
        log(f"FAILED: {msg}")
    log("tiny.py: " + ("ok" if not failures else f"{len(failures)} failure(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
