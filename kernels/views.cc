// over 600 lines: the six shape ops are one family (slices, splits and concats are each other's
// gradients, and all share the view rules below).
// Shapes without copies: reshape (alias view), expand_dims, squeeze, slice, split, concat.
// reshape, expand_dims and squeeze are always views (OpSchema::view): the output is the input's
// bytes, no kernel runs. A slice or a split along an axis with only size-1 axes before it (the
// leading axis, say) is a view at an offset when that offset is 16-byte aligned; otherwise, and
// for concat, a copy kernel (strided.h) runs: one for all the parts of a split or a concat where
// every part's rows are whole 16-byte vectors. Every op also has its copy expansion, which the
// shared kernel suites test against the reference.
#include <algorithm>
#include <numeric>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/strided.h"

namespace tilerun::kernels {

namespace {

using Ints = std::vector<int64_t>;
constexpr int kMaxParts = 8;  // split's outputs and concat's inputs

// ---- reshape, expand_dims, squeeze: the same bytes under another shape ----------------------

Ints reshape_target(const TensorType& x, const Ints& shape) {
  const int64_t n = numel(x);
  int64_t known = 1, free_axis = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && free_axis < 0) {
      free_axis = static_cast<int64_t>(i);
      continue;
    }
    if (shape[i] <= 0)
      throw ShapeError("attribute 'shape' " + shape_text(shape) + " has an entry " +
                       std::to_string(shape[i]) + ", expected positive sizes and at most one -1");
    known *= shape[i];
  }
  Ints out = shape;
  if (free_axis >= 0 && known > 0 && n % known == 0) out[free_axis] = n / known;
  if (product(out, 0, out.size()) != n || (free_axis >= 0 && out[free_axis] <= 0))
    throw ShapeError("input 'x' is " + to_string(x) + " with " + std::to_string(n) +
                     " elements, expected attribute 'shape' " + shape_text(shape) +
                     " to hold as many");
  return out;
}

std::vector<TensorType> infer_reshape(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  return {{in[0].dtype, reshape_target(in[0], attr_ints(attrs, "shape"))}};
}

std::vector<TensorType> infer_expand_dims(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  Ints shape = in[0].shape;
  int64_t axis = normalize_axis(attr_int(attrs, "axis"), shape.size() + 1, "axis", in[0], "x");
  shape.insert(shape.begin() + axis, 1);
  return {{in[0].dtype, shape}};
}

std::vector<TensorType> infer_squeeze(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  Ints shape = in[0].shape;
  int64_t axis = normalize_axis(attr_int(attrs, "axis"), shape.size(), "axis", in[0], "x");
  if (shape[axis] != 1)
    throw ShapeError("input 'x' is " + to_string(in[0]) + ", expected size 1 along axis " +
                     std::to_string(axis) + " to squeeze, found " + std::to_string(shape[axis]));
  shape.erase(shape.begin() + axis);
  return {{in[0].dtype, shape}};
}

// The reference of every same-bytes op: the data under the inferred shape.
decltype(OpSchema::reference) same_bytes_reference(decltype(OpSchema::infer) infer) {
  return [infer](const std::vector<RefTensor>& in, const Attrs& attrs) {
    RefTensor y = in[0];
    y.shape = infer({{DType::F32, in[0].shape}}, attrs)[0].shape;
    return std::vector<RefTensor>{y};
  };
}

std::optional<std::vector<ViewOf>> same_bytes_view(const std::vector<TensorType>&,
                                                   const std::vector<TensorType>&, const Attrs&) {
  return std::vector<ViewOf>{{0, 0}};
}

// dx = dy under x's shape: itself a view.
std::vector<GradOp> grad_same_bytes(const std::vector<TensorType>& in, const Attrs&,
                                    const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"reshape", {"dy0"}, {"dx0"}, {{"shape", in[0].shape}}}};
}

ExpandFn expand_flat_copy(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const int64_t n = numel(in[0]);
    return OpExpansion{.calls = {strided_copy_call(*cache, in[0].dtype, n, {{n}, {1}, 0},
                                                   input_slot(0), output_slot(0))}};
  };
}

// ---- slice ------------------------------------------------------------------------------------

