// Normalisations: rmsnorm and its backward op rmsnorm_grad, over the last axis (rows).
#include <cmath>

#include "compiler/builder.h"
#include "kernels/expand_util.h"
#include "kernels/families.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * gamma, rows over the last axis.
std::vector<TensorType> infer_rmsnorm(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  if (in[0].shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  TensorType gamma{in[0].dtype, {in[0].shape.back()}};
  expect_same(in[1], "gamma", gamma, "the last axis of x");
  return {in[0]};
}

// (x, gamma, dy) -> (dx, dgamma).
std::vector<TensorType> infer_rmsnorm_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  infer_rmsnorm(in, attrs);
  expect_same(in[2], "dy", in[0], "x");
  return {in[0], in[1]};
}

const AttrSpec kEps{.name = "eps",
                    .kind = AttrKind::Float,
                    .default_value = AttrValue{1e-6},
                    .doc = "added to the mean square"};

// 1 / sqrt(mean(x[r, :]^2) + eps) of each row r.
std::vector<double> inv_rms(const RefTensor& x, double eps) {
  auto [rows, cols] = rows_cols(x.shape);
  std::vector<double> inv(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x.data[r * cols + c] * x.data[r * cols + c];
    inv[r] = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
  }
  return inv;
}

std::vector<RefTensor> ref_rmsnorm(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &gamma = in[1];
  auto [rows, cols] = rows_cols(x.shape);
  std::vector<double> inv = inv_rms(x, attr_float(attrs, "eps"));
  RefTensor y = ref_zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y.data[r * cols + c] = x.data[r * cols + c] * inv[r] * gamma.data[c];
  return {y};
}

// With n = cols, i = inv_rms, g = gamma * dy (per element):
//   dx[r, c]   = i * g[c] - i^3 * x[r, c] * sum_k(g[k] * x[r, k]) / n
//   dgamma[c]  = sum_r dy[r, c] * x[r, c] * i[r]
std::vector<RefTensor> ref_rmsnorm_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &gamma = in[1], &dy = in[2];
  auto [rows, cols] = rows_cols(x.shape);
  std::vector<double> inv = inv_rms(x, attr_float(attrs, "eps"));
  RefTensor dx = ref_zeros(x.shape), dgamma = ref_zeros(gamma.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x.data[r * cols];
    const double* dyr = &dy.data[r * cols];
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += gamma.data[c] * dyr[c] * xr[c];
    double i = inv[r], k = i * i * i * dot / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      dx.data[r * cols + c] = i * gamma.data[c] * dyr[c] - k * xr[c];
      dgamma.data[c] += dyr[c] * xr[c] * i;
    }
  }
  return {dx, dgamma};
}

// One rmsnorm_grad computes both gradients (they share the per-row statistics); an output whose
// input needs no gradient gets a rule-local name, so nothing accumulates it.
std::vector<GradOp> grad_rmsnorm(const std::vector<TensorType>&, const Attrs& attrs,
                                 const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1]) return {};
  return {{"rmsnorm_grad",
           {"x0", "x1", "dy0"},
           {needs[0] ? "dx0" : "unused_dx", needs[1] ? "dx1" : "unused_dgamma"},
           {{"eps", attr_float(attrs, "eps")}}}};
}

// ---- Tile kernels --------------------------------------------------------------------------
// Tensors are seen as [R, D]: R rows of the last axis D.

constexpr int kThreads = 128;
// rmsnorm_grad: rows per block of the dx kernel, whose dgamma partial sums cover that many rows.
// A constant (not the grid) fixes the summation order for a given R.
constexpr int64_t kRowsPerPartial = 16;
// rmsnorm_grad: columns per block of the dgamma kernel, one thread each.
constexpr int64_t kColsPerBlock = 128;

// 1 / sqrt(mean of squares + eps) of `row`: one rounding each for sqrt and division.
cc::Val inv_rms_of(cc::Scope& s, const cc::Buf& x, const cc::Idx& row, const cc::Dim& d,
                   const cc::Val& eps) {
  cc::Val ss = s.reduce_sum(d, [&](cc::Idx j) {
    cc::Val v = x(row, j);
    return v * v;
  });
  return s.let(1.0f / cc::sqrt(ss / cc::to_f32(d) + eps), "inv");
}

