// Pass (SIMT IR, after the vectorize passes): the shared-memory reads of a lane loop that are
// the same for every lane, read once before the loop.
//
// A vectorized lane loop (lower_parallel: a thread's `width` consecutive elements) often reads a
// per-row value from shared memory — the fp4 fake-quant's scale and its two power-of-two
// factors, a tensor-core epilogue's per-row statistic — at an index that does not depend on the
// lane. The CUDA backend writes every shared read inside a lane loop as an explicit `ld.shared`
// (asm volatile: the prelude's tr_lds says why), which NVRTC may neither merge nor move: eight
// lanes read the same three words 24 times. Where a lane loop holds such a read, the lets at the
// head of its body whose values do not depend on the lane (nor on anything the loop writes) are
// moved before the loop, and a lane-independent shared read inside a later let's value becomes a
// let of its own before the loop too. Sound because a lane loop runs at least once (a constant
// extent) and every lane runs its leading lets unconditionally: each hoisted value is computed
// once with the value it had in every lane; reads inside a select's arm or the right of && / ||
// stay where they are (the backends evaluate those only when chosen). Loops without such a read
// are left as they are.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel hoist_lane_invariants(const SimtKernel& kernel);

}  // namespace tilerun::compiler