// A slice's attributes, normalised against its input: [start, stop) with step along axis, and
// the tensor seen as [outer, size, inner] around that axis.
struct SliceSpec {
  int64_t axis = 0, start = 0, stop = 0, step = 1, len = 0;
  int64_t outer = 1, size = 0, inner = 1;
};

SliceSpec slice_spec(const TensorType& x, const Attrs& attrs) {
  if (x.shape.empty()) throw ShapeError("input 'x' is " + to_string(x) + ", expected rank >= 1");
  SliceSpec s;
  s.axis = normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", x, "x");
  s.size = x.shape[s.axis];
  s.outer = product(x.shape, 0, s.axis);
  s.inner = product(x.shape, s.axis + 1, x.shape.size());
  s.step = attr_int(attrs, "step");
  auto bound = [&](const char* name) {
    int64_t v = attr_int(attrs, name);
    int64_t at = v < 0 ? v + s.size : v;
    if (at < 0 || at > s.size)
      throw ShapeError("attribute '" + std::string(name) + "' is " + std::to_string(v) +
                       ", expected a position in [-" + std::to_string(s.size) + ", " +
                       std::to_string(s.size) + "] along axis " + std::to_string(s.axis) +
                       " of input 'x' " + to_string(x));
    return at;
  };
  s.start = bound("start");
  s.stop = bound("stop");
  if (s.start >= s.stop)
    throw ShapeError("attributes 'start' " + std::to_string(s.start) + " and 'stop' " +
                     std::to_string(s.stop) + " select nothing of axis " + std::to_string(s.axis) +
                     " of input 'x' " + to_string(x) + ", expected start < stop");
  s.len = (s.stop - s.start + s.step - 1) / s.step;
  return s;
}

std::vector<TensorType> infer_slice(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  SliceSpec s = slice_spec(in[0], attrs);
  Ints shape = in[0].shape;
  shape[s.axis] = s.len;
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_slice(const std::vector<RefTensor>& in, const Attrs& attrs) {
  SliceSpec s = slice_spec({DType::F32, in[0].shape}, attrs);
  Ints shape = in[0].shape;
  shape[s.axis] = s.len;
  RefTensor y = ref_zeros(shape);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t a = 0; a < s.len; ++a)
      for (int64_t r = 0; r < s.inner; ++r)
        y.data[(o * s.len + a) * s.inner + r] =
            in[0].data[(o * s.size + s.start + a * s.step) * s.inner + r];
  return {y};
}

// Contiguous (only size-1 axes before the axis, or the whole axis) and aligned: a view.
std::optional<std::vector<ViewOf>> view_slice(const std::vector<TensorType>& in,
                                              const std::vector<TensorType>&, const Attrs& attrs) {
  SliceSpec s = slice_spec(in[0], attrs);
  if (s.len == s.size) return std::vector<ViewOf>{{0, 0}};
  if (s.outer != 1 || (s.step != 1 && s.len != 1)) return std::nullopt;
  if (!aligned_view(in[0].dtype, s.start * s.inner)) return std::nullopt;
  return std::vector<ViewOf>{{0, s.start * s.inner}};
}

ExpandFn expand_slice(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    SliceSpec s = slice_spec(in[0], attrs);
    StridedView v{.shape = {s.outer, s.len, s.inner},
                  .strides = {s.size * s.inner, s.step * s.inner, 1},
                  .offset = s.start * s.inner};
    return OpExpansion{.calls = {strided_copy_call(*cache, in[0].dtype, numel(in[0]), v,
                                                   input_slot(0), output_slot(0))}};
  };
}

std::vector<GradOp> grad_slice(const std::vector<TensorType>& in, const Attrs& attrs,
                               const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  SliceSpec s = slice_spec(in[0], attrs);
  return {{"slice_grad",
           {"dy0"},
           {"dx0"},
           {{"axis", s.axis}, {"start", s.start}, {"step", s.step}, {"size", s.size}}}};
}

// slice_grad: dy [.., len, ..] placed at start, start + step, ... of zeros [.., size, ..].
struct UnsliceSpec {
  int64_t axis, start, step, size, len, outer, inner;
};

