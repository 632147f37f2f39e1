#!/usr/bin/env python3
"""Writes configs/v4-mini.yaml, the whole V4-mini layer, from its two halves, so the three files
cannot drift apart: the ops of configs/v4-attn.yaml and configs/v4-moe.yaml in one repeated
block (attention then MoE, so `repeat` and --layers N stack whole layers), in mixed precision as
V4 runs it: bf16 activations and weights (the GEMMs on the tensor cores), with the mHC streams,
the mHC ops' weights, the norms before them, the router and the RoPE/mask tables in f32 (casts
at the boundaries).

  python3 tools/gen_v4_mini.py            # rewrite configs/v4-mini.yaml
  python3 tools/gen_v4_mini.py --check    # exit 1 if configs/v4-mini.yaml is not what it writes
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The MoE half's names that the attention half also uses: an f (FFN) prefix in the block.
RENAME = {"y": "fy", "post": "fpost", "comb": "fcomb", "h": "fh", "hq": "fhq", "f": "ff",
          "scores": "rscores", "hc_fn": "fhc_fn", "hc_scale": "fhc_scale",
          "hc_base": "fhc_base", "x": "xa"}

# Text edits that make each part mixed precision: (old, new), each must match exactly once.
TABLES_BF16 = [
    ("      - {op: cos, in: angle, out: cos}",
     "      - {op: cos, in: angle, out: cos32}\n      - {op: cast, in: cos32, out: cos, to: bf16}"),
    ("      - {op: sin, in: angle, out: sin}",
     "      - {op: sin, in: angle, out: sin32}\n      - {op: cast, in: sin32, out: sin, to: bf16}"),
    ("      - {op: cos, in: cangle, out: ccos}",
     "      - {op: cos, in: cangle, out: ccos32}\n      - {op: cast, in: ccos32, out: ccos, to: bf16}"),
    ("      - {op: sin, in: cangle, out: csin}",
     "      - {op: sin, in: cangle, out: csin32}\n      - {op: cast, in: csin32, out: csin, to: bf16}"),
    ("      - {op: scale, in: cfuturef, out: cmask, alpha: -1.0e9}",
     "      - {op: scale, in: cfuturef, out: cmask32, alpha: -1.0e9}\n"
     "      - {op: cast, in: cmask32, out: cmask, to: bf16}"),
    ("      - {op: scale, in: h128, out: hadamard, alpha: 0.08838834764831845}",
     "      - {op: scale, in: h128, out: hadamard32, alpha: 0.08838834764831845}\n"
     "      - {op: cast, in: hadamard32, out: hadamard, to: bf16}"),
    ("{op: fill, out: ones_e, shape: [E], value: 1.0}",
     "{op: fill, out: ones_e, shape: [E], value: 1.0, dtype: bf16}"),
    ("{op: fill, out: ck_pad, shape: [1, 4, E], value: 0}",
     "{op: fill, out: ck_pad, shape: [1, 4, E], value: 0, dtype: bf16}"),
    ("{op: fill, out: cg_pad, shape: [1, 4, E], value: -1.0e9}",
     "{op: fill, out: cg_pad, shape: [1, 4, E], value: -1.0e9, dtype: bf16}"),
    ("{op: fill, out: ik_pad, shape: [1, 4, ID], value: 0}",
     "{op: fill, out: ik_pad, shape: [1, 4, ID], value: 0, dtype: bf16}"),
    ("{op: fill, out: ig_pad, shape: [1, 4, ID], value: -1.0e9}",
     "{op: fill, out: ig_pad, shape: [1, 4, ID], value: -1.0e9, dtype: bf16}"),
    ("{op: fill, out: ttiny, shape: [1], value: 1.0e-30}",
     "{op: fill, out: ttiny, shape: [1], value: 1.0e-30, dtype: bf16}"),
]
ATTN_BF16 = [
    ("hc_fn:   {shape: [ND, M],", "hc_fn:   {shape: [ND, M], dtype: f32,"),
    ("hc_scale: {shape: [3],", "hc_scale: {shape: [3], dtype: f32,"),
    ("hc_base: {shape: [M],", "hc_base: {shape: [M], dtype: f32,"),
    ("g_in:    {shape: [D],", "g_in:    {shape: [D], dtype: f32,"),
    ("      - {op: rmsnorm, in: [y, g_in], out: h}\n",
     "      - {op: rmsnorm, in: [y, g_in], out: h32}\n      - {op: cast, in: h32, out: h, to: bf16}\n"),
    ("      - {op: take_along_axis, in: [tables.cmask, ipick], out: cbias}",
     "      - {op: take_along_axis, in: [tables.cmask32, ipick], out: cbias}"),
    ("      - {op: concat, in: [tables.wbias, cbias], out: sbias, axis: 1}",
     "      - {op: concat, in: [tables.wbias, cbias], out: sbias32, axis: 1}\n"
     "      - {op: cast, in: sbias32, out: sbias, to: bf16}"),
    ("      - {op: hc_post, in: [f, x, post, comb], out: out}",
     "      - {op: cast, in: f, out: f32, to: f32}\n"
     "      - {op: hc_post, in: [f32, x, post, comb], out: xa}"),
]
MOE_BF16 = [
    ("fhc_fn:    {shape: [ND, M],", "fhc_fn:    {shape: [ND, M], dtype: f32,"),
    ("fhc_scale: {shape: [3],", "fhc_scale: {shape: [3], dtype: f32,"),
    ("fhc_base:  {shape: [M],", "fhc_base:  {shape: [M], dtype: f32,"),
    ("g_ffn:    {shape: [D],", "g_ffn:    {shape: [D], dtype: f32,"),
    ("w_gate:   {shape: [D, XE],", "w_gate:   {shape: [D, XE], dtype: f32,"),
    ("e_bias:   {shape: [XE],", "e_bias:   {shape: [XE], dtype: f32,"),
    ("      - {op: fake_quant, in: fh, out: fhq,",
     "      - {op: cast, in: fh, out: fhb, to: bf16}\n      - {op: fake_quant, in: fhb, out: fhq,"),
    ("      - {op: reshape, in: route_w, out: route_w1, shape: [-1, 1]}",
     "      - {op: cast, in: route_w, out: route_wb, to: bf16}\n"
     "      - {op: reshape, in: route_wb, out: route_w1, shape: [-1, 1]}"),
    ("      - {op: hc_post, in: [ff, xa, fpost, fcomb], out: out}",
     "      - {op: cast, in: ff, out: ff32, to: f32}\n"
     "      - {op: hc_post, in: [ff32, xa, fpost, fcomb], out: out}"),
]

HEADER = """# GENERATED by tools/gen_v4_mini.py from configs/v4-attn.yaml and configs/v4-moe.yaml: edit those
# (or the generator) and run it again; ctest v4_mini_generated fails when this file is stale.
#
# The V4-mini layer (../shared/V4_LAYER.md steps 1-11): the attention half and the MoE half in
# one block, so that `repeat` (and tilerun --layers N) stacks whole layers, attention then MoE,
# each with its own weights. Mixed precision as V4 runs it: bf16 activations and weights (the
# GEMMs on the tensor cores), f32 for the mHC streams and the mHC ops' weights, the norms before
# them, the router (its GEMM, scores, top-6, weights) and the RoPE and mask tables, with casts
# between.
# The MoE half's tensors that share a name with the attention half's take an f prefix (fy, fh,
# fhq, ff, fhc_fn, rscores, ...); it reads the attention half's output xa.
#
#   tilerun configs/v4-mini.yaml --dim T=1024 --dim C=256 --dim KI=128  # on the H200 (C = T/4)
#   tilerun configs/v4-mini.yaml --device cpu --check                # T = 256 (slow on the CPU)
#   ctest cli_v4_mini_check: small, unquantised against the double reference, and quantised
model: v4_mini
dtype: bf16
# Attention: T tokens, N mHC streams, D width, ND = N·D, M = 2N + N² mixes, Q q_lora, H heads,
# E head dim, HE = H·E, P = E - 64, R = 32 rotary pairs, C = T/4 compressed entries, G output
# groups, GK = HE/G, O o_lora. MoE: XE experts, F expert inter, F2 = 2F.
"""


def section(text, start, end, after=0):
    i = text.index(start, after)
    return text[i:text.index(end, i)]


def edit(text, edits, what):
    for old, new in edits:
        if text.count(old) != 1:
            sys.exit(f"gen_v4_mini: expected one '{old.strip()}' in {what}, found "
                     f"{text.count(old)}: the halves changed, update the generator")
        text = text.replace(old, new)
    return text


def rename(text):
    out = []
    for line in text.splitlines(True):
        code, sep, comment = line.partition("#")
        code = re.sub(r"(?<![\w.])[A-Za-z_]\w*(?![\w(])", lambda m: RENAME.get(m[0], m[0]), code)
        out.append(code + sep + comment)
    return "".join(out)


def generate():
    attn = open(os.path.join(ROOT, "configs/v4-attn.yaml")).read()
    moe = open(os.path.join(ROOT, "configs/v4-moe.yaml")).read()
    at = attn.index("  - name: attn")
    dims = re.search(r"^dims: \{(.*?)\}", attn, re.S | re.M)[1].strip()
    moe_dims = re.search(r"^dims: \{(.*?)\}", moe, re.S | re.M)[1]
    extra = ", ".join(d.strip() for d in moe_dims.split(",")
                      if d.split(":")[0].strip() in ("XE", "F", "F2"))
    tables = edit(section(attn, "  - name: tables\n", "  - name: attn\n"), TABLES_BF16, "tables")
    a_w = section(attn, "    weights:\n", "    ops:\n", at).replace("    weights:\n", "")
    a_ops = section(attn, "    ops:\n", "\noutputs:", at).replace("    ops:\n", "")
    a_ops, a_loss = a_ops.split("    loss:\n")  # the indexer's term, after the whole block
    m_at = moe.index("  - name: moe")
    m_w = rename(section(moe, "    weights:\n", "    ops:\n", m_at).replace("    weights:\n", ""))
    m_ops = rename(section(moe, "    ops:\n", "\noutputs:", m_at).replace("    ops:\n", ""))
    attn_part = edit(a_w + "    ops:\n" + a_ops, ATTN_BF16, "the attention half")
    a_w, a_ops = attn_part.split("    ops:\n")
    moe_part = edit(m_w + "    ops:\n" + m_ops, MOE_BF16, "the MoE half")
    m_w, m_ops = moe_part.split("    ops:\n")
    return (HEADER + "dims: {" + dims + ",\n       " + extra + "}\n\n" +
            "inputs:\n  x: {shape: [T, N, D], dtype: f32}                       # the residual streams\n\n" +
            "layers:\n" + tables +
            "  - name: block\n    repeat: 2                 # tilerun --layers N: N whole layers\n" +
            "    carry: {x: out}\n    weights:\n" + a_w + m_w + "    ops:\n" +
            "      # ---- The attention half (configs/v4-attn.yaml) ----\n" + a_ops +
            "\n      # ---- The MoE half (configs/v4-moe.yaml), on the attention half's output xa ----\n" +
            m_ops + "    loss:\n" + a_loss + "\noutputs: [block.out]\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    a = ap.parse_args()
    text = generate()
    path = os.path.join(ROOT, "configs/v4-mini.yaml")
    if a.check:
        current = open(path).read() if os.path.exists(path) else ""
        if current != text:
            print(f"{path} is stale: run python3 tools/gen_v4_mini.py")
            return 1
        print(f"{path} is up to date")
        return 0
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
