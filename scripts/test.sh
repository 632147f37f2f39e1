#!/usr/bin/env bash
# Set up (scripts/setup.sh), build, and run the whole test suite with ctest. GPU tests (label
# 'gpu') skip themselves where there is no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
