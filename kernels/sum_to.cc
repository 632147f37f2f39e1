// sum_to: the sum of x over the axes along which `shape` is broadcast to x's shape (NumPy rules)
// — the gradient of a broadcast operand. Strict and batch-invariant: the reduction kernels'
// lane order (reduce_kernel.h), fixed by the shape alone, no atomics; a sum of -0s stays -0.
#include "kernels/broadcast.h"
#include "kernels/expand_util.h"
#include "kernels/op_registry.h"
#include "kernels/reduce_kernel.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<int64_t> target_shape(const Attrs& attrs) {
  return std::get<std::vector<int64_t>>(attrs.at("shape"));
}

std::vector<TensorType> infer_sum_to(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  std::vector<int64_t> shape = target_shape(attrs);
  for (int64_t d : shape)
    if (d < 1)
      throw ShapeError("attribute 'shape' has extent " + std::to_string(d) + ", expected >= 1");
  if (!broadcasts_to(shape, in[0].shape))
    throw ShapeError("attribute 'shape' " + to_string(TensorType{in[0].dtype, shape}) +
                     " does not broadcast to input 'x' " + to_string(in[0]) +
                     " (expected x's trailing extents or 1, NumPy rules)");
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_sum_to(const std::vector<RefTensor>& in, const Attrs& attrs) {
  return {ref_sum_to_shape(in[0], target_shape(attrs))};
}

ExpandFn expand_sum_to(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
        return reduce_over_axes(*cache, ReduceKind::Sum, in[0], out[0].dtype,
                                broadcast_axes(in[0].shape, out[0].shape));
      };
}

}  // namespace

RefTensor ref_sum_to_shape(const RefTensor& x, const std::vector<int64_t>& target) {
  RefTensor out = ref_zeros(target);
  for (double& v : out.data) v = -0.0;
  const size_t rank = x.shape.size();
  std::vector<int64_t> t(rank - target.size(), 1);
  t.insert(t.end(), target.begin(), target.end());
  // Each x element adds into the output element at its coordinates with summed axes at 0; x is
  // walked in index order, so each output's terms come in increasing index order.
  std::vector<int64_t> coord(rank, 0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d) o = o * t[d] + (t[d] == 1 ? 0 : coord[d]);
    out.data[o] += x.data[e];
    for (size_t d = rank; d-- > 0;) {
      if (++coord[d] < x.shape[d]) break;
      coord[d] = 0;
    }
  }
  return out;
}

void register_sum_to(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "sum_to",
       .doc = "out = x summed over the axes along which the attribute shape broadcasts to x's "
              "shape (the "
              "gradient of a broadcast operand); a fixed-order sum (the reductions' lane order), "
              "no atomics",
       .inputs = {"x"},
       .outputs = {"out"},
       .attrs = {{.name = "shape",
                  .kind = AttrKind::IntList,
                  .doc = "the output shape; broadcasts to x's shape (NumPy rules)"}},
       .infer = infer_sum_to,
       .reference = ref_sum_to,
       .expand = expand_sum_to(cache),
       // Leading, trailing, middle and alternating summed axes, a scalar result, odd sizes.
       .tests = {.kernel = {{{{33, 130}}, {{"shape", std::vector<int64_t>{130}}}},
                            {{{33, 130}}, {{"shape", std::vector<int64_t>{33, 1}}}},
                            {{{5, 7, 3}}, {{"shape", std::vector<int64_t>{5, 1, 3}}}},
                            {{{2, 3, 5, 7}}, {{"shape", std::vector<int64_t>{3, 1, 7}}}},
                            {{{1025}}, {{"shape", std::vector<int64_t>{}}}},
                            {{{3, 1, 7}}, {{"shape", std::vector<int64_t>{1, 1, 7}}}},
                            {{{9, 4}}, {{"shape", std::vector<int64_t>{9, 4}}}},
                            // A long axis, 1100 outputs: the lanes pass, then the lanes folded.
                            {{{1030, 1100}}, {{"shape", std::vector<int64_t>{1100}}}}},
                 .examples = {{.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                               .attrs = {{"shape", std::vector<int64_t>{3}}},
                               .outputs = {{{3}, {5, 7, 9}}}},
                              {.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                               .attrs = {{"shape", std::vector<int64_t>{2, 1}}},
                               .outputs = {{{2, 1}, {6, 15}}}},
                              // -0 + -0 stays -0; inf + -inf is NaN.
                              {.inputs = {{{2, 2}, {-0.0, kInf(), -0.0, -kInf()}}},
                               .attrs = {{"shape", std::vector<int64_t>{1, 2}}},
                               .outputs = {{{1, 2}, {-0.0, kNaN()}}}}}}});
}

}  // namespace tilerun::kernels
