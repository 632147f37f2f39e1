#!/usr/bin/env bash
# Set up (scripts/setup.sh), build, and run the whole test suite with ctest. GPU tests (label
# 'gpu') skip themselves where there is no CUDA device. Then the libFuzzer targets' short runs
# (scripts/fuzz.sh: a clang build with ASan + UBSan in build-fuzz/); TILERUN_SKIP_FUZZ=1 skips
# them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@")
if [ "${TILERUN_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh
fi
