#!/usr/bin/env python3
"""Block-scaled quantisation at the V4 layer's sizes (issue 15's quantize / dequantize): tilerun
against the same computation written in PyTorch (eager and torch.compile).

Each case is a one-op forward model run through `tilerun MODEL --forward-only --steps S --report R`
(the op's own kernels' time, without the loss kernels the CLI appends, as selection.py reads it,
and the layer's CUDA-graph device time, loss included, medians over the steps),
and the PyTorch version on random tensors of the same shapes (CUDA events around --reps
back-to-back calls after warm-up, the median of --trials runs, per call):

  fp8_act     x bf16[T, D] -> f8e4m3 codes, one f32 scale per 1x128       (DeepSeek's act_quant)
  fp8_act_p2  the same with power-of-two (e8m0) scales
  fp8_weight  w bf16[F, D] -> f8e4m3 codes, one f32 scale per 128x128     (weight_quant)
  mxfp4_act   x bf16[T, D] -> fp4e2m1 codes (two a byte), e8m0 per 1x32   (no PyTorch op: '-')
  fp8_dequant f8e4m3[T, D] and f32[T, D/128] -> bf16

with each case's bytes-floor time at --peak-gbps (default 4800, the H200's HBM3e figure).
--device cpu runs the tilerun side on the CPU backend (a smoke test; no PyTorch timing).

  python3 bench/torch/quantize.py --tilerun build/tilerun --json out/quantize.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HEADER = "model: {name}\ndtype: bf16\ndims: {{T: {T}, D: {D}, F: {F}, S: {S}}}\n"

MODELS = {
    "fp8_act": """inputs:
  x: {{shape: [T, D]}}
layers:
  - name: q
    ops:
      - {{op: quantize, in: x, out: [q, s], format: f8e4m3, block: [128]}}
outputs: [q.q, q.s]
""",
    "fp8_act_p2": """inputs:
  x: {{shape: [T, D]}}
layers:
  - name: q
    ops:
      - {{op: quantize, in: x, out: [q, s], format: f8e4m3, block: [128], scale: e8m0}}
outputs: [q.q, q.s]
""",
    "fp8_weight": """inputs:
  w: {{shape: [F, D]}}
layers:
  - name: q
    ops:
      - {{op: quantize, in: w, out: [q, s], format: f8e4m3, block: [128, 128]}}
outputs: [q.q, q.s]
""",
    "mxfp4_act": """inputs:
  x: {{shape: [T, D]}}
layers:
  - name: q
    ops:
      - {{op: quantize, in: x, out: [q, s], format: fp4e2m1, block: [32], scale: e8m0}}
outputs: [q.q, q.s]
""",
    "fp8_dequant": """inputs:
  q: {{shape: [T, D], dtype: f8e4m3}}
  s: {{shape: [T, S], dtype: f32, init: {{uniform: {{low: 0.5, high: 2}}}}}}
layers:
  - name: q
    ops:
      - {{op: dequantize, in: [q, s], out: y, to: bf16}}
