// Softmax over the last axis, and its backward op softmax_grad: one block per row.
#include <algorithm>
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<TensorType> infer_softmax(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  if (in[0].shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  return {in[0]};
}

// (y, dy) -> dx.
std::vector<TensorType> infer_softmax_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "y");
  if (in[0].shape.empty()) throw ShapeError("input 'y' is a scalar, expected rank >= 1");
  expect_same(in[1], "dy", in[0], "y");
  return {in[0]};
}

// The max is subtracted first so that exp never overflows, as the kernels do.
std::vector<RefTensor> ref_softmax(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor& x = in[0];
  auto [rows, cols] = rows_cols(x.shape);
  RefTensor y = ref_zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x.data[r * cols];
    double* yr = &y.data[r * cols];
    double mx = *std::max_element(xr, xr + cols), sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += yr[c] = std::exp(xr[c] - mx);
    for (int64_t c = 0; c < cols; ++c) yr[c] /= sum;
  }
  return {y};
}

// dx = y * (dy - sum(y * dy)) per row: the softmax Jacobian needs only the output.
std::vector<RefTensor> ref_softmax_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &y = in[0], &dy = in[1];
  auto [rows, cols] = rows_cols(y.shape);
  RefTensor dx = ref_zeros(y.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* yr = &y.data[r * cols];
    const double* dyr = &dy.data[r * cols];
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
    for (int64_t c = 0; c < cols; ++c) dx.data[r * cols + c] = yr[c] * (dyr[c] - dot);
  }
  return {dx};
}

std::vector<GradOp> grad_softmax(const std::vector<TensorType>&, const Attrs&,
                                 const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"softmax_grad", {"y0", "dy0"}, {"dx0"}, {}}};
}

// ---- Tile kernels: one block per row of the [R, D] view -----------------------------------

constexpr int kThreads = 128;

// Parameters: x, y; R, D. exp is recomputed in the store rather than kept: a row of any length
// then needs no storage, and the recomputation gives the same bits as the summed terms.
cc::Kernel build_softmax(DType dtype) {
  cc::KernelBuilder kb("softmax_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d});
  cc::Buf y = kb.output("y", dtype, {r, d});
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val mx = s.reduce_max(d, [&](cc::Idx j) { return x(row, j); });
    cc::Val sum = s.reduce_sum(d, [&](cc::Idx j) { return cc::exp(x(row, j) - mx); });
    s.parallel(d, [&](cc::Idx j) { y(row, j) = cc::exp(x(row, j) - mx) / sum; });
  });
  return kb.build();
}

// Parameters: y, dy, dx; R, D.
cc::Kernel build_softmax_grad(DType dtype) {
  cc::KernelBuilder kb("softmax_grad_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf y = kb.input("y", dtype, {r, d}), dy = kb.input("dy", dtype, {r, d});
  cc::Buf dx = kb.output("dx", dtype, {r, d});
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val dot = s.reduce_sum(d, [&](cc::Idx j) { return y(row, j) * dy(row, j); });
    s.parallel(d, [&](cc::Idx j) { dx(row, j) = y(row, j) * (dy(row, j) - dot); });
  });
  return kb.build();
}

// One call binding inputs 0..n_in-1 then output 0, over the [R, D] view of input 0.
ExpandFn expand_rows(std::shared_ptr<KernelCache> cache, std::string name, int n_in,
                     cc::Kernel (*build)(DType)) {
  return [=](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
    DType dt = out[0].dtype;
    auto [rows, cols] = rows_cols(in[0].shape);
    KernelCall call{.kernel = cache->get(kernel_key(name, dt), [&] { return build(dt); }),
                    .dims = {rows, cols}};
    for (int i = 0; i < n_in; ++i) call.buffers.push_back(input_slot(i));
    call.buffers.push_back(output_slot(0));
    return OpExpansion{.calls = {call}};
  };
}

}  // namespace

void register_softmax(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "softmax",
                .doc = "y = exp(x - max) / sum(exp(x - max)) over the last axis",
                .inputs = {"x"},
                .outputs = {"y"},
                .infer = infer_softmax,
                .reference = ref_softmax,
                .gradient = grad_softmax,
                .expand = expand_rows(cache, "softmax", 1, build_softmax),
                .tests = {.kernel = {{{{1, 1}}},
                                     {{{7, 33}}, {}, -30, 30},
                                     {{{130, 7}}},
                                     {{{2, 33, 130}}, {}, -80, 80}},
                          .gradient = {{{{3, 7}}}, {{{1, 1}}}, {{{2, 2, 5}}}},
                          .examples = {{.inputs = {{{1, 2}, {0, 1.0986122886681098}}},  // ln 3
                                        .outputs = {{{1, 2}, {0.25, 0.75}}}}}}});
  registry.add(
      {.name = "softmax_grad",
       .doc = "dx = y * (dy - sum(y * dy)) over the last axis (the backward op of softmax)",
       .inputs = {"y", "dy"},
       .outputs = {"dx"},
       .infer = infer_softmax_grad,
       .reference = ref_softmax_grad,
       .expand = expand_rows(cache, "softmax_grad", 2, build_softmax_grad),
       .tests = {.kernel = {{{{1, 1}, {1, 1}}}, {{{7, 33}, {7, 33}}}, {{{33, 130}, {33, 130}}}},
                 .examples = {{.inputs = {{{2}, {0.25, 0.75}}, {{2}, {1, 0}}},
                               .outputs = {{{2}, {0.1875, -0.1875}}}}}}});
}

}  // namespace tilerun::kernels
