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

// dw[e] = x[seg e]^T dy[seg e] (parameters x, dy, offsets, dw; R, K, N, E), as the SIMT wgrad.
std::string grouped_wgrad_tc_name(bool tb);
compiler::Kernel build_grouped_wgrad_tc(DType dtype, bool tb);

// The same on copy_async staging (K and N multiples of 8); the same bits.
std::string grouped_wgrad_tc_async_name(bool tb);
compiler::Kernel build_grouped_wgrad_tc_async(DType dtype, bool tb);

}  // namespace tilerun::kernels
