// Small tile programs the compiler tests share: each exercises one part of the pipeline.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler::testing {

// y[i] = a * x[i] + b over N elements, 256 per block on 128 threads (ragged last block).
Kernel axpb_kernel();
// y = sigmoid(x) * tanh(x) + exp(-|x|) + log1p-ish: every strict routine once, f32.
Kernel math_kernel();
// y_bf16 = x_bf16 * s + h_f16 (bf16/f16 loads, RNE stores).
Kernel mixed_dtype_kernel();
// The 8-bit float formats: d4/d5/ds[i] = the f32 value of the f8e4m3/f8e5m2/e8m0 code c4/c5/cs[i],
// and q4/q5/qs[i] = x[i] rounded to each format (narrow_float.h).
Kernel narrow_float_kernel();
// fastF[i] = round_to_narrow_float(x[i]) and slowF[i] = the code of x[i] decoded, for F = 0
// (f8e4m3), 1 (f8e5m2), 2 (fp4e2m1).
Kernel narrow_round_kernel();
// fp4e2m1 as value codes: d = decode(c) (codes in i32), q = encode(x).
Kernel fp4_kernel();
// Row softmax over [T, D]: a max and a sum reduction per row.
Kernel softmax_kernel();
// The rmsnorm forward of the builder's documentation.
Kernel rmsnorm_kernel();
// dgamma[j] = sum_t dy[t, j] * x[t, j] * rstd[t]: a column reduction in a fragment over a
// serial loop.
Kernel dgamma_kernel();
// C[M, N] = A[M, K] @ B[K, N] with 16x16 output tiles, shared A/B tiles of 16x8 and 8x16,
// barriers in the K loop, a fragment accumulator and guarded copies at ragged edges.
Kernel matmul_kernel();
// c[M, N] (f32, the accumulator unrounded) = a[M, K] · b[N, K]^T on the tensor cores: bf16 or
// f16 (da = db), or FP8 (each f8e4m3 or f8e5m2). 128 x 128 outputs a block of two warpgroups,
// both operands K-major in shared tiles of 128-byte rows under the 128B swizzle (64 of k a step
// for 16-bit operands, 128 for FP8), ragged edges zero-filled.
Kernel tensor_core_gemm_kernel(DType da, DType db);
// y = x^T through a 32x32 shared tile and a fragment: copies global → shared → fragment,
// ragged edges guarded by the copies (reads) and an if (writes).
Kernel transpose_kernel();
// y[i] = i32 x[i] * 3 + row sum — integer paths (i32 loads, i64 index math, int reduce).
Kernel int_kernel();

}  // namespace tilerun::compiler::testing
