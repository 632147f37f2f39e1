#!/usr/bin/env bash
# Runs every tilerun benchmark unattended on a GPU host and writes the results to OUT_DIR.
#
#   bench/run_gpu.sh OUT_DIR
#
# Run from the repository root, with `tilerun` and `tilerun_launch_bench` on PATH (or named by
# TILERUN= and TILERUN_LAUNCH_BENCH=) and, for the PyTorch comparison, python3 with torch
# (PYTHON= names another interpreter). Other knobs: STEPS (default 200), DEVICE (cuda; cpu runs
# the same on the CPU backend, to test this script on a machine without a GPU), LIMIT (seconds
# per command, default 300), PEAK_GBPS (the bandwidth of the summary's bytes-floor column,
# default 4800: the H200's HBM3e data-sheet figure).
#
# OUT_DIR receives 8 files (10 on a GPU with torch):
#   summary.txt            machine, versions, a digest of every tilerun run, failures
#   tilerun.log            the console output of every tilerun run
#   tilerun_reports.json   every --report (and --trace where the CLI has it), keyed by run name
#   launch_bench.log       tilerun_launch_bench's console table
#   launch_bench.json      its Google Benchmark JSON (medians as counters)
#   torch.log              bench/torch/tiny.py's output (agreement check and comparison table)
#   torch_comparison.json  the same as JSON
#   transformer.log        bench/torch/transformer.py's output (the LM: agreement, step timing table)
#   selection.log/.json    bench/torch/selection.py: top-k, KV gather, MoE counting sort at T = 4096
#                          against torch.topk, indexing and torch.sort
# Exit status: 0 when every run succeeded, 1 otherwise (every run is attempted regardless).
set -u -o pipefail

if [ $# -ne 1 ]; then
  echo "usage: bench/run_gpu.sh OUT_DIR   (from the repository root)" >&2
  exit 2
fi
OUT=$1
if [ ! -f configs/tiny.yaml ] || [ ! -f configs/bench/chain200.yaml ]; then
  echo "run_gpu.sh: run it from the repository root (configs/tiny.yaml, configs/bench/ not found)" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)

TILERUN=${TILERUN:-tilerun}
BENCH=${TILERUN_LAUNCH_BENCH:-tilerun_launch_bench}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-200}
DEVICE=${DEVICE:-cuda}
LIMIT=${LIMIT:-300}   # seconds per command, so that a hang cannot eat the session

SUMMARY=$OUT/summary.txt
LOG=$OUT/tilerun.log
REPORTS=$OUT/tilerun_reports.json
BLOG=$OUT/launch_bench.log
BJSON=$OUT/launch_bench.json
TLOG=$OUT/torch.log
TJSON=$OUT/torch_comparison.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: >"$LOG"
FAILURES=()

# run NAME LOGFILE COMMAND...: appends the command's output to LOGFILE between markers.
run() {
  local name=$1 log=$2
  shift 2
  local start=$SECONDS rc
  echo "=== $name: $*" >>"$log"
  timeout "$LIMIT" "$@" >>"$log" 2>&1
  rc=$?
  echo "=== $name: exit $rc, $((SECONDS - start)) s" >>"$log"
  echo "" >>"$log"
  if [ $rc -ne 0 ]; then FAILURES+=("$name (exit $rc, see $(basename "$log"))"); fi
  echo "$name: exit $rc" >&2
  return 0
}

# ---- the machine ------------------------------------------------------------------------------
{
  echo "tilerun benchmarks, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)  cpus: $(nproc)  $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
  echo "command: bench/run_gpu.sh $*  (DEVICE=$DEVICE STEPS=$STEPS)"
  if git rev-parse HEAD >/dev/null 2>&1; then
    echo "git: $(git rev-parse HEAD) ($(git status --porcelain 2>/dev/null | wc -l) changed paths)"
  fi
  echo "tilerun: $(command -v "$TILERUN" || echo "$TILERUN: not found") $("$TILERUN" --version 2>&1)"
  echo "tilerun_launch_bench: $(command -v "$BENCH" || echo "$BENCH: not found")"
  echo "python: $("$PYTHON" --version 2>&1); torch: $("$PYTHON" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit,persistence_mode \
      --format=csv 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  echo ""
} >"$SUMMARY"

# ---- tilerun CLI --------------------------------------------------------------------------------
HELP=$("$TILERUN" --help 2>&1)
has_option() { grep -q -- "$1" <<<"$HELP"; }

# cli NAME CONFIG [ARGS...]: one CLI run with its report (and trace) under $TMP/NAME.*.
cli() {
  local name=$1 config=$2
  shift 2
  local extra=()
  if has_option --trace; then extra+=(--trace "$TMP/$name.trace.json"); fi
  run "$name" "$LOG" "$TILERUN" "$config" --device "$DEVICE" --steps "$STEPS" \
    --report "$TMP/$name.report.json" ${extra[@]+"${extra[@]}"} "$@"
}

if [ "$DEVICE" = cuda ]; then MODES=(graph launch both); else MODES=(graph); fi
for mode in "${MODES[@]}"; do
  check=()
  if [ "$mode" = graph ]; then check=(--check); fi
  cli "tiny.$mode" configs/tiny.yaml --mode "$mode" ${check[@]+"${check[@]}"}
