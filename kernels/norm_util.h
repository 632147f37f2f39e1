// Shared by the normalisation families (norm.cc: rmsnorm; layernorm.cc): the `group` attribute
// (per-head norms: the last axis split into groups normalised alone, i.e. the plain norm over the
// [numel / group, group] view), the rows-per-block choice of the backward dx kernels and the
// fixed-order column sum of their weight-gradient partials.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/builder.h"
#include "kernels/op_registry.h"

namespace tilerun::kernels {

extern const AttrSpec kNormGroup;

// The normalised extent: `group`, or the whole last axis when it is 0 or absent. A ShapeError
// naming input 'x' when x is a scalar or the group is negative or does not divide the last axis.
int64_t norm_group(const TensorType& x, const Attrs& attrs);
// How an error names the weights' expected extent: "the last axis of x" or "the group size".
std::string norm_extent_name(const Attrs& attrs);
// x as [rows, group].
std::pair<int64_t, int64_t> norm_rows(const TensorType& x, const Attrs& attrs);
RefTensor as_norm_rows(const RefTensor& x, const Attrs& attrs);

// Backward dx kernels take RB rows per block and write those rows' weight-gradient partial sums
// (f32, in row order). RB is the smallest power of two, at most 16, that keeps the blocks under
// 256: one row per block for up to 256 rows, so a small batch still spreads over the GPU. A
// function of the rows and constants (never the grid), so the summation order is too.
int64_t rows_per_block(int64_t rows);

// The row sums of the norms' kernels that stage their rows in shared memory (the row's shape a
// constant), for `rows` rows at once: thread th of `threads` folds columns th, th + threads, ...
// of each row in order from -0, then a halving tree over the threads in index order, one barrier
// per level for all rows (per row, a block reduction costs its barriers `rows` times).
// values(r, j) gives the V values summed at row r, column j (j < d). Returns the tree, a shared
// f32 [V, rows, threads] whose (v, r, 0) holds sum v of row r after the call's last barrier.
compiler::Buf row_sums(
    compiler::Scope& s, int64_t rows, int64_t d, int64_t n_values, int threads,
    const std::function<std::vector<compiler::Val>(const compiler::Idx&, const compiler::Idx&)>&
        values);

// inv[r] = 1 / sqrt(mean of xs[r, :]² + eps) for the `rows` rows of a shared tile xs [rows, d], by
// row_sums over the block's `threads` threads; a shared f32 [rows], ready after the call's last
// barrier.
compiler::Buf norm_inverses(compiler::Scope& s, const compiler::Buf& xs, int64_t rows, int64_t d,
                            int threads, const compiler::Val& eps);

// out[c] = sum over partial rows p of partial[p, c], in a fixed order: group g of the block's 16
// thread groups sums rows g, g + 16, ... in order, and the group sums are added in group order.
// Parameters: partial (f32), out (dtype); P (partial rows), D. `name` names the kernel.
compiler::Kernel build_partial_column_sum(DType dtype,
                                          const std::string& name = "rmsnorm_grad_dgamma");

}  // namespace tilerun::kernels
