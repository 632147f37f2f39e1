#!/usr/bin/env bash
# Installs what is missing (Debian 12 / Ubuntu 24.04 packages; the CUDA 13 toolkit must already
# be there), then configures and builds tilerun into ${BUILD_DIR:-build}. Idempotent: a second
# run with nothing changed installs nothing and rebuilds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# llvm-16-tools: lit, FileCheck and not, for the compiler's pass tests (tests/lit); clang-16 and
# its runtimes for the libFuzzer targets (scripts/fuzz.sh).
packages=(cmake g++ make pkg-config libz3-dev llvm-16-dev llvm-16-tools libyaml-cpp-dev
          libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev python3
          clang-16 libclang-rt-16-dev libfuzzer-16-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit: nvcc on PATH, or the usual install location.
source scripts/cuda_path.sh

build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$jobs"
