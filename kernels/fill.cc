// Ops without inputs, their shape and dtype from attributes: fill (a constant) and iota
// (start + step · the index along one axis; arange is iota over one axis). fill is the flat map
// kernel with no operands; iota one flat kernel computing each element from its index. Neither
// has a gradient (nothing flows into them).
#include "kernels/expand_util.h"
#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<int64_t> shape_attr(const Attrs& attrs) {
  std::vector<int64_t> shape = std::get<std::vector<int64_t>>(attrs.at("shape"));
  for (int64_t d : shape)
    if (d < 1)
      throw ShapeError("attribute 'shape' has extent " + std::to_string(d) + ", expected >= 1");
  return shape;
}

std::vector<TensorType> infer_fill(const std::vector<TensorType>&, const Attrs& attrs) {
  return {{float_dtype_attr(attrs, "dtype"), shape_attr(attrs)}};
}

// The axis attribute as an index into shape (negative counts from the end).
size_t axis_of(const Attrs& attrs, size_t rank) {
  int64_t a = attr_int(attrs, "axis"), r = static_cast<int64_t>(rank);
  if (a < -r || a >= r || rank == 0)
    throw ShapeError("attribute 'axis' is " + std::to_string(a) + ", expected an axis of shape (" +
                     std::to_string(-r) + " to " + std::to_string(r - 1) + ")");
  return static_cast<size_t>(a < 0 ? a + r : a);
}

std::vector<TensorType> infer_iota(const std::vector<TensorType>& in, const Attrs& attrs) {
  std::vector<TensorType> out = infer_fill(in, attrs);
  axis_of(attrs, out[0].shape.size());
  return out;
}

std::vector<RefTensor> ref_fill(const std::vector<RefTensor>&, const Attrs& attrs) {
  RefTensor y = ref_zeros(shape_attr(attrs));
  for (double& v : y.data) v = attr_float(attrs, "value");
  return {y};
}

// (extent of the axis, product of the extents after it).
std::pair<int64_t, int64_t> axis_extent_inner(const std::vector<int64_t>& shape, size_t axis) {
  int64_t inner = 1;
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  return {shape[axis], inner};
}

std::vector<RefTensor> ref_iota(const std::vector<RefTensor>&, const Attrs& attrs) {
  RefTensor y = ref_zeros(shape_attr(attrs));
  auto [extent, inner] = axis_extent_inner(y.shape, axis_of(attrs, y.shape.size()));
  double start = attr_float(attrs, "start"), step = attr_float(attrs, "step");
  for (int64_t e = 0; e < y.numel(); ++e)
    y.data[e] = start + step * static_cast<double>(e / inner % extent);
  return {y};
}

const MapOp kFill{
    "fill", 0, {"value"}, [](cc::Scope&, const auto&, const auto& sc) { return sc[0]; }};

constexpr int kThreads = 256;

// y[e] = start + step · ((e / I) % A) in one rounding (fma); the index is below 2^24 (checked at
// expansion), so its f32 conversion is exact. Parameters: y; N, A, I; start, step.
cc::Kernel build_iota(DType dtype) {
  cc::KernelBuilder kb("iota_" + std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N"), a = kb.dim("A"), inner = kb.dim("I");
  cc::Buf y = kb.output("y", dtype, {n});
  cc::Val start = kb.scalar_f32("start"), step = kb.scalar_f32("step");
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx e = s.block_idx(0) * kThreads + i;
      s.if_then(e < n, [&] { y(e) = cc::fma(step, cc::to_f32(e / inner % a), start); });
    });
  });
  return kb.build();
}

ExpandFn expand_iota(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>&, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dtype = out[0].dtype;
    auto [extent, inner] = axis_extent_inner(out[0].shape, axis_of(attrs, out[0].shape.size()));
    if (extent > (int64_t{1} << 24))
      throw ShapeError("iota along an axis of " + std::to_string(extent) +
                       " elements; expected at most 2^24 (f32 counts exactly up to there)");
    KernelCall call{
        .kernel = cache->get(kernel_key("iota", dtype), [&] { return build_iota(dtype); }),
        .buffers = {output_slot(0)},
        .dims = {numel(out[0]), extent, inner},
        .scalars = {attr_float(attrs, "start"), attr_float(attrs, "step")}};
    return OpExpansion{.calls = {call}};
  };
}

AttrSpec shape_spec() {
  return {
      .name = "shape", .kind = AttrKind::IntList, .doc = "the output shape (dim names allowed)"};
}
AttrSpec dtype_spec() {
  return {.name = "dtype",
          .kind = AttrKind::String,
          .default_value = std::string("f32"),
          .doc = "the output dtype: f32, bf16 or f16"};
}

Attrs attrs_of(std::vector<int64_t> shape, Attrs more = {}) {
  more["shape"] = std::move(shape);
  return more;
}

}  // namespace

void register_fill(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "fill",
                .doc = "y = value everywhere (no inputs; shape and dtype from attributes)",
                .inputs = {},
                .outputs = {"y"},
                .attrs = {shape_spec(),
                          {.name = "value",
                           .kind = AttrKind::Float,
                           .default_value = 0.0,
                           .doc = "the constant (rounded to the dtype)"},
                          dtype_spec()},
                .dtype_attr = "dtype",
                .infer = infer_fill,
                .reference = ref_fill,
                .expand = expand_map(cache, kFill),
                .tests = {.kernel = {{.attrs = attrs_of({33, 130}, {{"value", -1.5}})},
                                     {.attrs = attrs_of({1})},
                                     {.attrs = attrs_of({(1 << 16) + 3}, {{"value", 0.1}})}},
                          .examples = {{.attrs = attrs_of({2, 1}, {{"value", -0.0}}),
                                        .outputs = {{{2, 1}, {-0.0, -0.0}}}}}}});
  registry.add(
      {.name = "iota",
       .doc = "y = start + step · (the index along axis), e.g. arange: shape [n] (no inputs; "
              "shape and dtype from attributes; one rounding, indices up to 2^24)",
       .inputs = {},
       .outputs = {"y"},
       .attrs =
           {shape_spec(),
            {.name = "axis",
             .kind = AttrKind::Int,
             .default_value = int64_t{0},
             .doc = "the axis whose index counts (negative: from the end)"},
            {.name = "start",
             .kind = AttrKind::Float,
             .default_value = 0.0,
             .doc = "the first value"},
            {.name = "step", .kind = AttrKind::Float, .default_value = 1.0, .doc = "the increment"},
            dtype_spec()},
       .dtype_attr = "dtype",
       .infer = infer_iota,
       .reference = ref_iota,
       .expand = expand_iota(cache),
       .tests = {
           .kernel = {{.attrs = attrs_of({1025})},
                      {.attrs = attrs_of({33, 130},
                                         {{"axis", int64_t{-1}}, {"start", 0.5}, {"step", -0.25}})},
                      {.attrs = attrs_of({7, 1, 5}, {{"axis", int64_t{0}}, {"step", 3.0}})},
                      {.attrs = attrs_of({3, 5}, {{"axis", int64_t{1}}})}},
           .examples = {
               {.attrs = attrs_of({2, 3}, {{"axis", int64_t{1}}, {"start", 1.0}, {"step", 2.0}}),
                .outputs = {{{2, 3}, {1, 3, 5, 1, 3, 5}}}},
               {.attrs = attrs_of({2, 3}, {{"axis", int64_t{-2}}, {"start", -0.0}, {"step", -1.0}}),
                .outputs = {{{2, 3}, {-0.0, -0.0, -0.0, -1, -1, -1}}}}}}});
}

}  // namespace tilerun::kernels
