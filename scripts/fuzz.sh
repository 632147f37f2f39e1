#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-16; the library instrumented with ASan + UBSan) in
# ${FUZZ_BUILD_DIR:-build-fuzz} and runs them:
#   scripts/fuzz.sh              the short runs: ctest -L fuzz (TILERUN_FUZZ_RUNS executions each,
#                                fixed seed, from the seed corpora in tests/fuzz/corpus and configs/)
#   scripts/fuzz.sh --long N     N executions per target on all cores' worth of jobs, corpora
#                                kept in build-fuzz/long/<target>; findings (crash-*, leak-*,
#                                timeout-*) land beside them and fail the script
# Packages (clang-16, libclang-rt-16-dev, libfuzzer-16-dev) come from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cuda_path.sh
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-$(nproc)}
targets=(fuzz_model fuzz_safetensors fuzz_ir_parser fuzz_cli)
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-16 CXX=clang++-16 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTILERUN_FUZZ=ON -DTILERUN_BUILD_TESTS=OFF -DTILERUN_BUILD_BENCH=OFF ${CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
if [ "${1:-}" = "--long" ]; then
  runs=${2:?usage: scripts/fuzz.sh --long EXECUTIONS}
  status=0
  for t in "${targets[@]}"; do
    mkdir -p "$build/long/$t"
    case $t in
      fuzz_model) seeds=(tests/fuzz/corpus/model configs configs/bench) ;;
      fuzz_ir_parser) seeds=(tests/lit tests/fuzz/corpus/ir) ;;
      *) seeds=(tests/fuzz/corpus/${t#fuzz_}) ;;
    esac
    (cd "$build/long/$t" && "../../tests/fuzz/$t" -runs="$runs" -max_len=65536 -timeout=10 \
       -rss_limit_mb=4096 -print_final_stats=1 corpus "${seeds[@]/#/../../../}" \
       2>&1 | tail -25 > "../$t.log") || status=1
    echo "$t: $(grep -E 'stat::number_of_executed_units|Done' "$build/long/$t.log" | tr '\n' ' ')"
  done
  exit $status
fi
cd "$build"
ctest --output-on-failure -L fuzz -j "$jobs"