UnsliceSpec unslice_spec(const TensorType& dy, const Attrs& attrs) {
  if (dy.shape.empty()) throw ShapeError("input 'dy' is " + to_string(dy) + ", expected rank >= 1");
  UnsliceSpec u{};
  u.axis = normalize_axis(attr_int(attrs, "axis"), dy.shape.size(), "axis", dy, "dy");
  u.start = attr_int(attrs, "start");
  u.step = attr_int(attrs, "step");
  u.size = attr_int(attrs, "size");
  u.len = dy.shape[u.axis];
  u.outer = product(dy.shape, 0, u.axis);
  u.inner = product(dy.shape, u.axis + 1, dy.shape.size());
  if (u.start < 0 || u.start + (u.len - 1) * u.step >= u.size)
    throw ShapeError("input 'dy' is " + to_string(dy) + ": " + std::to_string(u.len) +
                     " positions from " + std::to_string(u.start) + " by " +
                     std::to_string(u.step) + " do not fit attribute 'size' " +
                     std::to_string(u.size));
  return u;
}

std::vector<TensorType> infer_slice_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "dy");
  UnsliceSpec u = unslice_spec(in[0], attrs);
  Ints shape = in[0].shape;
  shape[u.axis] = u.size;
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_slice_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  UnsliceSpec u = unslice_spec({DType::F32, in[0].shape}, attrs);
  Ints shape = in[0].shape;
  shape[u.axis] = u.size;
  RefTensor dx = ref_zeros(shape);
  for (int64_t o = 0; o < u.outer; ++o)
    for (int64_t a = 0; a < u.len; ++a)
      for (int64_t r = 0; r < u.inner; ++r)
        dx.data[(o * u.size + u.start + a * u.step) * u.inner + r] =
            in[0].data[(o * u.len + a) * u.inner + r];
  return {dx};
}

ExpandFn expand_slice_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    UnsliceSpec u = unslice_spec(in[0], attrs);
    return OpExpansion{.calls = {unslice_call(*cache, in[0].dtype, u.outer, u.size, u.inner, u.len,
                                              u.start, u.step, input_slot(0), output_slot(0))}};
  };
}

// ---- split and concat -------------------------------------------------------------------------

// The sizes of split's parts along its axis, from sizes or parts (exactly one given).
Ints split_sizes(const TensorType& x, int64_t axis, const Attrs& attrs) {
  Ints sizes = attr_ints(attrs, "sizes");
  const int64_t parts = attr_int(attrs, "parts"), dim = x.shape[axis];
  if (sizes.empty() == (parts == 0))
    throw ShapeError("expected exactly one of attributes 'sizes' and 'parts'");
  if (parts != 0) {
    if (parts < 0 || dim % parts != 0)
      throw ShapeError("attribute 'parts' is " + std::to_string(parts) +
                       ", expected a positive divisor of " + std::to_string(dim) +
                       ", the size of axis " + std::to_string(axis) + " of input 'x' " +
                       to_string(x));
    sizes.assign(parts, dim / parts);
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s <= 0)
      throw ShapeError("attribute 'sizes' " + shape_text(sizes) + " has a non-positive entry");
    total += s;
  }
  if (total != dim)
    throw ShapeError("attribute 'sizes' " + shape_text(sizes) + " adds up to " +
                     std::to_string(total) + ", expected " + std::to_string(dim) +
                     ", the size of axis " + std::to_string(axis) + " of input 'x' " +
                     to_string(x));
  if (sizes.size() > static_cast<size_t>(kMaxParts))
    throw ShapeError("split into " + std::to_string(sizes.size()) + " parts, expected at most " +
                     std::to_string(kMaxParts));
  return sizes;
}

int64_t split_axis(const TensorType& x, const Attrs& attrs) {
  if (x.shape.empty()) throw ShapeError("input 'x' is " + to_string(x) + ", expected rank >= 1");
  return normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", x, "x");
}

std::vector<TensorType> infer_split(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const int64_t axis = split_axis(in[0], attrs);
  std::vector<TensorType> out;
  for (int64_t s : split_sizes(in[0], axis, attrs)) {
    Ints shape = in[0].shape;
    shape[axis] = s;
    out.push_back({in[0].dtype, shape});
  }
  return out;
}

