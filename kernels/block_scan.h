// Block-wide prefix sums for tile authors, built on the warp shuffle: fixed order, so the same
// inputs give the same bits on every run, on the CPU and the GPU, whatever the timing.
//
// Order, for thread t in warp w at lane l (lanes = min(threads, 32)):
//   - inside the warp a butterfly: for o = 1, 2, 4, 8, 16 (below lanes) every lane swaps its
//     group's running total with lane l ^ o; a lane with bit o set adds the partner's total to its
//     prefix (which starts at 0). Both partners add the same two numbers, so they agree exactly.
//   - the warps' totals, from shared memory, summed left to right from 0: those before w give
//     the warp's offset, all of them the block's total;
//   - exclusive(t) = offset + the in-warp prefix (one addition).
// Integer sums are exact in any order; float sums are this order, documented so that a kernel
// built on it has a reference it can be checked against.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

// x, exclusive and total: fragments [threads] of one dtype (f32, i32 or i64); exclusive(t) = the
// sum of x(u) for u < t (0 for t = 0), total(t) = the sum of all x (the same in every thread).
// Block-uniform like barrier(): outside parallel and if. Ends with a barrier, so a loop may call
// it again at once. `name` prefixes its scratch tiles (one scan's names must not repeat).
void block_scan_sum(compiler::Scope& s, const std::string& name, int threads,
                    const compiler::Buf& x, const compiler::Buf& exclusive,
                    const compiler::Buf& total);

// A segmented inclusive scan: heads (i32 fragment [threads], nonzero where a segment starts)
// cut the block into runs of threads, and inclusive(t) = the sum of x(u) from the start of t's
// run (the last head at or before t; thread 0 when there is none) to t. x and inclusive: one
// dtype (f32, i32 or i64). Per-expert or per-row sums over rows sorted by key, in one block.
// Order, a segmented form of block_scan_sum's: each group of lanes carries (has a head, its sum
// since its last head); at step o a lane with bit o set puts its partner's group before its own
// prefix, and both partners combine (left, right) as right's sum where right has a head, else
// left's + right's (one addition, the same operands in the same order on both, so the same
// bits). Then the warps' totals, combined left to right, go before each thread's in-warp prefix
// where that prefix has no head. Block-uniform like barrier(); ends with a barrier.
void block_segmented_scan_sum(compiler::Scope& s, const std::string& name, int threads,
                              const compiler::Buf& x, const compiler::Buf& heads,
                              const compiler::Buf& inclusive);

// totals(c) = the sum over the block's threads of counters[c] (fragments [threads], one dtype),
// for c < counters.size(): a histogram's bins, several counts at once. totals is a shared tile
// [counters.size()] of the counters' dtype, ready after the call (which ends with a barrier).
// The counters are used up: each is left holding its warp's sum.
// Order: the same butterfly inside each warp, then the warps' sums left to right from 0.
// Block-uniform like barrier(); `name` prefixes its scratch tiles.
void block_sums(compiler::Scope& s, const std::string& name, int threads,
                const std::vector<compiler::Buf>& counters, const compiler::Buf& totals);

}  // namespace tilerun::kernels
