#!/usr/bin/env python3
"""The residual MLP stack of configs/tiny.yaml at real sizes and any dtype (tf32: f32 with the products in tf32 on both sides): tilerun (CUDA graph,
forward + backward, device time per step summed over the layers from --report) against PyTorch
(eager and a torch.cuda.CUDAGraph of the whole forward + backward, CUDA events, median), the
same architecture and initialisation scheme (not the same weights: this is a timing table; the
agreement of the two on shared weights is bench/torch/tiny.py's job).

  python3 bench/torch/mlp_stack.py --tilerun build/tilerun --dtype bf16 --shapes 1024x1024x4096
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def tilerun_step_us(binary, config, dtype, t, d, f, steps):
    text = open(config).read()
    text = re.sub(r"^dtype: \w+", f"dtype: {'f32' if dtype == 'tf32' else dtype}", text, flags=re.M)
    if dtype == "tf32":  # f32 tensors, the products on the tensor cores in tf32
        text = re.sub(r"(\{op: matmul, [^}]*?)(, precision: \w+)?\}", r"\1, precision: tf32}", text)
    text = re.sub(r"^dims: .*$", f"dims: {{T: {t}, D: {d}, F: {f}}}", text, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        path, rep = os.path.join(tmp, "mlp.yaml"), os.path.join(tmp, "r.json")
        open(path, "w").write(text)
        subprocess.run([binary, path, "--device", "cuda", "--steps", str(steps), "--report", rep],
                       check=True, stdout=subprocess.DEVNULL)
        report = json.load(open(rep))
    return sum(l["device_us"] for l in report["layers"])


def torch_step_us(dtype, t, d, f, blocks, steps, compile_modes):
    import torch
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
          "tf32": torch.float32}[dtype]
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(t, d, device="cuda", dtype=dt, generator=g, requires_grad=True)
    ws = []
    for _ in range(blocks):
        ws.append((torch.ones(d, device="cuda", dtype=dt, requires_grad=True),
                   (0.02 * torch.randn(d, f, device="cuda", generator=g)).to(dt).requires_grad_(),
                   (0.02 * torch.randn(f, d, device="cuda", generator=g)).to(dt).requires_grad_()))

    def forward(x):
        y = x
        for gw, w1, w2 in ws:
            h = torch.nn.functional.rms_norm(y, (d,), gw, 1e-6)
            y = y + torch.nn.functional.silu(h @ w1) @ w2
        return y

    def step(fwd=forward):
        y = fwd(x)
        y.backward(y.detach())  # d(0.5*sum(y^2))/dy = y, as tilerun seeds it

    def timed(fn):
        times = []
        for _ in range(steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000)
        return statistics.median(times)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(5):
            step()
    torch.cuda.current_stream().wait_stream(s)
    eager = timed(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    results = {"eager": eager, "graph": timed(graph.replay)}
    # torch.compile of the forward (its backward compiled by AOTAutograd); reduce-overhead replays
    # both as CUDA graphs. Compile time: the warm-up steps that compile, wall clock.
    for mode in compile_modes:
        compiled = torch.compile(forward, mode=mode)
        t0 = time.perf_counter()
        for _ in range(3):
            step(compiled)
        torch.cuda.synchronize()
        results[f"compile {mode}"] = timed(lambda: step(compiled))
        results[f"compile {mode} s"] = time.perf_counter() - t0
    return results


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser()
    p.add_argument("--tilerun", default="tilerun")
    p.add_argument("--config", default=os.path.join(root, "configs", "tiny.yaml"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", default="1024x1024x4096,4096x2048x8192", help="TxDxF,...")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--baseline", default="",
                   help="a second tilerun binary timed on the same shapes (its own column)")
    p.add_argument("--compile-modes", default="",
                   help="torch.compile modes to time too, comma separated (default, reduce-overhead, ...)")
    args = p.parse_args()
    modes = [m for m in args.compile_modes.split(",") if m]
    print(f"{'T x D x F':>18} {'dtype':>5} {'tilerun graph':>14} {'torch eager':>12} "
          f"{'torch graph':>12} {'ratio':>6}" + "".join(f" {m:>22}" for m in modes) +
          (f" {'baseline':>12}" if args.baseline else ""))
    for shape in args.shapes.split(","):
        t, d, f = (int(v) for v in shape.split("x"))
        ours = tilerun_step_us(args.tilerun, args.config, args.dtype, t, d, f, args.steps)
        r = torch_step_us(args.dtype, t, d, f, 2, args.steps, modes)
        print(f"{shape:>18} {args.dtype:>5} {ours:>11.1f} us {r['eager']:>9.1f} us "
              f"{r['graph']:>9.1f} us {ours / r['graph']:>5.2f}x" +
              "".join(f" {r['compile ' + m]:>9.1f} us ({r['compile ' + m + ' s']:.0f} s)"
                      for m in modes) +
              (f" {tilerun_step_us(args.baseline, args.config, args.dtype, t, d, f, args.steps):>9.1f} us"
               if args.baseline else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
