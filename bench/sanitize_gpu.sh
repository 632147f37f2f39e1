#!/usr/bin/env bash
# Runs compute-sanitizer's four tools (memcheck, racecheck, synccheck, initcheck) over every
# shipped config (configs/*.yaml) in graph and launch modes, forward + backward with --check and
# the profiling pass (CUPTI must step aside for the sanitizer), and over the GPU test binaries;
# writes one log per run and a summary table. Meant for the GPU host, from the staged bundle
# (../shared/device/stage.sh) or the repository root:
#
#   bench/sanitize_gpu.sh OUT_DIR
#
# Knobs: TILERUN (default: tilerun on PATH, else build/tools/tilerun), TESTS (the GPU test
# binaries, default: session_gpu_test fault_gpu_test cuda_kernel_test, looked up on PATH, then
# in build/tests/cuda/), TOOLS (default: the four), MODES (default: graph launch), CONFIGS
# (default: configs/*.yaml), SANITIZER (default: compute-sanitizer on PATH, else
# /usr/local/cuda/bin/compute-sanitizer), LIMIT (seconds per run, default 1200), EXTRA (more
# tilerun arguments, e.g. "--profile off" to keep CUPTI out whatever it detects).
#
# OUT_DIR receives summary.md (machine, versions, the table: tool, target, mode, result,
# sanitizer errors, seconds) and logs/TOOL.TARGET.MODE.log. A run is "clean" when it exits 0 and
# the sanitizer reports 0 errors; "crash" when it died on a signal (SIGSEGV: exit 139).
# Exit status: 0 when every run is clean, 1 otherwise (every run is attempted regardless).
set -u -o pipefail

if [ $# -ne 1 ]; then
  echo "usage: bench/sanitize_gpu.sh OUT_DIR   (from the repository root or the bundle)" >&2
  exit 2
fi
mkdir -p "$1/logs" || exit 2
OUT=$(cd "$1" && pwd)

find_binary() {  # NAME [FALLBACK...]: the first that exists, on PATH or as a path
  local name
  for name in "$@"; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

SANITIZER=${SANITIZER:-$(find_binary compute-sanitizer /usr/local/cuda/bin/compute-sanitizer)} || {
  echo "sanitize_gpu.sh: compute-sanitizer not found (set SANITIZER=)" >&2
  exit 2
}
TILERUN=${TILERUN:-$(find_binary tilerun build/tools/tilerun)} || {
  echo "sanitize_gpu.sh: tilerun not found (set TILERUN= or source the bundle's env.sh)" >&2
  exit 2
}
TOOLS=${TOOLS:-memcheck racecheck synccheck initcheck}
MODES=${MODES:-graph launch}
CONFIGS=${CONFIGS:-$(ls configs/*.yaml 2>/dev/null)}
TESTS=${TESTS:-session_gpu_test fault_gpu_test cuda_kernel_test}
LIMIT=${LIMIT:-1200}
EXTRA=${EXTRA:-}
if [ -z "$CONFIGS" ]; then
  echo "sanitize_gpu.sh: no configs/*.yaml here: run it from the repository root or the bundle" >&2
  exit 2
fi
# The test binaries read configs/ from the source tree they were built in unless told.
export TILERUN_SOURCE_DIR=${TILERUN_SOURCE_DIR:-$PWD}

SUMMARY=$OUT/summary.md
ROWS=()
DIRTY=0

# sanitize TOOL TARGET MODE COMMAND...: one run under the tool, one row in the table.
sanitize() {
  local tool=$1 target=$2 mode=$3
  shift 3
  local log="$OUT/logs/$tool.$target.$mode.log" start=$SECONDS rc errors result
  local flags=(--tool "$tool" --error-exitcode 99 --print-limit 50 --target-processes all)
  [ "$tool" = memcheck ] && flags+=(--leak-check full)
  echo "=== $SANITIZER ${flags[*]} $*" >"$log"
  timeout --signal=KILL "$LIMIT" "$SANITIZER" "${flags[@]}" "$@" >>"$log" 2>&1
  rc=$?
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
  if [ $rc -eq 0 ] && [ "$errors" -eq 0 ]; then
    result=clean
  elif [ $rc -eq 137 ]; then
    result="timeout (${LIMIT} s)"
  elif [ $rc -gt 128 ] || grep -q -e 'Segmentation fault' -e 'signal 11' "$log"; then
    result="crash (exit $rc)"
  else
    result="errors (exit $rc)"
  fi
  [ "$result" = clean ] || DIRTY=1
  ROWS+=("| $tool | $target | $mode | $result | $errors | $((SECONDS - start)) |")
  echo "$tool $target $mode: $result, $errors errors, $((SECONDS - start)) s" >&2
}

for tool in $TOOLS; do
  for config in $CONFIGS; do
    name=$(basename "$config" .yaml)
    for mode in $MODES; do
      # shellcheck disable=SC2086  # EXTRA is a list of arguments
      sanitize "$tool" "$name.yaml" "$mode" \
        "$TILERUN" "$config" --device cuda --mode "$mode" --steps 1 --check $EXTRA
    done
  done
  for t in $TESTS; do
    bin=$(find_binary "$t" "build/tests/cuda/$t") || {
      ROWS+=("| $tool | $t | - | not found | - | 0 |")
      DIRTY=1
      continue
    }
    sanitize "$tool" "$t" gtest "$bin"
  done
done

{
  echo "# compute-sanitizer over tilerun"
  echo
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(hostname)"
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "sanitizer: $("$SANITIZER" --version 2>/dev/null | tail -1)"
  echo "tilerun: $("$TILERUN" --version 2>/dev/null); extra arguments: ${EXTRA:-none}"
  echo
  echo "| tool | target | mode | result | errors | seconds |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  [ $DIRTY -eq 0 ] && echo "all runs clean" || echo "NOT CLEAN: see logs/ for the runs above"
} >"$SUMMARY"
cat "$SUMMARY"
exit $DIRTY
