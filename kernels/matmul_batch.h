// Batched matmul (matmul.cc): a and b of rank >= 2, their leading (batch) dims broadcast by NumPy
// rules to c's. The shapes, the reference over the batch, the gradient rule lifted from the
// rank-2 one, and how the expansion reads each operand.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/matmul_tc.h"

namespace tilerun::kernels {

struct MatmulBatch {
  std::vector<int64_t> a, b, c;  // the batch dims of a, of b, and their broadcast (c's)
  int64_t count = 1;             // c's batch elements
};

// Throws ShapeError naming 'a' or 'b' for a rank below 2 or batch dims that do not broadcast.
MatmulBatch matmul_batch(const TensorType& a, const TensorType& b);

// The matrix of an operand with batch dims `src` that c's batch element z (row-major over
// `c`) uses.
int64_t batch_source(const std::vector<int64_t>& src, const std::vector<int64_t>& c, int64_t z);

// A rank-2 rule (names x0, x1, dy0 -> dx0, dx1) made batched: when a is batched, b a matrix and
// a not transposed, the whole product is one matmul of a and dy seen as [batch·M, ...] (free
// reshapes); otherwise the rule runs batched and a gradient whose batch dims a (or b) was
// broadcast along is summed back to its shape (broadcast_to_grad, fixed order).
std::vector<GradOp> batched_gradient(const decltype(OpSchema::gradient)& rank2_rule,
                                     const std::vector<TensorType>& in, const Attrs& attrs,
                                     const std::vector<bool>& needs);

// True when the product is one rank-2 matmul of a seen as [batch·M, K]: a batched, b a matrix
// (no batch elements), a not transposed.
bool folds_into_rows(const MatmulBatch& mb, bool transpose_a);

// How the batched kernel reads an operand: one matrix per batch element of c (batched), one
// for all (shared), or, for a broadcast the kernel cannot index, a copy broadcast to c's batch
// in a scratch buffer first (then batched). `matrix` is the operand's last two dims.
struct BatchOperand {
  bool batched = false;
  KernelArg arg;
};
BatchOperand prepare_operand(KernelCache& cache, DType dtype, const std::vector<int64_t>& batch,
                             const std::vector<int64_t>& matrix, const MatmulBatch& mb, int slot,
                             OpExpansion& ex);

// The tensor cores take a batched bf16/f16 product whose rows are 16-byte aligned: K, N when b
// is not transposed, M when a is; with `tf32`, an f32 one with a plain a and a transposed b too
// (tf32 tiles are K-major only).
bool tc_batch_fits(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool tf32 = false);

// The batched tensor-core kernel's call (matmul_tc.h build_tc_matmul_async_batch) for `count`
// products of m x n x k, its tile rows planned as matmul plans them: each element's bits those
// of its rank-2 product. `mid`: operands read (or c written) with the batch between the matrix's
// axes (einsum's in-place layouts).
KernelCall tc_batch_call(KernelCache& cache, DType dt, bool ta, bool tb, bool a_batched,
                         bool b_batched, TcBatchMid mid, int64_t m, int64_t n, int64_t k,
                         int64_t count, KernelArg a, KernelArg b, KernelArg c);

}  // namespace tilerun::kernels
