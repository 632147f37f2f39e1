// Pass: each block reduction becomes Tile IR with a fixed, grid-independent order:
//   1. every thread folds its elements r = t, t + T, t + 2T, ... in that order into its own
//      fragment slot (identity first: -0 for sums, -inf/+inf for max/min);
//   2. a butterfly inside each warp: for x = 16, 8, 4, 2, 1 (or from half the block when it is
//      smaller), part[t] = part[t] op shuffle_xor(part, x)[t]; every lane then holds its warp's
//      total (partners compute a op b and b op a: the same bits);
//   3. with several warps, each warp's lane 0 stores its total at its warp's index in shared
//      scratch, a barrier, and a butterfly over the warps in the first warp's lanes;
//   4. thread 0 publishes the result in scratch[0], a barrier, every thread reads it, and a
//      barrier so the scratch may be reused.
// Each reduction gets its own fragments (partials, shuffle results) and shared scratch of T
// elements. (Tile IR → Tile IR.)
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

Kernel lower_reductions(const Kernel& kernel);

}  // namespace tilerun::compiler
