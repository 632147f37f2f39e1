#!/usr/bin/env python3
"""configs/v4-attn.yaml, small (the --dim values below), on the CPU:

  1. with every fake_quant replaced by the identity, forward and backward match the double
     reference (`--check`): every op of the attention half and its gradient, composed, with two
     attention layers (`--layers 2`: the streams carried from one into the next);
  2. as shipped, with FP8 fake quantisation, a training-free step runs to a finite loss within 2%
     of the unquantised one. (`--check` does not apply there: an f32 activation and its double
     reference land on different FP8 values wherever they straddle a rounding boundary, so the
     composed error is the quantiser's step, not the kernels'.)

  python3 tests/tools/v4_attn_check.py --tilerun build/tilerun --config configs/v4-attn.yaml
"""

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

SMALL = ["T=32", "D=128", "ND=512", "C=8", "Q=128", "H=4", "HE=2048", "GK=1024", "O=128"]
QUANT = re.compile(r"\{op: fake_quant, in: (\w+), out: (\w+), format: \w+, block: \d+\}")


def run(tilerun, config, extra):
    args = [tilerun, config, "--device", "cpu"] + [a for d in SMALL for a in ("--dim", d)] + extra
    p = subprocess.run(args, capture_output=True, text=True)
    print("$ " + " ".join(args))
    print(p.stdout[-600:] + p.stderr[-600:])
    m = re.search(r"^loss (\S+)$", p.stdout, re.M)
    return p.returncode, float(m.group(1)) if m else math.nan, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tilerun", required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args()
    text = open(a.config).read()
    plain, n = QUANT.subn(r"{op: scale, in: \1, out: \2, alpha: 1.0}", text)
    if n < 5:
        print(f"expected the 5 fake_quant ops of the config, found {n}")
        return 1
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "v4-attn-unquantised.yaml")
        open(path, "w").write(plain)
        rc, _, out = run(a.tilerun, path, ["--check", "--layers", "2"])
        if rc != 0 or "check: ok" not in out:
            print("FAILED: two unquantised attention layers do not match the double reference")
            return 1
        rc, loss_plain, out = run(a.tilerun, path, ["--check"])
        if rc != 0 or "check: ok" not in out:
            print("FAILED: the unquantised attention half does not match the double reference")
            return 1
    rc, loss_q, _ = run(a.tilerun, a.config, [])
    if rc != 0 or not math.isfinite(loss_q):
        print("FAILED: the quantised attention half did not run to a finite loss")
        return 1
    drift = abs(loss_q - loss_plain) / abs(loss_plain)
    print(f"loss unquantised {loss_plain}, FP8 {loss_q}: relative difference {drift:.2e}")
    if not drift < 0.02:
        print("FAILED: FP8 fake quantisation moved the loss by more than 2%")
        return 1
    print("v4_attn_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
