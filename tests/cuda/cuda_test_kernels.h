// Tile programs the CUDA backend's tests share: the codegen test (no GPU) emits and compiles
// them, the GPU test runs them against the CPU backend bit for bit.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler::cudatest {

// y = x·sigmoid(1.702x) + a·tanh(x), yb = bf16(y) over N elements: 256 per block on 128
// threads, so the last block is ragged.
Kernel ragged_elementwise_kernel();
// Per row of x[T, D]: sum, max and min through block reductions (shared scratch, barriers),
// and the row scaled by 1/sum.
Kernel row_reduction_kernel();
// compiler/README.md's tiled matmul: 32x32 output tiles on 128 threads, shared A/B tiles of
// 32x8 and 8x32, barriers in the K loop, a fragment accumulator, ragged edges.
Kernel tiled_matmul_kernel();
// Bit-level semantics the two backends must agree on: saturating f32 → i8/i16/i32/i64
// conversions, floor division and modulo of negatives, wrapping multiplication, logical and
// arithmetic shifts, bitcasts, strict min/max on NaN and signed zeros, sign-bit negation,
// int → f32 rounding, u8 stores.
Kernel bit_ops_kernel();
// s = sin(v), c = cos(v) with v = x at even indices and, at odd ones, the f32 whose bits are a
// hash of the index (every binade up to 3.4e38, NaN and inf): both argument reductions.
Kernel sin_cos_kernel();

}  // namespace tilerun::compiler::cudatest
