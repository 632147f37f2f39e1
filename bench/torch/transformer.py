#!/usr/bin/env python3
"""The causal LM of configs/transformer.yaml in tilerun and in PyTorch, on the same weights.

  1. Generates the i32 token ids, the targets (each the next token) and every weight (seeded,
     Python's own generator, the same file with or without torch) and writes them as
     .safetensors under tilerun's names.
  2. Runs tilerun (graph and launch modes on CUDA, the CPU backend with --device cpu): one step
     of the model without its optimizer with --check (the loss, logits, every gradient) and one
     training step (the weights after one AdamW update). On CUDA, graph and launch must give the
     same bits.
  3. The same step in PyTorch (fp32, TF32 off; and fp64 for scale): the loss, logits and
     gradients must agree within relative L2 1e-4, the AdamW-updated weights within 1e-3 (a
     first Adam step moves each weight by about lr * sign(grad), so a gradient within rounding
     of 0 may step either way).
  4. Times a whole training step (forward, loss, backward, AdamW): tilerun graph mode from its
     --report (the sum over layers and directions of the device time, events around each
     layer's graph, and of the kernels' own time from CUPTI); PyTorch eager, a CUDA graph of the
     whole step (capturable AdamW) and torch.compile (the loss function compiled, the optimizer
     step compiled), each the median of CUDA-event device time and perf_counter host time over
     --steps steps after --warmup. Prints a markdown table.

Exit status: 0 all checks passed, 1 a check or a run failed, 2 bad usage.

  python3 bench/torch/transformer.py --tilerun build/tilerun --device cuda
  python3 bench/torch/transformer.py --tilerun build/tilerun --device cpu --no-timing
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny import read_safetensors  # noqa: E402  (F32 files: all that tilerun saves here)

STEP_TOLERANCE = 1e-4    # loss, logits, gradients: relative L2 against PyTorch fp32
UPDATE_TOLERANCE = 1e-3  # the weights after one AdamW step


def spec_of(config):
    """Dims, block count and hyper-parameters of configs/transformer.yaml (a light text parse)."""
    text = open(config, encoding="utf-8").read()

    def find(pattern, what, cast=float):
        m = re.search(pattern, text, re.M)
        if not m:
            raise SystemExit(f"transformer.py: {config}: cannot find {what}")
        return cast(m.group(1))

    dims = {k: int(v) for k, v in re.findall(r"(\w+):\s*(\d+)", find(r"^dims:\s*\{([^}]*)\}", "dims", str))}
    return {**dims, "blocks": find(r"^\s*repeat:\s*(\d+)", "repeat", int),
            "lr": find(r"adamw:.*\blr:\s*([-+0-9.eE]+)", "adamw lr"),
            "weight_decay": find(r"adamw:.*\bweight_decay:\s*([-+0-9.eE]+)", "adamw weight_decay"),
            "scale": find(r"op: softmax.*\bscale:\s*([-+0-9.eE]+)", "the softmax scale"),
            "rope_step": find(r"out: expo.*\bstep:\s*([-+0-9.eE]+)", "the RoPE exponent step"),
            "mask": find(r"out: mask.*\balpha:\s*([-+0-9.eE]+)", "the mask value"),
            "embedding": re.search(r"op: embedding", text) is not None}


BLOCK_WEIGHTS = ["g1", "wq", "wk", "wv", "wo", "g2", "w1", "w2"]


def weight_shapes(s):
    D, F, V = s["D"], s["F"], s["V"]
    shapes = {}
    for i in range(s["blocks"]):
        for n, shape in zip(BLOCK_WEIGHTS, [(D,), (D, D), (D, D), (D, D), (D, D), (D,), (D, F), (F, D)]):
            shapes[f"block.{i}.{n}"] = shape
    shapes["head.g"], shapes["head.w"] = (D,), (D, V)
    if s["embedding"]:
        shapes["embed.table"] = (V, D)
    return shapes


def make_inputs(s, seed):
    """name -> (shape, array): token ids uniform in [0, V) and the next token as each target (or,
    for a model without an embedding, x ~ N(0, 1) and random targets), norms' gains ~ N(1, 0.1),
    matrices ~ N(0, 1/sqrt(rows))."""
    rng = random.Random(seed)
    T, V = s["T"], s["V"]
    tokens = [rng.randrange(V) for _ in range(T + 1)]
    out = {"targets": ((T,), array.array("i", tokens[1:]))}
    if s["embedding"]:
        out["ids"] = ((T,), array.array("i", tokens[:T]))
    else:
        out["x"] = ((T, s["D"]), array.array("f", (rng.gauss(0, 1) for _ in range(T * s["D"]))))
    for name, shape in weight_shapes(s).items():
        mean, std = (1.0, 0.1) if len(shape) == 1 else (0.0, 1 / math.sqrt(shape[0]))
        out[name] = (shape, array.array("f", (rng.gauss(mean, std) for _ in range(math.prod(shape)))))
    return out


def write_safetensors(path, tensors):
    """F32 ('f') and I32 ('i') arrays, in name order, little-endian."""
    header, offset, names = {}, 0, sorted(tensors)
    for n in names:
        shape, values = tensors[n]
        size = len(values) * values.itemsize
        header[n] = {"dtype": "F32" if values.typecode == "f" else "I32", "shape": list(shape),
                     "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for n in names:
            values = array.array(tensors[n][1].typecode, tensors[n][1])
            if sys.byteorder != "little":
                values.byteswap()
            f.write(values.tobytes())


def run_tilerun(cmd):
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        print(proc.stdout)
    return proc


# ---- PyTorch ----------------------------------------------------------------------------------


def torch_model(torch, s, dev, dtype):
    """loss_fn(params, tokens, targets) -> (loss, logits) for the config's model; tokens are the
    ids (an embedding model) or the float input x."""
    F = torch.nn.functional
    T, H, E, R, D = s["T"], s["H"], s["E"], s["R"], s["D"]
    pos = torch.arange(T, device=dev, dtype=torch.float32)[:, None]
    expo = torch.arange(R, device=dev, dtype=torch.float32)[None, :] * torch.tensor(s["rope_step"], dtype=torch.float32)
    angle = (pos * torch.exp(expo)).to(dtype)
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    future = torch.arange(T, device=dev)[None, :] > torch.arange(T, device=dev)[:, None]
    mask = future.to(dtype) * s["mask"]

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g

    def rope(u):
        a, b = u[..., :R], u[..., R:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def loss_fn(p, tokens, targets):
        x = F.embedding(tokens, p["embed.table"]) if s["embedding"] else tokens
        for i in range(s["blocks"]):
            w = {n: p[f"block.{i}.{n}"] for n in BLOCK_WEIGHTS}
            h = rms(x, w["g1"])
            q, k = rope((h @ w["wq"]).view(T, H, E)), rope((h @ w["wk"]).view(T, H, E))
            v = (h @ w["wv"]).view(T, H, E)
            prob = torch.softmax(torch.einsum("thd,shd->hts", q, k) * s["scale"] + mask, dim=-1)
            x1 = x + torch.einsum("hts,shd->thd", prob, v).reshape(T, D) @ w["wo"]
            x = x1 + F.silu(rms(x1, w["g2"]) @ w["w1"]) @ w["w2"]
        logits = rms(x, p["head.g"]) @ p["head.w"]
        return F.cross_entropy(logits, targets), logits

    return loss_fn


def torch_leaves(torch, inputs, dev, dtype):
    def t(name):
        shape, values = inputs[name]
        return torch.tensor(list(values), dtype=torch.float32).reshape(shape).to(dev, dtype)

    def ids(name):
        return torch.tensor(list(inputs[name][1]), dtype=torch.long, device=dev)

    params = {n: t(n).requires_grad_(True) for n in inputs if n not in ("x", "ids", "targets")}
    tokens = ids("ids") if "ids" in inputs else t("x").requires_grad_(True)
    return params, tokens, ids("targets")


def torch_step(torch, s, inputs, dev, dtype):
    """One step: {name: tensor} with the loss, logits, grad.* and the updated weights."""
    params, x, targets = torch_leaves(torch, inputs, dev, dtype)
    loss, logits = torch_model(torch, s, dev, dtype)(params, x, targets)
    loss.backward()
    out = {"loss": loss.detach().reshape(1), "head.logits": logits.detach()}
    if x.grad is not None:
        out["grad.x"] = x.grad
    out.update({"grad." + n: p.grad for n, p in params.items()})
    opt = torch.optim.AdamW(list(params.values()), lr=s["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=s["weight_decay"])
    opt.step()
    out.update({n: p.detach() for n, p in params.items()})
    return out


def rel_l2(torch, a, ref):
    a, ref = a.double().cpu().flatten(), ref.double().cpu().flatten()
    den = ref.norm().item()
    return (a - ref).norm().item() / (den if den > 0 else 1.0)


def agreement(torch, s, inputs, results, dev):
    """Prints a table of relative L2 errors; returns True when every one is within tolerance."""
    ref32 = torch_step(torch, s, inputs, dev, torch.float32)
    ref64 = torch_step(torch, s, inputs, dev, torch.float64)
    ok = True
    print(f"\n| tensor | torch fp32 vs fp64 | " + " | ".join(f"tilerun {m}" for m in results) + " | tolerance |")
    print("|---|---|" + "---|" * len(results) + "---|")
    for name in sorted(ref32):
        tol = UPDATE_TOLERANCE if name in weight_shapes(s) else STEP_TOLERANCE
        cells = []
        for res in results.values():
            if name not in res:
                cells.append("MISSING")
                ok = False
                continue
            shape, values = res[name]
            got = torch.tensor(list(values), dtype=torch.float64).reshape(shape)
            e = rel_l2(torch, got, ref32[name])
            ok = ok and e <= tol
            cells.append(f"{e:.2e}" + ("" if e <= tol else " FAIL"))
        print(f"| {name} | {rel_l2(torch, ref32[name], ref64[name]):.2e} | " + " | ".join(cells) + f" | {tol:.0e} |")
    return ok


# ---- timing -----------------------------------------------------------------------------------


def time_step(torch, fn, steps, warmup, cuda):
    """Medians of (host us, device us) per call of fn: perf_counter around issuing it, CUDA
    events around it (on the CPU both are the wall time)."""
    hosts, devices = [], []
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if cuda else None
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        if cuda:
            ev[0].record()
        fn()
        if cuda:
            ev[1].record()
        t1 = time.perf_counter()
        if cuda:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= warmup:
            hosts.append((t1 - t0) * 1e6)
            devices.append(ev[0].elapsed_time(ev[1]) * 1e3 if cuda else (t2 - t0) * 1e6)
    return statistics.median(hosts), statistics.median(devices)


def kernel_count(torch, fn, cuda):
    """Device kernels of one call of fn from torch.profiler (None where it gives nothing)."""
    if not cuda:
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")) or None
    except Exception as e:  # informative only
        print(f"(profiler kernel count unavailable: {e})")
        return None


def torch_timings(torch, s, inputs, dev, args):
    """Rows (name, kernels, host us, device us) for eager, CUDA graph and torch.compile steps."""
    cuda = dev.type == "cuda"
    rows = []

    def setup(**opt_kwargs):
        params, x, targets = torch_leaves(torch, inputs, dev, torch.float32)
        opt = torch.optim.AdamW(list(params.values()), lr=s["lr"], betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=s["weight_decay"], **opt_kwargs)
        return params, x, targets, opt

    loss_fn = torch_model(torch, s, dev, torch.float32)

    # Eager: the whole step op by op, AdamW's foreach implementation.
    params, x, targets, opt = setup(foreach=True)

    def eager():
        opt.zero_grad(set_to_none=True)
        x.grad = None
        loss_fn(params, x, targets)[0].backward()
        opt.step()

    rows.append(("torch eager", kernel_count(torch, eager, cuda), *time_step(torch, eager, args.steps, args.warmup, cuda)))

    # CUDA graph of the whole step (forward, backward, a capturable AdamW), captured after a
    # warm-up on a side stream as PyTorch's docs prescribe; a replay reruns every kernel.
    if cuda:
        params, x, targets, opt = setup(capturable=True, foreach=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_like = loss_fn(params, x, targets)[0]
                opt.zero_grad(set_to_none=True)
                x.grad = None
                eager_like.backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        opt.zero_grad(set_to_none=True)
        x.grad = None
        graph = torch.cuda.CUDAGraph()
        # thread_local: autograd runs backward on its own thread.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            loss_fn(params, x, targets)[0].backward()
            opt.step()
        rows.append(("torch CUDA graph", kernel_count(torch, graph.replay, cuda),
                     *time_step(torch, graph.replay, args.steps, args.warmup, cuda)))

    # torch.compile: the loss function (forward and its AOT backward) and the optimizer step.
    params, x, targets, opt = setup(foreach=True)
    compiled_loss = torch.compile(loss_fn, mode=args.compile_mode)

    @torch.compile(mode=args.compile_mode)
    def compiled_opt_step():
        opt.step()

    def compiled():
        opt.zero_grad(set_to_none=True)
        x.grad = None
        compiled_loss(params, x, targets)[0].backward()
        compiled_opt_step()

    try:
        for _ in range(3):  # compile outside the timing
            compiled()
        rows.append((f"torch.compile ({args.compile_mode})", kernel_count(torch, compiled, cuda),
                     *time_step(torch, compiled, args.steps, args.warmup, cuda)))
    except Exception as e:  # a compiler failure is reported, not fatal to the other rows
        print(f"torch.compile failed: {type(e).__name__}: {e}")
    return rows


def tilerun_timing(args, tilerun, wpath, workdir):
    """Row of tilerun graph mode from --report: sums over layers and directions (forward,
    backward, update); also the kernels' own time (CUPTI on a GPU)."""
    rep = os.path.join(workdir, "timing.json")
    cmd = [tilerun, args.config, "--device", args.device, "--weights", wpath, "--report", rep,
           "--steps", str(args.steps)]
    if args.device == "cuda":
        cmd += ["--mode", "graph"]
    if run_tilerun(cmd).returncode != 0:
        return []
    layers = json.load(open(rep))["layers"]
    total = {k: sum(l.get(k) or 0 for l in layers) for k in ("kernels", "host_us", "device_us", "kernels_us")}
    return [(f"tilerun {'graph' if args.device == 'cuda' else 'cpu'}", total["kernels"], total["host_us"], total["device_us"]),
            ("tilerun kernels alone (profiling pass)", total["kernels"], None, total["kernels_us"])]