// One block per row. Parameters: x, gamma, y; R, D; eps.
cc::Kernel build_rmsnorm(DType dtype) {
  cc::KernelBuilder kb("rmsnorm_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d}), g = kb.input("gamma", dtype, {d});
  cc::Buf y = kb.output("y", dtype, {r, d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val inv = inv_rms_of(s, x, row, d, eps);
    s.parallel(d, [&](cc::Idx j) { y(row, j) = x(row, j) * inv * g(j); });
  });
  return kb.build();
}

// dx for kRowsPerPartial rows per block, fused with those rows' dgamma partial sums (f32, in row
// order), written owner-computes: the thread of column j owns partial[block, j]. Parameters: x,
// gamma, dy, dx, partial; R, D; eps.
cc::Kernel build_rmsnorm_grad_dx(DType dtype) {
  cc::KernelBuilder kb("rmsnorm_grad_dx_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d}), g = kb.input("gamma", dtype, {d});
  cc::Buf dy = kb.input("dy", dtype, {r, d});
  cc::Buf dx = kb.output("dx", dtype, {r, d});
  cc::Buf partial = kb.output("partial", DType::F32, {cc::ceildiv(r, kRowsPerPartial), d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({cc::ceildiv(r, kRowsPerPartial)}, kThreads, [&](cc::Scope& s) {
    cc::Idx blk = s.block_idx(0), r0 = blk * kRowsPerPartial;
    s.parallel(d, [&](cc::Idx j) { partial(blk, j) = 0.0f; });
    s.serial(cc::min(cc::Val(kRowsPerPartial), r - r0), [&](cc::Idx t) {
      cc::Idx row = r0 + t;
      cc::Val inv = inv_rms_of(s, x, row, d, eps);
      cc::Val dot = s.reduce_sum(d, [&](cc::Idx j) { return g(j) * dy(row, j) * x(row, j); });
      // dx = inv * g * dy - inv^3 * x * dot / D.
      cc::Val k = s.let(inv * inv * inv * dot / cc::to_f32(d), "k");
      s.parallel(d, [&](cc::Idx j) {
        cc::Val xv = s.let(x(row, j), "x"), dyv = s.let(dy(row, j), "dy");
        dx(row, j) = inv * g(j) * dyv - k * xv;
        partial(blk, j) += dyv * xv * inv;
      });
    });
  });
  return kb.build();
}

// dgamma[j] = sum of partial[:, j] in block order, one thread per column. Parameters: partial,
// dgamma; R, D.
cc::Kernel build_rmsnorm_grad_dgamma(DType dtype) {
  cc::KernelBuilder kb("rmsnorm_grad_dgamma_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Val blocks = cc::ceildiv(r, kRowsPerPartial);
  cc::Buf partial = kb.input("partial", DType::F32, {blocks, d});
  cc::Buf dgamma = kb.output("dgamma", dtype, {d});
  kb.body({cc::ceildiv(d, kColsPerBlock)}, static_cast<int>(kColsPerBlock), [&](cc::Scope& s) {
    cc::Idx c0 = s.block_idx(0) * kColsPerBlock;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kColsPerBlock});
    s.parallel(kColsPerBlock, [&](cc::Idx j) { acc(j) = 0.0f; });
    s.serial(blocks, [&](cc::Idx b) {
      s.parallel(kColsPerBlock,
                 [&](cc::Idx j) { s.if_then(c0 + j < d, [&] { acc(j) += partial(b, c0 + j); }); });
    });
    s.parallel(kColsPerBlock,
               [&](cc::Idx j) { s.if_then(c0 + j < d, [&] { dgamma(c0 + j) = acc(j); }); });
  });
  return kb.build();
}

ExpandFn expand_rmsnorm(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dt = out[0].dtype;
    auto [rows, cols] = rows_cols(in[0].shape);
    KernelCall call{
        .kernel = cache->get(kernel_key("rmsnorm", dt), [&] { return build_rmsnorm(dt); }),
        .buffers = {input_slot(0), input_slot(1), output_slot(0)},
        .dims = {rows, cols},
        .scalars = {attr_float(attrs, "eps")}};
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_rmsnorm_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dt = out[0].dtype;
    auto [rows, cols] = rows_cols(in[0].shape);
    int64_t blocks = (rows + kRowsPerPartial - 1) / kRowsPerPartial;
    KernelCall dx{
        .kernel = cache->get(kernel_key("rmsnorm_grad_dx", dt),
                             [&] { return build_rmsnorm_grad_dx(dt); }),
        .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0), scratch_slot(0)},
        .dims = {rows, cols},
        .scalars = {attr_float(attrs, "eps")}};
    KernelCall dgamma{.kernel = cache->get(kernel_key("rmsnorm_grad_dgamma", dt),
                                           [&] { return build_rmsnorm_grad_dgamma(dt); }),
                      .buffers = {scratch_slot(0), output_slot(1)},
                      .dims = {rows, cols}};
    return OpExpansion{.scratch = {TensorType{DType::F32, {blocks, cols}}}, .calls = {dx, dgamma}};
  };
}

}  // namespace

void register_norm(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "rmsnorm",
                .doc = "y = x * rsqrt(mean(x^2, last axis) + eps) * gamma",
                .inputs = {"x", "gamma"},
                .outputs = {"y"},
                .attrs = {kEps},
                .infer = infer_rmsnorm,
                .reference = ref_rmsnorm,
                .gradient = grad_rmsnorm,
                .expand = expand_rmsnorm(cache)});
  registry.add({.name = "rmsnorm_grad",
                .doc = "(dx, dgamma) of rmsnorm from (x, gamma, dy) (the backward op of rmsnorm)",
                .inputs = {"x", "gamma", "dy"},
                .outputs = {"dx", "dgamma"},
                .attrs = {kEps},
                .infer = infer_rmsnorm_grad,
                .reference = ref_rmsnorm_grad,
                .expand = expand_rmsnorm_grad(cache)});
}

}  // namespace tilerun::kernels
