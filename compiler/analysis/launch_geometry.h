// Host-side launch geometry of a kernel instance: the dims checked against the signature's
// bounds, and the grid evaluated from the signature's grid expressions — what a GPU launcher
// (or the executor, once per node) needs before cuLaunchKernel.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

struct LaunchGeometry {
  std::array<int64_t, 3> grid = {1, 1, 1};  // blocks along x, y, z (absent axes are 1)
  int threads = 0;                          // per block (x only)
  int64_t blocks() const { return grid[0] * grid[1] * grid[2]; }
  // No block to run (some axis evaluated to 0): launchers skip the launch.
  bool empty() const { return grid[0] == 0 || grid[1] == 0 || grid[2] == 0; }
};

// Throws tilerun::Error (kind Runtime) naming the kernel and the dim unless `dims` has one
// value per signature dim, each within its bounds and divisible as declared.
void check_dims(const KernelSignature& sig, const std::vector<int64_t>& dims);

// Checks the dims (check_dims), then evaluates the grid. A negative block count, or one
// beyond CUDA's limits (x < 2^31, y and z ≤ 65535), is an Error naming the kernel.
LaunchGeometry launch_geometry(const KernelSignature& sig, const std::vector<int64_t>& dims);

}  // namespace tilerun::compiler
