#!/usr/bin/env bash
# Builds tilerun with AddressSanitizer + UndefinedBehaviorSanitizer (the 'asan' preset of
# CMakePresets.json, in build-asan/) and runs the CPU suite there: any memory error, leak or
# undefined behaviour fails the run.
#
#   scripts/sanitize_cpu.sh              every target, then ctest -L cpu (long on 2 cores)
#   scripts/sanitize_cpu.sh TEST...      only these test binaries (e.g. session_test), each run
#                                        whole (all its cases in one process)
#
# JOBS sets the build's parallelism (default: all cores). The compiler cache is used when
# ccache is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake --preset asan "${launcher[@]}" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
jobs=${JOBS:-$(nproc)}

if [ $# -eq 0 ]; then
  cmake --build build-asan -j "$jobs"
  exec ctest --preset asan -j "$jobs"
fi

cmake --build build-asan -j "$jobs" --target "$@"
failed=()
for t in "$@"; do
  bin=$(find build-asan/tests -type f -name "$t" -perm -u+x | head -1)
  if [ -z "$bin" ]; then
    echo "sanitize_cpu.sh: no test binary '$t' in build-asan/tests" >&2
    failed+=("$t")
    continue
  fi
  echo "=== $t (ASan + UBSan)"
  "$bin" --gtest_brief=1 || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "sanitize_cpu.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize_cpu.sh: clean: $*"
