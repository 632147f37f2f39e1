// Pass: Tile IR → SIMT IR with the fixed thread mapping of this first compiler. A parallel loop
// over [0, e0) x [0, e1) x ... (n elements, T threads) becomes
//     for it in [0, ceildiv(n, T)):            // block-uniform trip count
//       let lin = it * T + threadIdx.x
//       if lin < n: let i0 = lin / (e1 * ...), i1 = ... ; body
// so thread t owns the elements t, t + T, t + 2T, ... A fragment becomes a per-thread local
// array of ceildiv(numel, T) elements whose local index is the iteration number `it`; that is
// only consistent when the fragment is indexed by exactly the loop's indices over its shape
// (else tilerun::Error). Shared tiles become shared arrays. Layout inference replaces this.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel lower_parallel(const Kernel& kernel);

}  // namespace tilerun::compiler
