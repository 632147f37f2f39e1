// Pass (SIMT IR, after the vectorize passes): the address arithmetic of async copies computed
// once per thread instead of once per loop step.
//
// A pipelined K loop issues each step's copy_async pieces from a short per-thread loop
// (lower_parallel: `for it in [0, n)`, the piece's coordinates from `it * threads + threadIdx`)
// whose index, source offset and valid count are 64-bit integer math mostly independent of the
// step. Left in the loop they were most of a tensor-core matmul's instructions per step (the
// H200 profile of matmul_tc_nn_128x128x64_async5: ~600 instructions per warp per K step, the
// issue slots idle on the dependency chains and instruction fetch). Two rewrites, on loops that
// issue async copies only:
//  1. A piece loop of constant trip count (at most kMaxUnroll) whose body is lets, ifs and
//     async copies is unrolled, its lets inlined (pure integer values) and its var replaced by
//     each constant, so nothing in a piece depends on it any more.
//  2. In a serial loop that issues async copies, every maximal pure integer subexpression of an
//     async copy's indices and valid count that names nothing bound in the loop (its var, lets,
//     loops, assigned locals) and is more than a var or a constant becomes a let before the
//     loop; equal subexpressions share one let.
// Sound because the hoisted values are pure integer arithmetic (no loads, no calls, division
// only by a positive constant): evaluating them once before the loop, even when it runs no
// step, gives each use the value it had and cannot fault. The copies, their order and every
// value they move are unchanged.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel hoist_copy_invariants(const SimtKernel& kernel);

}  // namespace tilerun::compiler