// Slice attributes of split's part i.
std::vector<Attrs> split_slices(const TensorType& x, const Attrs& attrs) {
  const int64_t axis = split_axis(x, attrs);
  std::vector<Attrs> out;
  int64_t at = 0;
  for (int64_t s : split_sizes(x, axis, attrs)) {
    out.push_back({{"axis", axis}, {"start", at}, {"stop", at + s}, {"step", int64_t{1}}});
    at += s;
  }
  return out;
}

std::vector<RefTensor> ref_split(const std::vector<RefTensor>& in, const Attrs& attrs) {
  std::vector<RefTensor> out;
  for (const Attrs& a : split_slices({DType::F32, in[0].shape}, attrs))
    out.push_back(ref_slice(in, a)[0]);
  return out;
}

// Every part a view, or none: a split is one op with one expansion.
std::optional<std::vector<ViewOf>> view_split(const std::vector<TensorType>& in,
                                              const std::vector<TensorType>& out,
                                              const Attrs& attrs) {
  std::vector<ViewOf> views;
  for (const Attrs& a : split_slices(in[0], attrs)) {
    std::optional<std::vector<ViewOf>> v = view_slice(in, out, a);
    if (!v) return std::nullopt;
    views.push_back((*v)[0]);
  }
  return views;
}

ExpandFn expand_split(std::shared_ptr<KernelCache> cache) {
  ExpandFn slice = expand_slice(cache);
  return [cache, slice](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                        const Attrs& attrs) {
    OpExpansion ex;
    const int64_t axis = split_axis(in[0], attrs);
    const Ints& x = in[0].shape;
    std::vector<KernelArg> buffers{input_slot(0)};
    for (size_t i = 0; i < out.size(); ++i) buffers.push_back(output_slot(static_cast<int>(i)));
    if (std::optional<KernelCall> call =
            parts_call(*cache, in[0].dtype, /*split=*/true, product(x, 0, axis),
                       split_sizes(in[0], axis, attrs), product(x, axis + 1, x.size()), buffers)) {
      ex.calls.push_back(*call);
      return ex;
    }
    std::vector<Attrs> parts = split_slices(in[0], attrs);
    for (size_t i = 0; i < parts.size(); ++i) {
      KernelCall call = slice(in, {out[i]}, parts[i]).calls.at(0);
      call.buffers[1] = output_slot(static_cast<int>(i));
      ex.calls.push_back(call);
    }
    return ex;
  };
}

std::vector<GradOp> grad_split(const std::vector<TensorType>& in, const Attrs& attrs,
                               const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  std::vector<Attrs> parts = split_slices(in[0], attrs);
  GradOp concat{"concat", {}, {"dx0"}, {{"axis", split_axis(in[0], attrs)}}};
  for (size_t i = 0; i < parts.size(); ++i) concat.inputs.push_back(dy_name(static_cast<int>(i)));
  return {concat};
}

int64_t concat_axis(const std::vector<TensorType>& in, const Attrs& attrs) {
  if (in[0].dtype != DType::I32) expect_float(in[0], "x0");  // the others: x0's dtype, below
  if (in[0].shape.empty())
    throw ShapeError("input 'x0' is " + to_string(in[0]) + ", expected rank >= 1");
  const int64_t axis =
      normalize_axis(attr_int(attrs, "axis"), in[0].shape.size(), "axis", in[0], "x0");
  for (size_t i = 1; i < in.size(); ++i) {
    Ints a = in[i].shape, b = in[0].shape;
    if (a.size() == b.size()) a[axis] = b[axis] = 0;
    if (a != b || in[i].dtype != in[0].dtype)
      throw ShapeError("input '" + x_name(static_cast<int>(i)) + "' is " + to_string(in[i]) +
                       ", expected the dtype and every size but axis " + std::to_string(axis) +
                       " of 'x0' " + to_string(in[0]));
  }
  return axis;
}

std::vector<TensorType> infer_concat(const std::vector<TensorType>& in, const Attrs& attrs) {
  const int64_t axis = concat_axis(in, attrs);
  Ints shape = in[0].shape;
  shape[axis] = 0;
  for (const TensorType& t : in) shape[axis] += t.shape[axis];
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_concat(const std::vector<RefTensor>& in, const Attrs& attrs) {
  std::vector<TensorType> types;
  for (const RefTensor& t : in) types.push_back({DType::F32, t.shape});
  const int64_t axis = concat_axis(types, attrs);
  RefTensor y = ref_zeros(infer_concat(types, attrs)[0].shape);
  const int64_t outer = product(y.shape, 0, axis),
                inner = product(y.shape, axis + 1, y.shape.size());
  int64_t at = 0;
  for (const RefTensor& t : in) {
    const int64_t len = t.shape[axis];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t e = 0; e < len * inner; ++e)
        y.data[(o * y.shape[axis] + at) * inner + e] = t.data[o * len * inner + e];
    at += len;
  }
  return {y};
}