done
if [ "$DEVICE" = cuda ]; then MODES=(graph launch); fi
for model in chain200 dag200; do
  for mode in "${MODES[@]}"; do
    cli "$model.$mode" "configs/bench/$model.yaml" --mode "$mode" --forward-only
    # Programmatic dependent launch on vs off, where the CLI has the switch.
    if [ "$DEVICE" = cuda ] && has_option --pdl; then
      cli "$model.$mode.nopdl" "configs/bench/$model.yaml" --mode "$mode" --forward-only --pdl off
    fi
  done
done

# The V4 layer's selections at T = 4096 (top-k, KV gather, MoE counting sort): per-kernel times.
if [ "$DEVICE" = cuda ]; then
  cli "select4096.graph" configs/bench/select4096.yaml --mode graph --forward-only
fi

# Every report (and trace) in one JSON file, and a digest of each run into the summary.
"$PYTHON" - "$TMP" "$REPORTS" >>"$SUMMARY" 2>&1 <<'EOF' || FAILURES+=("merging the reports")
import glob, json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
merged = {}
for path in sorted(glob.glob(os.path.join(tmp, "*.json"))):
    name, kind = os.path.basename(path)[:-len(".json")].rsplit(".", 1)
    with open(path) as f:
        merged.setdefault(name, {})[kind] = json.load(f)
with open(out, "w") as f:
    json.dump(merged, f, indent=1)
peak = float(os.environ.get("PEAK_GBPS", "4800")) * 1e9  # bytes/s of the floor column
print(f"{'run':<24} {'kernels':>7} {'host us':>10} {'device us':>10} {'host us/k':>10} {'dev us/k':>10}"
      f" {'bytes floor':>11} {'launch host':>12} {'launch dev':>11}")
for name, parts in merged.items():
    r = parts.get("report")
    if r is None:
        print(f"{name:<24} (no report)")
        continue
    k = sum(l["kernels"] for l in r["layers"])
    h = sum(l["host_us"] for l in r["layers"])
    d = sum(l["device_us"] for l in r["layers"])
    extra = ""
    if "launch_host_us" in (r["layers"][0] if r["layers"] else {}):
        extra = (f" {sum(l['launch_host_us'] for l in r['layers']):>12.1f}"
                 f" {sum(l['launch_device_us'] for l in r['layers']):>11.1f}")
    floor = r.get("tensor_bytes", 0) / peak * 1e6
    print(f"{name:<24} {k:>7} {h:>10.1f} {d:>10.1f} {h / max(k, 1):>10.3f} {d / max(k, 1):>10.3f}"
          f" {floor:>11.2f}{extra}")
print("(us per step, summed over layers and directions; the CLI's mean over its --steps;\n"
      f" bytes floor = the plan's tensor bytes, each touched at least once, at {peak / 1e9:.0f} GB/s)")
print("")
EOF

# ---- tilerun_launch_bench -----------------------------------------------------------------------
: >"$BLOG"
run launch_bench "$BLOG" "$BENCH" \
  --tilerun_config=configs/bench/chain200.yaml,configs/bench/dag200.yaml,configs/tiny.yaml \
  --tilerun_device="$DEVICE" --tilerun_warmup=50 \
  --benchmark_counters_tabular=true \
  --benchmark_out="$BJSON" --benchmark_out_format=json

# ---- PyTorch comparison -------------------------------------------------------------------------
: >"$TLOG"
if "$PYTHON" -c 'import torch' >/dev/null 2>&1; then
  run torch_tiny "$TLOG" "$PYTHON" bench/torch/tiny.py --device "$DEVICE" --tilerun "$TILERUN" \
    --bench "$BENCH" --steps "$STEPS" --json "$TJSON"
  : >"$OUT/transformer.log"
  run torch_transformer "$OUT/transformer.log" "$PYTHON" bench/torch/transformer.py \
    --device "$DEVICE" --tilerun "$TILERUN" --steps "$STEPS"
  if [ "$DEVICE" = cuda ]; then
    : >"$OUT/selection.log"
    run torch_selection "$OUT/selection.log" "$PYTHON" bench/torch/selection.py \
      --tilerun "$TILERUN" --steps "$STEPS" --json "$OUT/selection.json"
  fi
else
  echo "torch is not importable by $PYTHON: the PyTorch comparison is skipped" >>"$TLOG"
  run torch_tiny_io "$TLOG" "$PYTHON" bench/torch/tiny.py --device "$DEVICE" --tilerun "$TILERUN" \
    --bench "$BENCH" --steps "$STEPS" --no-torch --json "$TJSON"
  FAILURES+=("torch not installed for $PYTHON (comparison skipped)")
fi

# ---- the verdict --------------------------------------------------------------------------------
{
  echo "files: $(cd "$OUT" && printf '%s ' *)"
  if [ ${#FAILURES[@]} -eq 0 ]; then
    echo "all runs succeeded"
  else
    echo "FAILED:"
    printf '  %s\n' "${FAILURES[@]}"
  fi
} >>"$SUMMARY"
cat "$SUMMARY"
[ ${#FAILURES[@]} -eq 0 ]
