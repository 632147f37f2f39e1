// A bitonic sorting network over a shared tile of i64 keys, for kernels that sort one row in a
// block (topk's row, embedding_grad's ids). The network is unrolled at build time for a constant
// power-of-two length m: log2(m)·(log2(m)+1)/2 stages, up to three of a merge in one pass (a
// barrier, then each thread's 2, 4 or 8 elements read, exchanged in registers and written back),
// the addresses affine in the loop's coordinates, so every store is proved unique without Z3 and
// none depends on a loaded value. Keys should be
// distinct (a value with its position in its low bits), which makes the order total and the
// result independent of the network's instability.
#pragma once

#include <cstdint>
#include <functional>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

// Sort keys in topk's order (a NaN above every number, NaNs tied, +0 = -0, ties to the lower
// index). monotone_bits: an f32 value as a signed i32 of that order (a negative float's magnitude
// bits flipped, both zeros 0, every NaN 0x7FFFFFFF). sort_key: element `index` with value v as
// monotone_bits · 2^32 + 2^32 - 1 - index (i64), distinct, so a descending sort (or a max) is
// that order; sort_key_index gives the index back. padding_key is below every real key (whose
// high half is at least -inf's, 0x807FFFFF), spelled without INT64_MIN's literal.
compiler::Val monotone_bits(const compiler::Val& v);
compiler::Val sort_key(const compiler::Val& v, const compiler::Val& index);
compiler::Val sort_key_index(const compiler::Val& key);
compiler::Val padding_key();

// Sorts keys[0, m) in place (descending or ascending); a barrier before the first stage and
// after the last, so the caller may write the tile just before and read it just after.
void bitonic_sort(compiler::Scope& s, const compiler::Buf& keys, int64_t m, bool descending);

// The smallest power of two >= n (1 for n <= 1).
int64_t bitonic_length(int64_t n);

// Halvings that narrow [0, n] to one position: log2(bitonic_length(n)) + 1.
int search_steps(int64_t n);

// lo(t) = the first position q in [0, n) of a sorted tile with key(q) >= target (n if none), by
// `steps` halvings (search_steps(n) or more), lo(t) and hi(t) the thread's fragment elements (hi
// its scratch). Inside the caller's parallel over t; the searches of a sorted tile that follow a
// bitonic_sort (its runs of equal ids, topk's columns, a chunk's bins).
void sorted_lower_bound(compiler::Scope& s, const compiler::Buf& lo, const compiler::Buf& hi,
                        const compiler::Idx& t, const compiler::Val& n, int steps,
                        const std::function<compiler::Val(const compiler::Val&)>& key,
                        const compiler::Val& target);

}  // namespace tilerun::kernels