ExpandFn expand_concat(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    const int64_t axis = concat_axis(in, attrs);
    const Ints& y = out[0].shape;
    const int64_t outer = product(y, 0, axis), inner = product(y, axis + 1, y.size());
    OpExpansion ex;
    std::vector<int64_t> lens;
    std::vector<KernelArg> buffers;
    for (size_t i = 0; i < in.size(); ++i) {
      lens.push_back(in[i].shape[axis]);
      buffers.push_back(input_slot(static_cast<int>(i)));
    }
    buffers.push_back(output_slot(0));
    if (std::optional<KernelCall> call =
            parts_call(*cache, out[0].dtype, /*split=*/false, outer, lens, inner, buffers)) {
      ex.calls.push_back(*call);
      return ex;
    }
    int64_t at = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      ex.calls.push_back(place_call(*cache, in[i].dtype, outer, in[i].shape[axis], inner, y[axis],
                                    at, input_slot(static_cast<int>(i)), output_slot(0)));
      at += in[i].shape[axis];
    }
    return ex;
  };
}

// dx_i = dy[.., offset_i : offset_i + len_i, ..]: a slice (a view when contiguous).
std::vector<GradOp> grad_concat(const std::vector<TensorType>& in, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  const int64_t axis = concat_axis(in, attrs);
  std::vector<GradOp> ops;
  // Every part needed: one split (one kernel for all of them, or views).
  if (in.size() > 1 && std::all_of(needs.begin(), needs.end(), [](bool b) { return b; })) {
    Ints sizes;
    std::vector<std::string> dx;
    for (size_t i = 0; i < in.size(); ++i) {
      sizes.push_back(in[i].shape[axis]);
      dx.push_back(dx_name(static_cast<int>(i)));
    }
    return {{"split", {"dy0"}, dx, {{"axis", axis}, {"sizes", sizes}}}};
  }
  int64_t at = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t len = in[i].shape[axis];
    if (needs[i])
      ops.push_back({"slice",
                     {"dy0"},
                     {dx_name(static_cast<int>(i))},
                     {{"axis", axis}, {"start", at}, {"stop", at + len}, {"step", int64_t{1}}}});
    at += len;
  }
  return ops;
}

}  // namespace

