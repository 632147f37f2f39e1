// grouped_matmul's bf16/f16 kernels on the tensor cores (kernels/grouped_matmul.cc picks them for
// bf16/f16 as matmul.cc picks its own), on matmul_tc.h's register-staged 128 x 128 x 64 K loop.
#pragma once

#include <utility>

#include "compiler/ir/builder.h"
#include "compiler/ir/kernel.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

// Segment e's rows [lo, hi) as block-uniform values, clamped to 0 <= lo <= hi <= R: from
// offsets[e] to the next start (the last to R). The loads are in range for any e in [0, E).
std::pair<compiler::Val, compiler::Val> grouped_segment(compiler::Scope& s,
                                                        const compiler::Buf& offsets,
                                                        const compiler::Val& e,
                                                        const compiler::Dim& experts,
                                                        const compiler::Dim& rows);

// y = grouped x w (parameters x, w, offsets, y; R, N, K, E), as grouped_matmul.cc's SIMT kernel.
std::string grouped_tc_name(bool tb);
compiler::Kernel build_grouped_tc(DType dtype, bool tb);

// The same on copy_async (cp.async) staging, five buffers deep: K, and N when w is not
// transposed, multiples of 8 (16-byte rows); the same bits as build_grouped_tc.
std::string grouped_tc_async_name(bool tb);
compiler::Kernel build_grouped_tc_async(DType dtype, bool tb);

// The same product for sorted offsets in [0, R] (a sorted_input: the graph's contract, with the
// status of its check as a parameter after offsets; nothing is written when it reports a bad
// offset): each block owns one 128-row tile of one expert's segment, so a row tile runs one K pass
// instead of one per expert it meets. Tile slots: segment e's start at slot
// floor(offsets[e] / 128) + e + 1 (the rows before offsets[0], zeros, at slot 0), which leaves
// every segment at least the tiles it needs; a block finds its segment (E + 1 threads, one
// load each) and exits when the slot is past the segment's last tile. The same chains, so the
// same bits as build_grouped_tc_async.
std::string grouped_tc_aligned_name(bool tb);
compiler::Kernel build_grouped_tc_aligned(DType dtype, bool tb);

// The aligned kernel with FP4 weights (grouped_matmul_fp4): parameters x [R, K], w's codes as
// bytes [E, N, K/2] (tb) or [E, K, N/2], their e8m0 scales [E, N, K/block] or [E, K, N/block]
// (one per `block` along w's last axis, even), offsets, status, y; K a multiple of 64, N of 8
// (32 when w is not transposed: its rows of bytes 16-byte aligned). Each step's codes land by TMA
// in a stage of their own and are decoded into the 16-bit tile before its gemm (exact: a code
// times a power of two), so the bits are build_grouped_tc_aligned's on the dequantized weights.
std::string grouped_fp4_aligned_name(bool tb, int64_t block);
// Whether grouped_matmul_fp4 runs it for y's dtype, y [R, n] = x [R, k] @ .. and the offsets'
// sorted contract (else it dequantizes into scratch first).
inline bool grouped_fp4_decodes(DType dtype, bool tb, int64_t k, int64_t n, bool sorted) {
  return dtype == DType::BF16 && sorted && k > 0 && k % 64 == 0 && n % (tb ? 8 : 32) == 0;
}
compiler::Kernel build_grouped_fp4_aligned(DType dtype, bool tb, int64_t block);

// dw[e] = x[seg e]^T dy[seg e] (parameters x, dy, offsets, dw; R, K, N, E), as the SIMT wgrad.
std::string grouped_wgrad_tc_name(bool tb);
compiler::Kernel build_grouped_wgrad_tc(DType dtype, bool tb);

// The same on copy_async staging (K and N multiples of 8); the same bits.
std::string grouped_wgrad_tc_async_name(bool tb);
compiler::Kernel build_grouped_wgrad_tc_async(DType dtype, bool tb);

}  // namespace tilerun::kernels
