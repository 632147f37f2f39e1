#!/usr/bin/env python3
"""The project's arrows point down: a file includes only headers of its own layer or below.

Layers, lowest first (a path's layer is its longest matching prefix below). Also checks that
no source file is over 600 lines unless its first lines say why ("over 600 lines:").
Exit 0 when clean, 1 with one line per violation.
"""
import os
import re
import sys

LAYERS = [
    # (rank, path prefix)
    (0, "include/tilerun/dtype.h"), (0, "include/tilerun/error.h"),
    (0, "include/tilerun/tensor.h"), (0, "include/tilerun/model.h"),
    (0, "include/tilerun/run_options.h"), (0, "include/tilerun/ops.h"),
    (0, "compiler/base/"),
    (1, "compiler/ir/"),
    (2, "compiler/analysis/"),
    (3, "compiler/transforms/"),
    (4, "compiler/lower."), (4, "compiler/lower_cache."), (4, "compiler/pipeline."),
    (5, "compiler/codegen/"),
    (6, "compiler/dump."),
    (7, "kernels/"),
    (8, "graph/model/"),
    (9, "graph/"),
    (10, "graph/runtime/"),
    (11, "include/tilerun/session.h"), (11, "include/tilerun/tilerun.h"),
    (11, "graph/runtime/session.cc"),
    (12, "tools/"),
]
NAMES = {0: "base", 1: "compiler/ir", 2: "compiler/analysis", 3: "compiler/transforms",
         4: "compiler pipeline", 5: "compiler/codegen", 6: "compiler dump", 7: "kernels",
         8: "graph/model", 9: "graph core", 10: "graph/runtime", 11: "the Session facade",
         12: "tools"}
MAX_LINES = 600


def rank(path):
    best = None
    for r, prefix in LAYERS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best[1])):
            best = (r, prefix)
    return None if best is None else best[0]


def header_path(inc):
    return inc if not inc.startswith("tilerun/") else "include/" + inc


def main(root):
    problems = []
    for top in ("compiler", "graph", "kernels", "include", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".h", ".cc", ".cu")):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, root)
                mine = rank(rel)
                with open(full, encoding="utf-8") as fh:
                    lines = fh.read().split("\n")
                if len(lines) > MAX_LINES and not any("over 600 lines:" in l for l in lines[:12]):
                    problems.append(f"{rel}: {len(lines)} lines and no 'over 600 lines:' reason at its top")
                if mine is None:
                    continue
                for n, line in enumerate(lines, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m:
                        continue
                    theirs = rank(header_path(m.group(1)))
                    if theirs is not None and theirs > mine:
                        problems.append(f"{rel}:{n}: {NAMES[mine]} includes {m.group(1)} "
                                        f"from {NAMES[theirs]}, a layer above it")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
