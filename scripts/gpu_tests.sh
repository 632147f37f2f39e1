#!/usr/bin/env bash
# Runs a GoogleTest binary (session_gpu_test: ~2400 cases, ~2600 s of single-threaded work on
# the H200) in parallel shards under a time limit, and says what did not get to run, so that a
# device call cut short can be resumed by the next one instead of starting over.
#
#   scripts/gpu_tests.sh BINARY OUT_DIR [SHARDS [SECONDS]]
#
# SHARDS (default 8) processes of BINARY at once, each under `timeout SECONDS` (default 400), each
# running every SHARDS-th case of the selection (GTEST_FILTER in the environment, default every
# case; a resume file below works as it). Writes to OUT_DIR:
#   shard_<i>.log   each shard's output
#   summary.txt     cases selected, passed, failed, skipped, not reached; the failed cases' names
#   rest.filter     the cases not reached, as a --gtest_filter (empty when all ran): resume with
#                   GTEST_FILTER="$(cat OUT_DIR/rest.filter)" scripts/gpu_tests.sh BINARY OUT2
# Exit status: 0 when every selected case passed or was skipped, 1 on a failure, 3 when cases were
# left unreached (and none failed), 2 on bad usage.
set -u -o pipefail

if [ $# -lt 2 ] || [ $# -gt 4 ]; then
  echo "usage: scripts/gpu_tests.sh BINARY OUT_DIR [SHARDS [SECONDS]]" >&2
  exit 2
fi
BIN=$1
OUT=$2
SHARDS=${3:-8}
LIMIT=${4:-400}
if [ ! -x "$BIN" ]; then
  echo "gpu_tests.sh: $BIN is not an executable" >&2
  exit 2
fi
case "$SHARDS$LIMIT" in
  *[!0-9]*) echo "gpu_tests.sh: SHARDS and SECONDS must be positive integers" >&2; exit 2 ;;
esac
if [ "$SHARDS" -lt 1 ] || [ "$LIMIT" -lt 1 ]; then
  echo "gpu_tests.sh: SHARDS and SECONDS must be positive integers" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
FILTER=${GTEST_FILTER:-*}
unset GTEST_FILTER

# The selection, one full name a line (Suite.Case/param), in the binary's order.
"$BIN" --gtest_list_tests --gtest_filter="$FILTER" >"$OUT/list.txt" 2>/dev/null || {
  echo "gpu_tests.sh: $BIN --gtest_list_tests failed" >&2
  exit 2
}

pids=()
for ((i = 0; i < SHARDS; ++i)); do
  GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout "$LIMIT" "$BIN" \
    --gtest_filter="$FILTER" >"$OUT/shard_$i.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

python3 - "$OUT" "$SHARDS" <<'EOF'
import re, sys
out, shards = sys.argv[1], int(sys.argv[2])
selected, suite = [], None
for line in open(f"{out}/list.txt"):
    line = line.split("#")[0].rstrip()
    if not line:
        continue
    if not line.startswith(" "):
        suite = line.strip()
    else:
        selected.append(suite + line.strip())
status = {}
for i in range(shards):
    for line in open(f"{out}/shard_{i}.log", errors="replace"):
        m = re.match(r"\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+) \(\d+ ms\)", line)
        if m:
            status[m.group(2)] = m.group(1)
passed = [n for n in selected if status.get(n) == "OK"]
failed = [n for n in selected if status.get(n) == "FAILED"]
skipped = [n for n in selected if status.get(n) == "SKIPPED"]
rest = [n for n in selected if n not in status]
with open(f"{out}/rest.filter", "w") as f:
    f.write(":".join(rest))
lines = [f"selected {len(selected)}, passed {len(passed)}, failed {len(failed)}, "
         f"skipped {len(skipped)}, not reached {len(rest)}"]
lines += [f"FAILED {n}" for n in failed]
if rest:
    lines.append(f"resume: GTEST_FILTER=\"$(cat {out}/rest.filter)\" (the {len(rest)} not reached)")
open(f"{out}/summary.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if failed else 3 if rest else 0)
EOF