def print_table(rows):
    base = rows[0][3] if rows and rows[0][3] else None
    print("\n| run | kernels / step | host µs / step | device µs / step | device vs tilerun |")
    print("|---|---:|---:|---:|---:|")
    for name, kernels, host, device in rows:
        def f(v):
            return "-" if v is None else f"{v:.1f}"
        ratio = f"{device / base:.2f}x" if base and device else "-"
        print(f"| {name} | {kernels if kernels is not None else '-'} | {f(host)} | {f(device)} | {ratio} |")
    print("\nA step: forward, cross-entropy, backward, AdamW. Medians over the measured steps; tilerun's "
          "rows sum its --report over layers and directions (its step also rebuilds the mask and RoPE "
          "tables in-graph; PyTorch's are constants).")


# ---- main -------------------------------------------------------------------------------------


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=os.path.join(root, "configs", "transformer.yaml"))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="for tilerun and torch alike")
    p.add_argument("--tilerun", default=None, help="the tilerun binary (default: on PATH, else build/tilerun)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated inputs and weights")
    p.add_argument("--steps", type=int, default=200, help="measured steps per timing row")
    p.add_argument("--warmup", type=int, default=20, help="unmeasured steps before them (torch)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode: default, reduce-overhead, max-autotune-no-cudagraphs, ...")
    p.add_argument("--no-torch", action="store_true", help="tilerun only: its runs and bit-identity checks")
    p.add_argument("--no-timing", action="store_true", help="agreement only")
    p.add_argument("--workdir", default=None, help="keep the weights and tilerun's files here")
    args = p.parse_args()

    tilerun = args.tilerun or shutil.which("tilerun") or os.path.join(root, "build", "tilerun")
    if not os.path.exists(tilerun) and not shutil.which(tilerun):
        print(f"transformer.py: tilerun not found ({tilerun}); pass --tilerun")
        return 2
    s = spec_of(args.config)
    print(f"transformer.py: {args.config} on {args.device}: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    workdir = args.workdir or tempfile.mkdtemp(prefix="tilerun_lm_")
    os.makedirs(workdir, exist_ok=True)
    failures = []

    inputs = make_inputs(s, args.seed)
    wpath = os.path.join(workdir, "weights.safetensors")
    write_safetensors(wpath, inputs)

    # In each tilerun mode: a step of the model without its optimizer (the loss, logits and
    # gradients at the generated weights; the first run with --check), and one training step
    # (the weights after one AdamW update). Two runs, because the CLI saves the outputs and
    # gradients of its last pass, which after training is one at the trained weights.
    plain = os.path.join(workdir, "no_optimizer.yaml")
    with open(args.config, encoding="utf-8") as f:
        text = f.read()
    with open(plain, "w", encoding="utf-8") as f:
        f.write(re.sub(r"^optimizer:.*$", "", text, flags=re.M))
    results = {}
    for i, mode in enumerate(["graph", "launch"] if args.device == "cuda" else ["cpu"]):
        res = {}
        for config, what in ((plain, "step"), (args.config, "update")):
            save = os.path.join(workdir, f"{mode}_{what}.safetensors")
            rep = os.path.join(workdir, f"{mode}_{what}.json")
            cmd = [tilerun, config, "--device", args.device, "--weights", wpath, "--save", save,
                   "--report", rep, "--steps", "1"] + (["--mode", mode] if args.device == "cuda" else [])
            if run_tilerun(cmd + (["--check"] if i == 0 and what == "step" else [])).returncode != 0:
                failures.append(f"tilerun ({mode}, {what}) failed")
                continue
            saved = read_safetensors(save)
            if what == "step":
                res.update(saved)
                res["loss"] = ((1,), array.array("f", [json.load(open(rep))["loss"]["total"]]))
            else:
                res.update({n: saved[n] for n in weight_shapes(s) if n in saved})
        results[mode] = res
    if len(results) == 2:
        same = results["graph"] == results["launch"]
        print(f"tilerun graph and launch: {'bit-identical' if same else 'DIFFERENT'}")
        if not same:
            failures.append("tilerun graph and launch results are not bit-identical")

    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
            failures.append("torch is not installed (pass --no-torch for tilerun only)")
        if torch is not None:
            if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
                torch.backends.cuda.matmul.fp32_precision = "ieee"
            else:
                torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            dev = torch.device(args.device)
            print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}; TF32 off")
            if results and not agreement(torch, s, inputs, results, dev):
                failures.append("tilerun and PyTorch disagree")
            rows = []
            if not args.no_timing:
                rows = tilerun_timing(args, tilerun, wpath, workdir) + torch_timings(torch, s, inputs, dev, args)
                print_table(rows)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    for f in failures:
        print(f"FAILED: {f}")
    print("transformer.py: " + ("ok" if not failures else f"{len(failures)} failure(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
