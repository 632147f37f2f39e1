#!/usr/bin/env python3
"""The V4-mini layer (configs/v4-attn.yaml, v4-moe.yaml or v4-mini.yaml) in tilerun and in
PyTorch (bench/torch/v4_model.py) on the same weights: agreement first, then the step timed.

  1. Generates x ~ N(0, 1) and every weight from the config's initialiser (seeded torch CPU
     generator; `ones` and `zeros` perturbed by N(0, 0.1) so that a gain's or a sink's layout
     matters) and writes them as .safetensors under tilerun's names.
  2. fake_quant alone: for each format the config uses, a one-op model through tilerun and
     v4_model.quantise on the same values must give the same bits.
  3. The model with every fake_quant replaced by the identity: tilerun (with --check where T <=
     256) against PyTorch fp32: out, loss and every gradient within relative L2 1e-4; PyTorch
     fp64 beside it for scale.
  4. The model as shipped (FP8/FP4): the same comparison within 2e-3. The quantisers agree bit
     for bit, but an activation that lands within rounding of an FP8 boundary may be rounded one
     way by tilerun's f32 arithmetic and the other by PyTorch's (different summation orders): one
     such element moves by up to 1/16 of its size. Such flips compound from layer to layer, so
     with more than one layer this comparison is printed, not checked.
  5. Timing of one forward + backward (loss 0.5·Σ out²): tilerun graph mode from its --report
     (sum over layers and directions); PyTorch eager, a CUDA graph of the whole forward +
     backward, torch.compile with each --compile-modes mode (compile time: the first compiled
     step, wall clock), each the median of CUDA-event device time and perf_counter host time.
     The CUDA graph row needs CUDA; with --torch-device cpu every other row runs on the CPU.

Exit status: 0 all checks passed, 1 a check or a run failed, 2 bad usage, 77 torch missing.

  python3 bench/torch/v4mini.py --tilerun build/tilerun --device cpu --small --no-timing
  python3 bench/torch/v4mini.py --tilerun tilerun --device cuda --T 1024 --json v4.json
"""

import argparse
import array
import ctypes
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny import read_safetensors, write_safetensors  # noqa: E402
from transformer import kernel_count, rel_l2, run_tilerun, time_step  # noqa: E402
# v4_model is imported where it is used: it needs torch, whose absence is a skip (exit 77).

PLAIN_TOLERANCE = 1e-4   # unquantised, fp32: relative L2 against PyTorch fp32
QUANT_TOLERANCE = 2e-3   # with FP8/FP4: a few elements may round to a neighbouring FP8 value
# The small dims of the CPU checks (tests/tools/v4_attn_check.py's and the MoE draft's).
SMALL = {"T": 32, "D": 128, "ND": 512, "C": 8, "KI": 8, "W": 16, "Q": 128, "QE": 640, "H": 4, "HE": 2048, "GK": 1024,
         "O": 128, "F": 128, "F2": 256, "XE": 8}
QUANT_OP = re.compile(r"\{op: fake_quant, in: (\w+), out: (\w+), format: \w+, block: \d+[^}]*\}")
FORMAT_OF = re.compile(r"format: (\w+), block: (\d+)(, scale: (\w+))?")


# ---- the config (a light parse of its text: dims, layers, weights) --------------------------


