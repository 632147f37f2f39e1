// Pass: each block reduction becomes Tile IR with a fixed, grid-independent order:
//   1. every thread folds its elements r = t, t + T, t + 2T, ... in that order into its own
//      fragment slot (identity first: -0 for sums, -inf/+inf for max/min);
//   2. the T partials go to shared memory, then a tree in index order: for s = T/2 .. 1,
//      scratch[t] = scratch[t] op scratch[t + s] for t < s, a barrier after each level;
//   3. every thread reads scratch[0], then a barrier so the scratch may be reused.
// Each reduction gets its own fragment and shared scratch of T elements. (Tile IR → Tile IR.)
#pragma once

#include "compiler/kernel.h"

namespace tilerun::compiler {

Kernel lower_reductions(const Kernel& kernel);

}  // namespace tilerun::compiler
