// Layout changes: permute, transpose, broadcast_to, and broadcast_to_grad (broadcast_to's
// backward op, the reductions' fixed-order sum over the broadcast axes). The layout changes run
// one strided kernel (strided.h) over their output, one element per thread; a permute that only
// moves size-1 axes, and a broadcast that only adds size-1 axes, keep the bytes as they are and are
// views.
#include "kernels/broadcast.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/reduce_kernel.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/strided.h"

namespace tilerun::kernels {

namespace {

using Ints = std::vector<int64_t>;

// ---- permute and transpose ------------------------------------------------------------------

// The permutation as given by `perm` (permute) or by swapping dim0 and dim1 (transpose).
Ints permutation(const std::string& op, const TensorType& x, const Attrs& attrs) {
  const size_t rank = x.shape.size();
  if (op == "transpose") {
    if (rank < 2) throw ShapeError("input 'x' is " + to_string(x) + ", expected rank >= 2");
    Ints perm(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
    int64_t a = normalize_axis(attr_int(attrs, "dim0"), rank, "dim0", x, "x");
    int64_t b = normalize_axis(attr_int(attrs, "dim1"), rank, "dim1", x, "x");
    std::swap(perm[a], perm[b]);
    return perm;
  }
  Ints perm = attr_ints(attrs, "perm");
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (int64_t& p : perm) {
    if (p < 0) p += static_cast<int64_t>(rank);
    ok = ok && p >= 0 && p < static_cast<int64_t>(rank) && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok)
    throw ShapeError("attribute 'perm' " + shape_text(attr_ints(attrs, "perm")) +
                     ", expected a permutation of the " + std::to_string(rank) +
                     " axes of input 'x' " + to_string(x));
  return perm;
}

decltype(OpSchema::infer) infer_permute(std::string op) {
  return [op](const std::vector<TensorType>& in, const Attrs& attrs) {
    expect_float(in[0], "x");
    Ints perm = permutation(op, in[0], attrs), shape;
    for (int64_t p : perm) shape.push_back(in[0].shape[p]);
    return std::vector<TensorType>{{in[0].dtype, shape}};
  };
}

// y's axis i is x's axis perm[i]: y read from x through x's strides, permuted.
StridedView permuted(const Ints& x_shape, const Ints& perm) {
  const Ints xs = row_major_strides(x_shape);
  StridedView v;
  for (int64_t p : perm) {
    v.shape.push_back(x_shape[p]);
    v.strides.push_back(xs[p]);
  }
  return v;
}

decltype(OpSchema::reference) ref_permute(std::string op) {
  return [op](const std::vector<RefTensor>& in, const Attrs& attrs) {
    Ints perm = permutation(op, {DType::F32, in[0].shape}, attrs);
    StridedView v = permuted(in[0].shape, perm);
    RefTensor y = ref_zeros(v.shape);
    const Ints ys = row_major_strides(v.shape);
    for (int64_t e = 0; e < y.numel(); ++e) {
      int64_t at = 0;
      for (size_t j = 0; j < ys.size(); ++j) at += (e / ys[j]) % v.shape[j] * v.strides[j];
      y.data[e] = in[0].data[at];
    }
    return std::vector<RefTensor>{y};
  };
}

// Only size-1 axes move: the bytes are already in y's order.
decltype(OpSchema::view) view_permute(std::string op) {
  return [op](const std::vector<TensorType>& in, const std::vector<TensorType>&,
              const Attrs& attrs) -> std::optional<std::vector<ViewOf>> {
    Ints kept;
    for (int64_t p : permutation(op, in[0], attrs))
      if (in[0].shape[p] != 1) kept.push_back(p);
    for (size_t i = 1; i < kept.size(); ++i)
      if (kept[i] < kept[i - 1]) return std::nullopt;
    return std::vector<ViewOf>{{0, 0}};
  };
}

ExpandFn expand_permute(std::shared_ptr<KernelCache> cache, std::string op) {
  return [cache, op](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                     const Attrs& attrs) {
    StridedView v = permuted(in[0].shape, permutation(op, in[0], attrs));
    return OpExpansion{.calls = {strided_copy_call(*cache, in[0].dtype, numel(in[0]), v,
                                                   input_slot(0), output_slot(0))}};
  };
}

// dx = dy permuted back: permute by the inverse (a transpose is its own inverse).
decltype(OpSchema::gradient) grad_permute(std::string op) {
  return [op](const std::vector<TensorType>& in, const Attrs& attrs,
              const std::vector<bool>& needs) -> std::vector<GradOp> {
    if (!needs[0]) return {};
    if (op == "transpose") return {{"transpose", {"dy0"}, {"dx0"}, attrs}};
    Ints perm = permutation(op, in[0], attrs), inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
    return {{"permute", {"dy0"}, {"dx0"}, {{"perm", inverse}}}};
  };
}

// ---- broadcast_to and its gradient --------------------------------------------------------------

// x's shape right-aligned against `shape`: each of x's sizes must be 1 or the size it faces.
void expect_broadcastable(const TensorType& x, const std::string& slot, const Ints& shape,
                          const std::string& what) {
  bool ok = x.shape.size() <= shape.size();
  const size_t lead = ok ? shape.size() - x.shape.size() : 0;
  for (size_t j = 0; ok && j < x.shape.size(); ++j)
    ok = x.shape[j] == 1 || x.shape[j] == shape[lead + j];
  for (int64_t d : shape) ok = ok && d > 0;
  if (!ok)
    throw ShapeError("input '" + slot + "' is " + to_string(x) +
                     ", expected sizes that broadcast to " + what + " " + shape_text(shape) +
                     " (NumPy rules: aligned from the last axis, each size 1 or equal)");
}

std::vector<TensorType> infer_broadcast_to(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  Ints shape = attr_ints(attrs, "shape");
  expect_broadcastable(in[0], "x", shape, "attribute 'shape'");
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_broadcast_to(const std::vector<RefTensor>& in, const Attrs& attrs) {
  StridedView v = broadcast_view(in[0].shape, attr_ints(attrs, "shape"));
  RefTensor y = ref_zeros(v.shape);
  const Ints ys = row_major_strides(v.shape);
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t at = 0;
    for (size_t j = 0; j < ys.size(); ++j) at += (e / ys[j]) % v.shape[j] * v.strides[j];
    y.data[e] = in[0].data[at];
  }
  return {y};
}

std::optional<std::vector<ViewOf>> view_broadcast_to(const std::vector<TensorType>& in,
                                                     const std::vector<TensorType>& out,
                                                     const Attrs&) {
  if (numel(in[0]) != numel(out[0])) return std::nullopt;
  return std::vector<ViewOf>{{0, 0}};
}

ExpandFn expand_broadcast_to(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    StridedView v = broadcast_view(in[0].shape, attr_ints(attrs, "shape"));
    return OpExpansion{.calls = {strided_copy_call(*cache, in[0].dtype, numel(in[0]), v,
                                                   input_slot(0), output_slot(0))}};
  };
}

std::vector<GradOp> grad_broadcast_to(const std::vector<TensorType>& in, const Attrs&,
                                      const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"broadcast_to_grad", {"dy0"}, {"dx0"}, {{"shape", in[0].shape}}}};
}

