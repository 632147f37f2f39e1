// Reductions over one axis in the lane order, shared by the reduce family and softmax: a tensor
// seen as [P, K, R] (outer, reduced extent, inner), every output y[p, r] folds x[p, :, r] in an
// order fixed by K alone:
//   lane g (0 <= g < min(kLanes, K)) folds k = g, g + kLanes, g + 2·kLanes, ... in order,
//   starting from its first element; then the lanes' partials are folded in lane order 0, 1, ...
// Two kernel shapes compute that same order, so their bits agree and the choice between them (a
// function of the shape only) never changes a result: the row kernel (one block per output, the
// lanes on threads; for a long contiguous axis, or a long strided one with few outputs) and the
// column kernel (one thread per output, looping over the lanes; for a strided axis or short
// rows). No atomics, no dependence on the number of outputs or the grid.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"

namespace tilerun::kernels {

constexpr int64_t kLanes = 128;

// A tensor seen around a contiguous range of axes [first, last): [outer, extent, inner].
struct AxisView {
  int64_t outer = 1, extent = 1, inner = 1;
};
AxisView axis_view(const std::vector<int64_t>& shape, int first, int last);

// `axis` (negative counts from the end) as an index into a tensor of `rank`; a ShapeError naming
// the attribute, the operand and the allowed range otherwise.
int normalize_axis(int64_t axis, size_t rank, const std::string& attr, const std::string& operand);

// What a reduction computes: the element map, the fold and the finish.
enum class ReduceKind { Sum, Mean, Max, Min, LogSumExp, L2, L1 };
std::string reduce_kind_name(ReduceKind k);  // "sum", "mean", "max", "min", "logsumexp", "l2", "l1"

// True when the row kernel serves this view: a contiguous axis long enough to fill a block.
bool use_row_kernel(const AxisView& v);

// The call of the reduction kernel for `v`: x [P, K, R] of `in` dtype → y [P, R] of `out` dtype.
KernelCall reduce_call(KernelCache& cache, ReduceKind kind, DType in, DType out, const AxisView& v,
                       KernelArg x, KernelArg y);

// Runs of adjacent axes of the sorted `axes`, [first, last), in axis order.
std::vector<std::pair<int, int>> runs_of(const std::vector<int>& axes);

// A reduction of x over `axes` (sorted, each once; empty: a plain copy) into out_dtype: one
// reduce_call per run of adjacent axes, the last run first, each later stage reading the f32
// scratch of the one before. The one fixed-order sum behind reduce_*, sum_to and
// broadcast_to_grad (each output depends on the shape only, never on the grid).
OpExpansion reduce_over_axes(KernelCache& cache, ReduceKind kind, const TensorType& x,
                             DType out_dtype, const std::vector<int>& axes);

// x's axes summed when `shape` broadcasts to x's shape (NumPy rules): x's leading axes beyond
// shape's rank and those where shape has 1 and x does not.
std::vector<int> broadcast_axes(const std::vector<int64_t>& x_shape,
                                const std::vector<int64_t>& shape);

// Lane-order folding inside a tile program, for kernels that fuse a reduction with more work:
// value(k) is the k-th element (already mapped), fold combines two partials. `lanes` must be a
// shared f32 buffer of [kLanes] and `total` one of [1]; on return every thread may read
// total(0) (a barrier has passed). One block, kLanes threads, per row.
void fold_row(compiler::Scope& s, const compiler::Val& k_extent, const compiler::Buf& lanes,
              const compiler::Buf& total, const std::function<compiler::Val(compiler::Idx)>& value,
              const std::function<compiler::Val(compiler::Val, compiler::Val)>& fold);

// The same order run by one thread (inside a parallel over the block, at thread index t):
// acc(t) receives the total; part(t) is its scratch. Both fragments of [kThreads].
void fold_thread(compiler::Scope& s, const compiler::Val& k_extent, const compiler::Idx& t,
                 const compiler::Buf& acc, const compiler::Buf& part,
                 const std::function<compiler::Val(compiler::Idx)>& value,
                 const std::function<compiler::Val(compiler::Val, compiler::Val)>& fold);

}  // namespace tilerun::kernels
