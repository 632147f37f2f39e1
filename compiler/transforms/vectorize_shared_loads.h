// Pass (SIMT IR, after vectorize_accesses): in straight-line per-thread code, lets that each load
// one element of a shared array at base + 0, base + 1, ..., base + W-1 (W = 4, or 2 when only
// two are there), with base provably a multiple of W, become one VectorMove of W elements into
// a local array at the first of them, and the lets read its lanes: a matmul's inner loop reads
// its A and B tiles with one 16-byte shared load per four values instead of four.
//
// Sound because: the index's alignment is proved syntactically (the index as a polynomial over
// integer variables, lets substituted or kept as atoms, every coefficient a multiple of W; shared
// arrays are 16-byte aligned); nothing between the run's first and last load stores to that
// array, and no barrier, shuffle, loop or if lies between them, so reading the lanes early reads
// the same values; and the move sits where the first member was, where every variable of the
// base is already bound.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel vectorize_shared_loads(const SimtKernel& kernel);

}  // namespace tilerun::compiler