std::vector<TensorType> infer_broadcast_to_grad(const std::vector<TensorType>& in,
                                                const Attrs& attrs) {
  expect_float(in[0], "dy");
  Ints shape = attr_ints(attrs, "shape");
  expect_broadcastable({in[0].dtype, shape}, "shape", in[0].shape, "input 'dy'");
  return {{in[0].dtype, shape}};
}

// dx (of `shape`) = dy summed over the axes `shape` broadcasts along.
std::vector<RefTensor> ref_broadcast_to_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  return {ref_sum_to_shape(in[0], attr_ints(attrs, "shape"))};
}

ExpandFn expand_broadcast_to_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const Ints shape = attr_ints(attrs, "shape");
    return reduce_over_axes(*cache, ReduceKind::Sum, in[0], in[0].dtype,
                            broadcast_axes(in[0].shape, shape));
  };
}

AttrSpec axis_attr(std::string name, int64_t def, std::string doc) {
  return {.name = std::move(name),
          .kind = AttrKind::Int,
          .default_value = AttrValue{def},
          .doc = std::move(doc)};
}

AttrSpec shape_attr(std::string doc) {
  return {.name = "shape", .kind = AttrKind::IntList, .doc = std::move(doc)};
}

}  // namespace

void register_layout(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "permute",
       .doc = "y = x with its axes reordered: axis i of y is axis perm[i] of x; a copy kernel "
              "(a view when only size-1 axes move)",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {{.name = "perm",
                  .kind = AttrKind::IntList,
                  .doc = "a permutation of the axes (negative counts from the end)"}},
       .infer = infer_permute("permute"),
       .reference = ref_permute("permute"),
       .gradient = grad_permute("permute"),
       .expand = expand_permute(cache, "permute"),
       .view = view_permute("permute"),
       .tests = {.kernel = {{{{2, 3, 4, 5}}, {{"perm", Ints{0, 2, 1, 3}}}},
                            {{{7, 33, 130}}, {{"perm", Ints{2, 0, 1}}}},
                            {{{5, 1, 3}}, {{"perm", Ints{1, 2, 0}}}},
                            // Long rows: 8 and 2 elements a thread (strided_rows), partial chunks.
                            {{{3, 5, 2100}}, {{"perm", Ints{1, 0, 2}}}},
                            {{{4, 3, 700}}, {{"perm", Ints{1, 0, 2}}}}},
                 .gradient = {{{{2, 3, 4}}, {{"perm", Ints{1, 2, 0}}}}},
                 .examples = {{.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                               .attrs = {{"perm", Ints{1, 0}}},
                               .outputs = {{{3, 2}, {1, 4, 2, 5, 3, 6}}}}}}});
  registry.add(
      {.name = "transpose",
       .doc = "y = x with axes dim0 and dim1 swapped; a copy kernel",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {axis_attr("dim0", -2, "one axis"), axis_attr("dim1", -1, "the other")},
       .infer = infer_permute("transpose"),
       .reference = ref_permute("transpose"),
       .gradient = grad_permute("transpose"),
       .expand = expand_permute(cache, "transpose"),
       .view = view_permute("transpose"),
       // The first two on the tiled transpose (strided.cc): ragged tiles, and several
       // whole ones.
       .tests = {.kernel = {{{{33, 130}}}, {{{70, 100}}}, {{{3, 7, 5}}, {{"dim0", int64_t{0}}}}},
                 .gradient = {{{{2, 3, 4}}, {{"dim0", int64_t{0}}}}},
                 .examples = {{.inputs = {{{1, 2, 2}, {1, 2, 3, 4}}},
                               .outputs = {{{1, 2, 2}, {1, 3, 2, 4}}}}}}});
  registry.add(
      {.name = "broadcast_to",
       .doc = "y = x repeated along the axes where x has size 1 or none (NumPy rules) to shape; "
              "a copy kernel (a view when only size-1 axes are added)",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {shape_attr("the target shape")},
       .infer = infer_broadcast_to,
       .reference = ref_broadcast_to,
       .gradient = grad_broadcast_to,
       .expand = expand_broadcast_to(cache),
       .view = view_broadcast_to,
       .tests = {.kernel = {{{{7, 1, 5}}, {{"shape", Ints{3, 7, 130, 5}}}},
                            {{{130}}, {{"shape", Ints{33, 130}}}},
                            {{{1}}, {{"shape", Ints{2, 3}}}}},
                 .gradient = {{{{3, 1}}, {{"shape", Ints{2, 3, 4}}}}},
                 .examples = {{.inputs = {{{2, 1}, {1, 2}}},
                               .attrs = {{"shape", Ints{2, 3}}},
                               .outputs = {{{2, 3}, {1, 1, 1, 2, 2, 2}}}}}}});
  registry.add({.name = "broadcast_to_grad",
                .doc = "dx = dy summed over the axes shape broadcasts along, in row-major order of "
                       "those axes (the backward op of broadcast_to)",
                .inputs = {"dy"},
                .outputs = {"dx"},
                .attrs = {shape_attr("the shape of dx, which broadcasts to dy's")},
                .infer = infer_broadcast_to_grad,
                .reference = ref_broadcast_to_grad,
                .expand = expand_broadcast_to_grad(cache),
                .tests = {.kernel = {{{{3, 7, 130, 5}}, {{"shape", Ints{7, 1, 5}}}},
                                     {{{33, 130}}, {{"shape", Ints{130}}}},
                                     // Positive terms: a 4400-term sum that cancels to near 0
                                     // would measure the cancellation, not the kernel.
                                     {.shapes = {{4, 1100}},
                                      .attrs = {{"shape", Ints{1, 1}}},
                                      .lo = 0.25,
                                      .hi = 2}},
                          .examples = {{.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                                        .attrs = {{"shape", Ints{3}}},
                                        .outputs = {{{3}, {5, 7, 9}}}}}}});
}

}  // namespace tilerun::kernels
