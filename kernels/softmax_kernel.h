// The kernels of softmax and log_softmax over any axis, with a scale, an additive bias and a
// per-row sink logit, and of their backward ops. Their sums follow the lane order of
// reduce_kernel.h, so the block-per-row kernel (a long last axis), the thread-per-row kernel (a
// short last axis) and the strided kernel (any other axis) give the same bits.
//
// Forward, with z = scale · x + bias and m = max(max_k z, sink):
//   D = (lane-order sum of exp(z_k - m)) + exp(sink - m)
//   softmax: y = exp(z - m) / D;  log_softmax: y = (z - m) - log(D).
// x is seen as [Po, Pb, K, R]: the bias covers [Pb, K, R] (a trailing part of x's shape,
// repeated over Po), the sink [Po, Pb, R].
#pragma once

#include <cstdint>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/reduce_kernel.h"

namespace tilerun::kernels {

struct SoftmaxVariant {
  bool log = false, bias = false, sink = false;
};

struct SoftmaxView {
  int64_t po = 1, pb = 1, k = 1, r = 1;
};

// Buffers: x, [bias], [sink] (input slots 0, 1, 2 in that order, absent ones skipped), y
// (output 0); scalar scale.
KernelCall softmax_call(KernelCache& cache, SoftmaxVariant v, DType dtype, const SoftmaxView& view,
                        double scale);

// dx = scale · y · (dy - sum(y · dy))  (log: scale · (dy - exp(y) · sum(dy))) over the K of
// [P, K, R]. Buffers: y, dy (input slots 0, 1), dx (output 0).
KernelCall softmax_grad_call(KernelCache& cache, bool log, DType dtype, const AxisView& view,
                             double scale);

// The sink's gradient: dsink = -(1 - sum(p)) · sum(q), p = y, q = y · dy (log: p = exp(y),
// q = dy), the sink's probability being 1 - sum(p). Buffers: y, dy, dsink [P, R].
KernelCall softmax_sink_grad_call(KernelCache& cache, bool log, DType dtype, const AxisView& view);

}  // namespace tilerun::kernels
