#!/usr/bin/env bash
# Set up (scripts/setup.sh), build, and run the main job: tilerun configs/tiny.yaml --check, a
# forward + backward step compared with the double-precision reference, on the GPU when there is
# one, else on the CPU backend. Extra arguments go to tilerun.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${BUILD_DIR:-build}/tilerun" configs/tiny.yaml --check "$@"