def spec_of(path, overrides, layers=None):
    """{'dims', 'dtype', 'formats', 'layers': [(name, repetitions or None, {weight: (shape,
    init)}, halves)]}: halves 'attn' (a layer with wqkv), 'moe' (with w_gate) or both in that
    order (configs/v4-mini.yaml's block); layers overrides every `repeat:` as tilerun's does."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^dims:\s*\{([^}]*)\}", text, re.M)
    if not m:
        raise SystemExit(f"v4mini.py: {path}: no dims")
    dims = {k: int(v) for k, v in re.findall(r"(\w+):\s*(\d+)", m.group(1))}
    for k in overrides:
        if k not in dims:
            raise SystemExit(f"v4mini.py: {path} has no dim {k}")
    dims.update(overrides)
    found = []
    for chunk in re.split(r"^  - name: ", text, flags=re.M)[1:]:
        name = chunk.split()[0]
        weights = {}
        for w, shape, init in re.findall(r"^\s+(\w+):\s*\{shape: \[([^\]]*)\],(?: dtype: \w+,)? init: (.*)\}", chunk, re.M):
            weights[w] = (tuple(int(s) if s.strip().isdigit() else dims[s.strip()] for s in shape.split(",")),
                          init)
        halves = [h for h, key in (("attn", "wqkv"), ("moe", "w_gate")) if key in weights]
        rep = re.search(r"^\s+repeat:\s*(\d+)", chunk, re.M)
        if halves:
            found.append((name, (layers or int(rep.group(1))) if rep else None, weights, halves))
    formats = sorted({(f, int(b), s or "f32") for f, b, _, s in FORMAT_OF.findall(text)})
    dtype = re.search(r"^dtype:\s*(\w+)", text, re.M).group(1)
    return {"dims": dims, "dtype": dtype, "layers": found, "formats": formats}


# In a layer with both halves the MoE's mHC weights carry an f (configs/v4-mini.yaml).
MOE_IN_BLOCK = {"hc_fn": "fhc_fn", "hc_scale": "fhc_scale", "hc_base": "fhc_base"}


def weight_prefixes(name, reps):
    """tilerun's prefix of a layer's tensors: `name.i.` per repetition, `name.` without repeat."""
    return [f"{name}." if reps is None else f"{name}.{i}." for i in range(reps or 1)]


def layer_list(spec):
    """The halves in execution order: (kind, weight prefix, {v4_model's name: the layer's})."""
    out = []
    for name, reps, _, halves in spec["layers"]:
        for prefix in weight_prefixes(name, reps):
            out += [(h, prefix, MOE_IN_BLOCK if h == "moe" and len(halves) == 2 else {}) for h in halves]
    return out


# ---- weights --------------------------------------------------------------------------------


def to_array(t):
    """A contiguous f32 CPU tensor as array('f') (tiny.write_safetensors' input), one copy."""
    t = t.detach().to("cpu", copy=False).float().contiguous()
    out = array.array("f")
    out.frombytes(ctypes.string_at(t.data_ptr(), t.numel() * 4))
    return out


def from_array(torch, shape, values):
    return torch.frombuffer(values, dtype=torch.float32).clone().reshape(shape)


def make_inputs(torch, spec, seed):
    """name -> f32 CPU tensor: x and every weight under tilerun's name."""
    gen = torch.Generator().manual_seed(seed)
    d = spec["dims"]
    out = {"x": torch.randn(d["T"], d["N"], d["D"], generator=gen)}
    for lname, reps, weights, _ in spec["layers"]:
        for prefix, (name, (shape, init)) in [(p, w) for p in weight_prefixes(lname, reps) for w in weights.items()]:
            std = re.search(r"normal: \{std: ([-+0-9.eE]+)\}", init)
            uni = re.search(r"uniform: \{low: ([-+0-9.eE]+), high: ([-+0-9.eE]+)\}", init)
            if std:
                t = torch.randn(shape, generator=gen) * float(std.group(1))
            elif uni:
                lo, hi = float(uni.group(1)), float(uni.group(2))
                t = lo + (hi - lo) * torch.rand(shape, generator=gen)
            else:  # ones / zeros, perturbed so that their layout matters
                t = (1.0 if "ones" in init else 0.0) + 0.1 * torch.randn(shape, generator=gen)
            out[prefix + name] = t
    return out


def write_inputs(path, inputs):
    write_safetensors(path, {n: (tuple(t.shape), to_array(t)) for n, t in inputs.items()})


# ---- tilerun --------------------------------------------------------------------------------


def tilerun_cmd(args, config, dims, extra, layers=True):
    cmd = [args.tilerun, config, "--device", args.device] + [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]
    cmd += ["--layers", str(args.layers)] if args.layers and layers else []
    return cmd + (["--mode", "graph"] if args.device == "cuda" else []) + extra


def tilerun_step(args, config, dims, wpath, workdir, tag, check, layers=True):
    """One step of tilerun: {name: (shape, array)} with out, grad.* and the loss, or None."""
    save, rep = os.path.join(workdir, tag + ".safetensors"), os.path.join(workdir, tag + ".json")
    extra = ["--weights", wpath, "--save", save, "--report", rep, "--steps", "1"] + (["--check"] if check else [])
    if run_tilerun(tilerun_cmd(args, config, dims, extra, layers)).returncode != 0:
        return None
    res = read_safetensors(save)
    res["loss"] = ((1,), array.array("f", [json.load(open(rep))["loss"]["total"]]))
    return res


def fake_quant_bits(torch, args, fmt, block, scale, workdir):
    """The format's fake_quant as a one-op model in tilerun and in v4_model: same bits?"""
    import v4_model

    path = os.path.join(workdir, f"fq_{fmt}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("model: fake_quant_bits\ndtype: f32\ndims: {R: 24, K: 256}\ninputs:\n  x: {shape: [R, K]}\n"
                "layers:\n  - name: q\n    ops:\n      - {op: fake_quant, in: x, out: y, "
                f"format: {fmt}, block: {block}, scale: {scale}}}\noutputs: [q.y]\n")
    gen = torch.Generator().manual_seed(args.seed + 7)
    # Magnitudes from 1e-6 to 1e6 by row, one row of zeros, one of f32 subnormals.
    x = torch.randn(24, 256, generator=gen) * torch.logspace(-6, 6, 24)[:, None]
    x[3], x[5] = 0.0, x[5] * 1e-36
    assert 0 < x[5].abs().max() < torch.finfo(torch.float32).tiny
    wpath = os.path.join(workdir, f"fq_{fmt}_x.safetensors")
    write_inputs(wpath, {"x": x})
    res = tilerun_step(args, path, {}, wpath, workdir, f"fq_{fmt}", check=True, layers=False)
    if res is None:
        return False
    got = from_array(torch, *res["q.y"])
    want = v4_model.quantise(x, fmt, block, pow2_scale=scale == "ue8m0")
    same = torch.equal(got.view(torch.int32), want.view(torch.int32))
    print(f"fake_quant {fmt} block {block} scale {scale}: tilerun and torch "
          + ("bit-identical" if same else f"DIFFER at {int((got != want).sum())} of {x.numel()} values"))
    return same


# ---- PyTorch --------------------------------------------------------------------------------


def torch_leaves(torch, inputs, dev, dtype):
    def leaf(t):
        return t.detach().to(dev, dtype, copy=True).requires_grad_(True)

    return {n: leaf(t) for n, t in inputs.items() if n != "x"}, leaf(inputs["x"])


def torch_step(torch, spec, inputs, dev, dtype, quant):
    """{name: tensor}: out, loss and grad.* (a weight without a gradient: zeros)."""
    import v4_model

    params, x = torch_leaves(torch, inputs, dev, dtype)
    loss, out = v4_model.model(layer_list(spec), spec["dims"], dev, dtype, quant)(params, x)
    loss.backward()
    res = {"loss": loss.detach().reshape(1), layer_list(spec)[-1][1] + "out": out.detach(), "grad.x": x.grad}
    res.update({"grad." + n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in params.items()})
    return res


def agreement(torch, spec, inputs, tilerun_res, dev, quant, tolerance):
    """Prints relative L2 errors (tilerun and torch fp32 against torch fp32 and fp64); returns
    (ok, {name: error})."""
    ref32 = torch_step(torch, spec, inputs, dev, torch.float32, quant)
    ref64 = torch_step(torch, spec, inputs, dev, torch.float64, quant)
    ok, errors = True, {}
    print(f"\n| tensor ({'as shipped' if quant else 'no fake_quant'}) | torch fp32 vs fp64 | tilerun vs torch fp32 | tolerance |")
    print("|---|---|---|---|")
    for name in sorted(ref32):
        if name not in tilerun_res:
            print(f"| {name} | - | MISSING | {tolerance:.0e} |")
            ok = False
            continue
        got = from_array(torch, *tilerun_res[name])
        e = rel_l2(torch, got, ref32[name])
        errors[name] = e
        ok = ok and e <= tolerance
        print(f"| {name} | {rel_l2(torch, ref32[name], ref64[name]):.2e} | {e:.2e}{'' if e <= tolerance else ' FAIL'} | {tolerance:.0e} |")
    return ok, errors


def check_agreement(torch, args, spec, overrides, inputs, wpath, workdir, dev, report):
    """Steps 2-4 of the docstring; returns the failures."""
    failures = []
    for fmt, block, scale in spec["formats"]:
        if not fake_quant_bits(torch, args, fmt, block, scale, workdir):
            failures.append(f"fake_quant {fmt}: tilerun and torch differ")
    # Unquantised (tight), then as shipped.
    plain = os.path.join(workdir, "unquantised.yaml")
    with open(args.config, encoding="utf-8") as f, open(plain, "w", encoding="utf-8") as out:
        out.write(QUANT_OP.sub(r"{op: scale, in: \1, out: \2, alpha: 1.0}", f.read()))
    check = spec["dims"]["T"] <= 256  # the double reference takes minutes beyond
    # FP8 rounding flips compound from layer to layer (at the small dims two V4-mini layers reach
    # 1e-2 where one stays below 1e-5): past one layer the quantised comparison is printed only.
    depth = len({prefix for _, prefix, _ in layer_list(spec)})
    for quant, config, tol in ((False, plain, PLAIN_TOLERANCE), (True, args.config, QUANT_TOLERANCE)):
        tag = "quantised" if quant else "unquantised"
        res = tilerun_step(args, config, overrides, wpath, workdir, tag, check and not quant)
        if res is None:
            failures.append(f"tilerun ({tag}) failed")
            continue
        ok, errors = agreement(torch, spec, inputs, res, dev, quant, tol)
        report["agreement"][tag] = errors
        if quant and depth > 1:
            print(f"(as shipped, {depth} layers: informative only; the unquantised comparison is the check)")
        elif not ok:
            failures.append(f"tilerun and PyTorch disagree ({tag})")
    return failures


# ---- timing ---------------------------------------------------------------------------------


def cuda_graph_timing(torch, loss_fn, params, x, eager, clear, args):
    """(kernels, host us, device us, None) of one CUDA graph of the whole forward + backward,
    captured after a warm-up on a side stream as PyTorch's docs prescribe (thread_local:
    autograd runs the backward on its own thread)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream().wait_stream(side)
    clear()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        loss_fn(params, x)[0].backward()
    return (kernel_count(torch, graph.replay, True), *time_step(torch, graph.replay, args.steps, args.warmup, True), None)


def torch_timings(torch, spec, inputs, dev, dtype, args):
    """Rows (name, kernels, host us, device us, compile s) for eager, CUDA graph, compile."""
    import v4_model

    cuda = dev.type == "cuda"
    loss_fn = v4_model.model(layer_list(spec), spec["dims"], dev, dtype)
    params, x = torch_leaves(torch, inputs, dev, dtype)
    leaves = list(params.values()) + [x]

    def clear():
        for t in leaves:
            t.grad = None

    def eager():
        clear()
        loss_fn(params, x)[0].backward()

    rows = [("torch eager", kernel_count(torch, eager, cuda), *time_step(torch, eager, args.steps, args.warmup, cuda), None)]

    has_moe = any(k == "moe" for k, _, _ in layer_list(spec))
    if cuda and has_moe and not v4_model.grouped_mm_works(dev, dtype):
        # The loop over experts reads the segment sizes on the host: not capturable.
        print(f"torch CUDA graph: skipped (this torch has no grouped GEMM for {dtype} here)")
    elif cuda:
        try:
            rows.append(("torch CUDA graph", *cuda_graph_timing(torch, loss_fn, params, x, eager, clear, args)))
        except Exception as e:  # reported as a row, the other rows still run
            print(f"torch CUDA graph failed: {type(e).__name__}: {str(e)[:2000]}")
            rows.append(("torch CUDA graph FAILED", None, None, None, None))
    else:
        print("torch CUDA graph: skipped (needs CUDA)")

    for mode in [m for m in args.compile_modes.split(",") if m]:
        torch._dynamo.reset()
        compiled_loss = torch.compile(loss_fn, mode=mode)

        def compiled():
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            clear()
            compiled_loss(params, x)[0].backward()

        try:
            t0 = time.perf_counter()
            compiled()  # compiles the forward and, at backward, the AOT backward
            if cuda:
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            for _ in range(2):
                compiled()
            rows.append((f"torch.compile ({mode})", kernel_count(torch, compiled, cuda),
                         *time_step(torch, compiled, args.steps, args.warmup, cuda), compile_s))
        except Exception as e:  # a compiler failure is reported, not fatal to the other rows
            print(f"torch.compile ({mode}) failed: {type(e).__name__}: {str(e)[:2000]}")
            rows.append((f"torch.compile ({mode}) FAILED", None, None, None, None))
    return rows


def tilerun_timing(args, config, dims, wpath, workdir):
    """Rows of tilerun graph mode from --report: sums over layers and directions, and the
    kernels' own time (CUPTI on a GPU). wpath None: tilerun's initialiser."""
    rep = os.path.join(workdir, "timing.json")
    cmd = tilerun_cmd(args, config, dims, (["--weights", wpath] if wpath else []) + ["--report", rep, "--steps", str(args.steps)])
    if run_tilerun(cmd).returncode != 0:
        return []
    r = json.load(open(rep))
    total = {k: sum(l.get(k) or 0 for l in r["layers"]) for k in ("kernels", "host_us", "device_us", "kernels_us")}
    name = f"tilerun {'graph' if args.device == 'cuda' else 'cpu'}"
    return [(name, total["kernels"], total["host_us"], total["device_us"], (r.get("compile_ms") or 0) / 1e3),
            ("tilerun kernels alone (profiling pass)", total["kernels"], None, total["kernels_us"], None)]


def print_table(rows, title):
    base = rows[0][3] if rows and rows[0][0].startswith("tilerun") and rows[0][3] else None
    print(f"\n{title}\n")
    print("| run | kernels / step | host µs / step | device µs / step | device vs tilerun | compile s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, kernels, host, device, comp in rows:
        def f(v, fmt="{:.1f}"):
            return "-" if v is None else fmt.format(v)
        ratio = f"{device / base:.2f}x" if base and device else "-"
        print(f"| {name} | {f(kernels, '{}')} | {f(host)} | {f(device)} | {ratio} | {f(comp, '{:.2f}')} |")
    print("\nA step: forward and backward, loss 0.5·Σ out² (no optimizer). Medians over the measured "
          "steps; tilerun's rows sum its --report over layers and directions (its step also builds "
          "the RoPE tables and masks in-graph; PyTorch's are constants). torch.compile's compile "
          "time: the wall time of the first compiled step (forward, AOT backward, autotuning).")


# ---- main -----------------------------------------------------------------------------------


def parse_args(root):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.path.join(root, "configs", "v4-attn.yaml"))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="tilerun's device (and torch's by default)")
    p.add_argument("--torch-device", choices=["cuda", "cpu"], default=None, help="torch's device (default: --device)")
    p.add_argument("--tilerun", default=None, help="the tilerun binary (default: on PATH, else build/tilerun)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="a dim of the config (repeatable)")
    p.add_argument("--small", action="store_true", help="the small dims of the CPU checks (T = 32, D = 128, ...)")
    p.add_argument("--T", type=int, default=None, help="tokens (the compressed entries C follow: T/4)")
    p.add_argument("--layers", type=int, default=None, help="repeat every repeatable layer N times (tilerun --layers)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated inputs and weights")
    p.add_argument("--steps", type=int, default=50, help="measured steps per timing row")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured steps before them (torch)")
    p.add_argument("--compile-modes", default="max-autotune,reduce-overhead", help="comma-separated torch.compile modes ('' for none)")
    p.add_argument("--no-timing", action="store_true", help="agreement only")
    p.add_argument("--json", default=None, help="write the agreement errors and timing rows here")
    p.add_argument("--workdir", default=None, help="keep the weights and tilerun's files here")
    args = p.parse_args()
    args.torch_device = args.torch_device or args.device
    args.tilerun = args.tilerun or shutil.which("tilerun") or os.path.join(root, "build", "tilerun")
    return args


def dims_of(args, config):
    text = open(config, encoding="utf-8").read()
    overrides = {k: v for k, v in SMALL.items() if re.search(rf"[{{ ]{k}: \d+", text)} if args.small else {}
    for d in args.dim:
        k, _, v = d.partition("=")
        overrides[k] = int(v)
    if args.T:
        overrides["T"] = args.T
        if re.search(r"[{ ]C: \d+", text):
            overrides["C"] = args.T // 4
        if re.search(r"[{ ]KI: \d+", text):  # V4's 128 picks, fewer when there are fewer entries
            overrides["KI"] = min(128, args.T // 4)
    return overrides


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = parse_args(root)
    if not os.path.exists(args.tilerun) and not shutil.which(args.tilerun):
        print(f"v4mini.py: tilerun not found ({args.tilerun}); pass --tilerun")
        return 2
    try:
        import torch
    except ImportError:
        print("v4mini.py: torch is not installed: skipped")
        return 77
    overrides = dims_of(args, args.config)
    spec = spec_of(args.config, overrides, args.layers)
    if not spec["layers"]:
        print(f"v4mini.py: {args.config}: no attention or MoE layer found")
        return 2
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.torch_device)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[spec["dtype"]]
    print(f"v4mini.py: {args.config} ({', '.join(k + ' ' + p for k, p, _ in layer_list(spec))}) tilerun on {args.device}, "
          f"torch {torch.__version__} on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, "
          f"{spec['dtype']}, TF32 off; dims " + ", ".join(f"{k}={v}" for k, v in spec["dims"].items()))
    workdir = args.workdir or tempfile.mkdtemp(prefix="tilerun_v4mini_")
    os.makedirs(workdir, exist_ok=True)
    failures, report = [], {"config": args.config, "dims": spec["dims"], "agreement": {}}

    inputs = make_inputs(torch, spec, args.seed)
    wpath = None
    if spec["dtype"] == "f32":
        wpath = os.path.join(workdir, "weights.safetensors")
        write_inputs(wpath, inputs)
        failures += check_agreement(torch, args, spec, overrides, inputs, wpath, workdir, dev, report)
    else:  # the .safetensors helpers here write and read F32 only
        print(f"agreement: skipped for a {spec['dtype']} config (tilerun's timing from its own initialiser)")

    if not args.no_timing:
        rows = []
        if args.device == args.torch_device:  # side by side on one device only
            rows = tilerun_timing(args, args.config, overrides, wpath, workdir)
            if not rows:
                failures.append("tilerun's timing run failed")
        rows += torch_timings(torch, spec, inputs, dev, dtype, args)
        print_table(rows, f"{os.path.basename(args.config)} at T = {spec['dims']['T']}, {spec['dtype']}")
        report["timing"] = [dict(zip(("run", "kernels", "host_us", "device_us", "compile_s"), r)) for r in rows]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**report, "failures": failures}, f, indent=1)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    for f in failures:
        print(f"FAILED: {f}")
    print("v4mini.py: " + ("ok" if not failures else f"{len(failures)} failure(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
