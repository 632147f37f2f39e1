// Pass (SIMT IR, after lower_storage_types): in every `vectorized` lane loop (lower_parallel),
// each global load or store whose index moves with the lane becomes one VectorMove of all
// lanes between the buffer and a per-thread local array — loads before the loop, stores after
// it — and inside the loop the lane reads or writes its element of that array.
//
// Sound because infer_layouts marks a loop vectorized only where analyze_accesses proved every
// such access in bounds, contiguous along the innermost var (so along the lane), aligned to
// lanes·bytes, and not under a guard or inner loop (a gemm accumulator's 2-lane pairs: not
// under a guard unless the guard has one value over the pair, and then the vector moves under
// its lane-0 value): the index at lane l is index(0) + l, and each lane touches its own
// element, so hoisting the reads and sinking the writes changes no value. An access whose
// first-lane index still names something bound inside the loop stays scalar (never expected; kept
// as a safe fallback).
// A shared load moving with the lane is moved the same way where the loop stores nothing to that
// tile and the pass proves, on the flattened index, that lane l reads element base + l with base a
// multiple of the lanes and the run at most 16 bytes (through a 128-byte swizzle's XOR: a
// tensor-core epilogue reading back its tile, 64 scalar shared loads a thread before, 8 after).
// A shared store is moved the same way (one vector store after the loop) where it is the loop's
// only store statement to that tile, not under a guard, and the loop reads nothing of the tile:
// each lane then writes its own element of one run, whatever order the lanes' stores had.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel vectorize_accesses(const SimtKernel& kernel);

}  // namespace tilerun::compiler
