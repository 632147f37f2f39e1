#!/usr/bin/env python3
"""The README's example output, produced by running the command line it shows.

    scripts/readme_example.py [--tilerun PATH]           print the example (command and output)
    scripts/readme_example.py [--tilerun PATH] --update  write it into README.md
    scripts/readme_example.py [--tilerun PATH] --check   exit 1 unless README.md shows it

The example is `tilerun configs/tiny.yaml --check --device cpu` (the CPU, so that it is the same
on every machine). --check compares it with the README's block modulo the timings, which vary
from run to run: every number followed by "ms" in the two summary lines, and the time columns
of the table, become "#" on both sides, and runs of spaces one space. Everything else (kernel
counts, arena sizes, proof and query counts, the check line) must match exactly.
"""
import argparse
import difflib
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
README = os.path.join(ROOT, "README.md")
ARGS = ["configs/tiny.yaml", "--check", "--device", "cpu"]
MARKER = "scripts/readme_example.py"  # in the comment right above the block


def example(tilerun):
    run = subprocess.run([tilerun] + ARGS, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"readme_example: tilerun exited {run.returncode}:\n{run.stderr}{run.stdout}")
    return "$ build/tilerun " + " ".join(ARGS) + "\n" + run.stdout


TIME = r"-?[0-9]+(?:\.[0-9]+)?"
TABLE_ROW = re.compile(rf"^(\S+ +(?:forward|backward)? +[0-9]+)((?: +{TIME}){{4}})$")


def without_timings(text):
    lines = []
    for line in text.splitlines():
        line = re.sub(rf"{TIME}( ?)(%|ms)", r"#\1\2", line)
        line = TABLE_ROW.sub(lambda m: m.group(1) + " # # # #", line)
        line = re.sub(rf"^(host us per kernel:) {TIME}$", r"\1 #", line)
        # How many verdicts the on-disk cache held depends on what ran before, like a timing.
        line = re.sub(r"\([0-9]+ from the disk cache\)", "(# from the disk cache)", line)
        # So do the kernels the lowering cache answered, and with them the Z3 queries asked.
        line = re.sub(r"[0-9]+ Z3 queries", "# Z3 queries", line)
        line = re.sub(r"\([0-9]+ of ([0-9]+) kernels from the lowering cache\)",
                      r"(# of \1 kernels from the lowering cache)", line)
        lines.append(re.sub(" +", " ", line).rstrip())
    return lines


def readme_block(text):
    """(start, end) of the fenced block after the marker comment: the lines between the fences."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if MARKER in line:
            start = next(j for j in range(i, len(lines)) if lines[j].startswith("```")) + 1
            end = next(j for j in range(start, len(lines)) if lines[j].startswith("```"))
            return lines, start, end
    sys.exit(f"readme_example: no block marked '{MARKER}' in {README}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tilerun", default=os.path.join(ROOT, "build", "tilerun"))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args()

    fresh = example(args.tilerun)
    if not args.update and not args.check:
        sys.stdout.write(fresh)
        return 0
    with open(README, encoding="utf-8") as f:
        text = f.read()
    lines, start, end = readme_block(text)
    if args.update:
        lines[start:end] = fresh.rstrip("\n").split("\n")
        with open(README, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        return 0
    shown = without_timings("\n".join(lines[start:end]))
    ran = without_timings(fresh)
    if shown == ran:
        print("README.md's example matches a fresh run (timings aside)")
        return 0
    sys.stdout.writelines(difflib.unified_diff([l + "\n" for l in shown], [l + "\n" for l in ran],
                                               "README.md", "fresh run"))
    print("README.md's example is stale: run scripts/readme_example.py --update")
    return 1


if __name__ == "__main__":
    sys.exit(main())