outputs: [q.y]
""",
}


def floor_bytes(name, t, d, f):
    return {
        "fp8_act": 2 * t * d + t * d + 4 * t * d // 128,
        "fp8_act_p2": 2 * t * d + t * d + t * d // 128,
        "fp8_weight": 2 * f * d + f * d + 4 * (f // 128) * (d // 128),
        "mxfp4_act": 2 * t * d + t * d // 2 + t * d // 32,
        "fp8_dequant": t * d + 4 * t * d // 128 + 2 * t * d,
    }[name]


def tilerun_time(binary, name, device, steps, workdir, dims):
    path = os.path.join(workdir, name + ".yaml")
    rep = os.path.join(workdir, name + ".json")
    with open(path, "w") as fh:
        fh.write((HEADER + MODELS[name]).format(name=name, **dims))
    cmd = [binary, path, "--device", device, "--forward-only", "--steps", str(steps),
           "--report", rep]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    with open(rep) as fh:
        report = json.load(fh)
    layer = [l for l in report["layers"] if l["direction"] == "forward"][0]
    own_us = sum(k["us"] for k in report["kernels"]
                 if k["direction"] == "forward" and k["op"] != "half_sum_squares")
    return own_us, layer["device_us"]


def torch_calls(torch, t, d, f):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(t, d, device="cuda", generator=g).bfloat16()
    w = torch.randn(f, d, device="cuda", generator=g).bfloat16()
    q8 = torch.randn(t, d, device="cuda", generator=g).to(torch.float8_e4m3fn)
    s = torch.rand(t, d // 128, device="cuda", generator=g) + 0.5

    def act(x, pow2):
        xb = x.view(x.shape[0], -1, 128).float()
        sc = xb.abs().amax(-1, keepdim=True) / 448.0
        sc = torch.where(sc == 0, torch.ones_like(sc), sc)
        if pow2:
            sc = torch.exp2(torch.ceil(torch.log2(sc)))
        return (xb / sc).to(torch.float8_e4m3fn).view(x.shape), sc.squeeze(-1)

    def weight(w):
        n, k = w.shape
        wb = w.view(n // 128, 128, k // 128, 128).float()
        sc = wb.abs().amax(dim=(1, 3), keepdim=True) / 448.0
        sc = torch.where(sc == 0, torch.ones_like(sc), sc)
        return (wb / sc).to(torch.float8_e4m3fn).view(n, k), sc.view(n // 128, k // 128)

    def dequant(q, s):
        return (q.float().view(q.shape[0], -1, 128) * s.unsqueeze(-1)).bfloat16().view(q.shape)

    fns = {"fp8_act": (lambda x: act(x, False), x), "fp8_act_p2": (lambda x: act(x, True), x),
           "fp8_weight": (weight, w), "fp8_dequant": (lambda qs: dequant(*qs), (q8, s))}
    return fns


def time_call(torch, call, reps, trials):
    for _ in range(3):
        call()
    runs = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            call()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1000.0 / reps)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tilerun", default="tilerun")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--D", type=int, default=7168)
    ap.add_argument("--F", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--peak-gbps", type=float, default=4800.0)
    ap.add_argument("--no-compile", action="store_true",
                    help="skip torch.compile (its compile time dominates a short run)")
    ap.add_argument("--json")
    a = ap.parse_args()
    dims = {"T": a.T, "D": a.D, "F": a.F, "S": a.D // 128}

    results = {}
    with tempfile.TemporaryDirectory() as work:
        for name in MODELS:
            kernels_us, device_us = tilerun_time(a.tilerun, name, a.device, a.steps, work, dims)
            results[name] = {"tilerun_kernels_us": kernels_us, "tilerun_device_us": device_us,
                             "floor_us": floor_bytes(name, a.T, a.D, a.F) / (a.peak_gbps * 1e3)}

    if a.device == "cuda":
        try:
            import torch
            for name, (fn, arg) in torch_calls(torch, a.T, a.D, a.F).items():
                results[name]["torch_eager_us"] = time_call(torch, lambda: fn(arg), a.reps, a.trials)
                if a.no_compile:
                    continue
                compiled = torch.compile(fn)
                results[name]["torch_compile_us"] = time_call(torch, lambda: compiled(arg), a.reps,
                                                              a.trials)
        except Exception as e:  # noqa: BLE001 - reported, the tilerun figures still stand
            print(f"PyTorch timing skipped: {e}", file=sys.stderr)

    print(f"T = {a.T}, D = {a.D}, F = {a.F}")
    print(f"{'case':<12} {'tilerun kernels us':>19} {'tilerun device us':>18} {'torch eager':>12}"
          f" {'torch compile':>14} {'floor us':>9}")
    for name, r in results.items():
        cols = [f"{r[k]:12.2f}" if k in r else f"{'-':>12}"
                for k in ("torch_eager_us", "torch_compile_us")]
        print(f"{name:<12} {r['tilerun_kernels_us']:19.2f} {r['tilerun_device_us']:18.2f} {cols[0]}"
              f"  {cols[1]} {r['floor_us']:9.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": a.device, "dims": dims, "steps": a.steps, "results": results}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