void register_views(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const OpTests reshape_tests{.kernel = {{{{3, 4}}, {{"shape", Ints{2, -1, 2}}}},
                                         {{{7, 130}}, {{"shape", Ints{130, 7}}}},
                                         {{{1}}, {{"shape", Ints{}}}}},
                              .gradient = {{{{3, 4}}, {{"shape", Ints{12}}}}},
                              .examples = {{.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                                            .attrs = {{"shape", Ints{3, -1}}},
                                            .outputs = {{{3, 2}, {1, 2, 3, 4, 5, 6}}}}}};
  for (const char* name : {"reshape", "view"})
    registry.add({.name = name,
                  .doc = "y = x under another shape of as many elements (one size may be -1); "
                         "a view of x, no kernel",
                  .inputs = {"x"},
                  .outputs = {"y"},
                  .attrs = {{.name = "shape",
                             .kind = AttrKind::IntList,
                             .doc = "the new shape; one entry -1 takes what is left"}},
                  .infer = infer_reshape,
                  .reference = same_bytes_reference(infer_reshape),
                  .gradient = grad_same_bytes,
                  .expand = expand_flat_copy(cache),
                  .view = same_bytes_view,
                  .tests = reshape_tests});
  registry.add(
      {.name = "expand_dims",
       .doc = "y = x with a size-1 axis inserted at axis; a view of x, no kernel",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {int_attr("axis", std::nullopt, "where the new axis goes (-1: last)")},
       .infer = infer_expand_dims,
       .reference = same_bytes_reference(infer_expand_dims),
       .gradient = grad_same_bytes,
       .expand = expand_flat_copy(cache),
       .view = same_bytes_view,
       .tests = {.kernel = {{{{3, 5}}, {{"axis", int64_t{1}}}}, {{{130}}, {{"axis", int64_t{-1}}}}},
                 .gradient = {{{{3, 4}}, {{"axis", int64_t{0}}}}},
                 .examples = {{.inputs = {{{2}, {1, 2}}},
                               .attrs = {{"axis", int64_t{-1}}},
                               .outputs = {{{2, 1}, {1, 2}}}}}}});
  registry.add({.name = "squeeze",
                .doc = "y = x without its size-1 axis axis; a view of x, no kernel",
                .inputs = {"x"},
                .outputs = {"y"},
                .attrs = {int_attr("axis", std::nullopt, "the size-1 axis to drop")},
                .infer = infer_squeeze,
                .reference = same_bytes_reference(infer_squeeze),
                .gradient = grad_same_bytes,
                .expand = expand_flat_copy(cache),
                .view = same_bytes_view,
                .tests = {.kernel = {{{{3, 1, 5}}, {{"axis", int64_t{1}}}},
                                     {{{130, 1}}, {{"axis", int64_t{-1}}}}},
                          .gradient = {{{{3, 1}}, {{"axis", int64_t{1}}}}},
                          .examples = {{.inputs = {{{1, 2}, {1, 2}}},
                                        .attrs = {{"axis", int64_t{0}}},
                                        .outputs = {{{2}, {1, 2}}}}}}});
  registry.add(
      {.name = "slice",
       .doc = "y = x[start:stop:step] along axis (negative positions count from the end); a "
              "view of x when contiguous and 16-byte aligned, else a copy",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {int_attr("axis", 0, "the sliced axis"), int_attr("start", 0, "first position"),
                 int_attr("stop", std::nullopt, "one past the last position"),
                 int_attr("step", 1, "distance between positions", /*positive=*/true)},
       .infer = infer_slice,
       .reference = ref_slice,
       .gradient = grad_slice,
       .expand = expand_slice(cache),
       .view = view_slice,
       .tests = {.kernel = {{{{7, 130}},
                             {{"axis", int64_t{1}}, {"start", int64_t{3}}, {"stop", int64_t{-5}}}},
                            {{{9, 5, 3}},
                             {{"axis", int64_t{0}},
                              {"start", int64_t{1}},
                              {"stop", int64_t{9}},
                              {"step", int64_t{3}}}},
                            {{{33, 6}}, {{"start", int64_t{4}}, {"stop", int64_t{20}}}}},
                 .gradient = {{{{5, 4}},
                               {{"axis", int64_t{1}},
                                {"start", int64_t{1}},
                                {"stop", int64_t{4}},
                                {"step", int64_t{2}}}},
                              {{{6, 3}}, {{"start", int64_t{-4}}, {"stop", int64_t{5}}}}},
                 .examples = {
                     {.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                      .attrs = {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"stop", int64_t{3}}},
                      .outputs = {{{2, 2}, {2, 3, 5, 6}}}}}}});
  registry.add({.name = "slice_grad",
                .doc = "dx = zeros of size along axis with dy at start, start + step, ... (the "
                       "backward op of slice)",
                .inputs = {"dy"},
                .outputs = {"dx"},
                .attrs = {int_attr("axis", std::nullopt, "the sliced axis"),
                          int_attr("start", std::nullopt, "first position"),
                          int_attr("step", std::nullopt, "distance between positions", true),
                          int_attr("size", std::nullopt, "the axis' size in dx", true)},
                .infer = infer_slice_grad,
                .reference = ref_slice_grad,
                .expand = expand_slice_grad(cache),
                .tests = {.kernel = {{{{7, 40, 3}},
                                      {{"axis", int64_t{1}},
                                       {"start", int64_t{5}},
                                       {"step", int64_t{3}},
                                       {"size", int64_t{130}}}},
                                     {{{2}},
                                      {{"axis", int64_t{0}},
                                       {"start", int64_t{0}},
                                       {"step", int64_t{1}},
                                       {"size", int64_t{3}}}}},
                          .examples = {{.inputs = {{{2}, {7, 8}}},
                                        .attrs = {{"axis", int64_t{0}},
                                                  {"start", int64_t{1}},
                                                  {"step", int64_t{2}},
                                                  {"size", int64_t{5}}},
                                        .outputs = {{{5}, {0, 7, 0, 8, 0}}}}}}});
  registry.add(
      {.name = "split",
       .doc = "y0, y1, ... = x cut along axis into parts equal parts or parts of sizes; "
              "views of x when contiguous and 16-byte aligned, else copies",
       .inputs = {"x"},
       .outputs = numbered("y", kMaxParts),
       .optional_outputs = kMaxParts - 1,
       .attrs = {int_attr("axis", 0, "the cut axis"),
                 {.name = "sizes",
                  .kind = AttrKind::IntList,
                  .default_value = AttrValue{Ints{}},
                  .doc = "the parts' sizes (or give parts)"},
                 int_attr("parts", 0, "the number of equal parts (or give sizes)")},
       .infer = infer_split,
       .reference = ref_split,
       .gradient = grad_split,
       .expand = expand_split(cache),
       .view = view_split,
       // The last two in whole 8-element vectors (one kernel for every part): rows of 2, 1 and
       // 5 vectors, several a block, the last block partial; long rows in chunks of 256 vectors.
       .tests = {.kernel = {{{{12, 130}}, {{"parts", int64_t{3}}}},
                            {{{7, 13}}, {{"axis", int64_t{-1}}, {"sizes", Ints{5, 1, 7}}}},
                            {{{133, 64}}, {{"axis", int64_t{1}}, {"sizes", Ints{16, 8, 40}}}},
                            {{{3, 6152}}, {{"axis", int64_t{1}}, {"sizes", Ints{4104, 2048}}}}},
                 .gradient = {{{{4, 5}}, {{"axis", int64_t{1}}, {"sizes", Ints{2, 3}}}}},
                 .examples = {{.inputs = {{{4}, {1, 2, 3, 4}}},
                               .attrs = {{"sizes", Ints{1, 3}}},
                               .outputs = {{{1}, {1}}, {{3}, {2, 3, 4}}}}}}});
  registry.add(
      {.name = "concat",
       .doc =
           "y = x0, x1, ... joined along axis (every other size equal); one copy kernel "
           "for all inputs where each input's rows are whole 16-byte vectors, else one per input",
       .inputs = numbered("x", kMaxParts),
       .optional_inputs = kMaxParts - 1,
       .outputs = {"y"},
       .attrs = {int_attr("axis", 0, "the joined axis")},
       // i32 too: index lists are joined (a sliding window's positions and top-k's picks).
       .dtypes = {DType::F32, DType::BF16, DType::F16, DType::I32},
       .infer = infer_concat,
       .reference = ref_concat,
       .gradient = grad_concat,
       .expand = expand_concat(cache),
       .tests = {
           // The rest in whole 8-element vectors (one kernel for every part): rows of 56 and 8
           // vectors, several a block and a partial last block; one long row (axis 0) in chunks
           // of 256 vectors, the last partial; a 3-d concat at an offset; three parts of 3, 1
           // and 5 vectors over 130 rows; long rows of 513 and 256 vectors.
           .kernel = {{{{7, 3}, {7, 130}, {7, 1}}, {{"axis", int64_t{1}}}},
                      {{{2, 5}, {9, 5}}},
                      {{{67, 448}, {67, 64}}, {{"axis", int64_t{1}}}},
                      {{{300, 16}, {40, 16}}},
                      {{{3, 2, 8}, {3, 5, 8}}, {{"axis", int64_t{1}}}},
                      {{{130, 24}, {130, 8}, {130, 40}}, {{"axis", int64_t{1}}}},
                      {{{2, 4104}, {2, 2048}}, {{"axis", int64_t{1}}}}},
           .gradient = {{{{2, 3}, {2, 1}}, {{"axis", int64_t{-1}}}}, {{{1, 2}, {3, 2}, {1, 2}}}},
           .examples = {{.inputs = {{{1, 2}, {1, 2}}, {{1, 1}, {3}}},
                         .attrs = {{"axis", int64_t{1}}},
                         .outputs = {{{1, 3}, {1, 2, 3}}}}}}});
}

}  // namespace tilerun::kernels
