// A bitonic sorting network over a shared tile of i64 keys, for kernels that sort one row in a
// block (topk's row, embedding_grad's ids). The network is unrolled at build time for a constant
// power-of-two length m: log2(m)·(log2(m)+1)/2 stages, each a barrier and one parallel
// compare-exchange over m/2 pairs whose two addresses are affine in the loop's coordinates, so
// every store is proved unique without Z3 and none depends on a loaded value. Keys should be
// distinct (a value with its position in its low bits), which makes the order total and the
// result independent of the network's instability.
#pragma once

#include <cstdint>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

// Sorts keys[0, m) in place (descending or ascending); a barrier before the first stage and
// after the last, so the caller may write the tile just before and read it just after.
void bitonic_sort(compiler::Scope& s, const compiler::Buf& keys, int64_t m, bool descending);

// The smallest power of two >= n (1 for n <= 1).
int64_t bitonic_length(int64_t n);

}  // namespace tilerun::kernels
