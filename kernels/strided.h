// Layout kernels shared by the shape ops (views.cc, layout.cc) and batched matmul: a tensor read
// through strides (a transpose, a broadcast, a strided slice), and the two region copies of concat
// and of slice's gradient. (A broadcast's gradient, a sum, runs on the reduction kernels.)
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"

namespace tilerun::kernels {

// out[c] = x[offset + Σ_j c_j · strides[j]] over the coordinates c of `shape` (row-major).
// A stride of 0 repeats x along that axis (a broadcast).
struct StridedView {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements of x, one per axis of `shape`
  int64_t offset = 0;
};

// The same map with size-1 axes dropped and adjacent axes merged where x's strides let them
// (stride_j == stride_{j+1} · shape_{j+1}); never empty (a scalar is one axis of size 1).
StridedView simplify(StridedView v);

// x (row-major, `x_shape`) broadcast to `shape` (NumPy rules, checked by the caller): stride 0
// along the axes x repeats.
StridedView broadcast_view(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& shape);

// Row-major strides of `shape`.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);

// The call copying input `x` (x_numel elements) through `v` into `out`, one element per thread:
// kernel "strided_copy_rK" with parameters x, out; N, XN, then D_j, S_j per axis, OFF.
KernelCall strided_copy_call(KernelCache& cache, DType dtype, int64_t x_numel, const StridedView& v,
                             KernelArg x, KernelArg out);

// out[o, offset + a, r] = x[o, a, r] for x [outer, len, inner] and out [outer, out_len, inner]:
// one input's part of a concat (the rest of out is written by the other parts).
KernelCall place_call(KernelCache& cache, DType dtype, int64_t outer, int64_t len, int64_t inner,
                      int64_t out_len, int64_t offset, KernelArg x, KernelArg out);

// All the parts of a concat (split = false: parts → out) or a split (split = true: x → parts)
// along an axis in one launch: part i [outer, lens[i], inner] is columns [Σ_{j<i} lens[j], ...)
// of the wide tensor [outer, Σ lens, inner]. `buffers` in the kernel's order: the parts then out
// for a concat, x then the parts for a split. nullopt unless there are two parts or more and every
// part's row (len · inner) is a whole number of 8-element vectors (the per-part calls then).
std::optional<KernelCall> parts_call(KernelCache& cache, DType dtype, bool split, int64_t outer,
                                     const std::vector<int64_t>& lens, int64_t inner,
                                     std::vector<KernelArg> buffers);

// dx[o, a, r] = dy[o, (a - start) / step, r] where a - start is a multiple of step in
// [0, len · step), else 0, for dx [outer, size, inner] and dy [outer, len, inner]: the gradient
// of a slice, every element of dx written by its own thread (no scatter).
KernelCall unslice_call(KernelCache& cache, DType dtype, int64_t outer, int64_t size, int64_t inner,
                        int64_t len, int64_t start, int64_t step, KernelArg dy, KernelArg dx);

}  // namespace tilerun::kernels
