// cumsum: running sums along one axis (inclusive; `reverse` sums from the end), for floats and
// i32. Its gradient is the reverse cumsum of dy. Kernel: x seen as [P, K, R]; one thread per
// (p, r) line adds its K elements in order (last to first when reversed) into an accumulator
// (f32 for floats, each output rounded on store; i32 for i32), so every output's sum has one
// fixed order whatever the grid, and nothing is atomic.
#include <algorithm>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/shape_attrs.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;

const std::vector<DType> kCumsumTypes = {DType::F32, DType::BF16, DType::F16, DType::I32};

struct Lines {
  int64_t outer = 1, extent = 1, inner = 1;
};

Lines lines_of(const TensorType& x, const Attrs& attrs) {
  if (x.shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  const int64_t axis = normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", x, "x");
  return {product(x.shape, 0, axis), x.shape[axis], product(x.shape, axis + 1, x.shape.size())};
}

std::vector<TensorType> infer_cumsum(const std::vector<TensorType>& in, const Attrs& attrs) {
  if (std::find(kCumsumTypes.begin(), kCumsumTypes.end(), in[0].dtype) == kCumsumTypes.end())
    throw ShapeError("input 'x' is " + to_string(in[0]) + ", expected f32, bf16, f16 or i32");
  lines_of(in[0], attrs);
  return {in[0]};
}

std::vector<RefTensor> ref_cumsum(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor& x = in[0];
  const Lines l = lines_of(TensorType{DType::F32, x.shape}, attrs);
  const bool reverse = attr_bool(attrs, "reverse");
  RefTensor y = ref_zeros(x.shape);
  for (int64_t p = 0; p < l.outer; ++p)
    for (int64_t r = 0; r < l.inner; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < l.extent; ++j) {
        const int64_t k = reverse ? l.extent - 1 - j : j;
        const int64_t at = (p * l.extent + k) * l.inner + r;
        sum += x.data[at];
        y.data[at] = sum;
      }
    }
  return {y};
}

// dx = cumsum of dy in the other direction.
std::vector<GradOp> grad_cumsum(const std::vector<TensorType>&, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"cumsum",
           {"dy0"},
           {"dx0"},
           {{"axis", attr_int(attrs, "axis")}, {"reverse", !attr_bool(attrs, "reverse")}}}};
}

cc::Kernel build_cumsum(DType dtype, bool reverse) {
  const bool is_int = dtype == DType::I32;
  cc::KernelBuilder kb(std::string(reverse ? "cumsum_rev_" : "cumsum_") +
                       std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N"), p = kb.dim("P"), k = kb.dim("K"), r = kb.dim("R");
  cc::Buf x = kb.input("x", dtype, {p, k, r});
  cc::Buf y = kb.output("y", dtype, {p, k, r});
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", is_int ? DType::I32 : DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx e = base + t;
      s.if_then(e < n, [&] {
        cc::Val line = s.let(e / r, "line"), col = s.let(e % r, "col");
        acc(t) = is_int ? cc::to_i32(cc::Val(0)) : cc::Val(0.0f);
        s.serial(k, [&](cc::Idx j) {
          cc::Idx at = s.let(reverse ? k - 1 - j : j, "at");
          acc(t) = acc(t) + x(line, at, col);
          y(line, at, col) = acc(t);
        });
      });
    });
  });
  return kb.build();
}

ExpandFn expand_cumsum(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const bool reverse = attr_bool(attrs, "reverse");
    const Lines l = lines_of(in[0], attrs);
    KernelCall call{.kernel = cache->get(kernel_key(reverse ? "cumsum_rev" : "cumsum", dt),
                                         [&] { return build_cumsum(dt, reverse); }),
                    .buffers = {input_slot(0), output_slot(0)},
                    .dims = {l.outer * l.inner, l.outer, l.extent, l.inner}};
    return OpExpansion{.calls = {call}};
  };
}

}  // namespace

void register_cumsum(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const AttrValue rev = AttrValue{true};
  registry.add(
      {.name = "cumsum",
       .doc = "y[.., k, ..] = x[.., 0, ..] + ... + x[.., k, ..] along axis (reverse: x[.., k, ..] "
              "+ ... + x[.., K-1, ..]), added in that order (f32 accumulation for floats, each "
              "output rounded once); gradient: the cumsum of dy in the other direction",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {int_attr("axis", -1, "the axis summed along; negative counts from the end"),
                 {.name = "reverse",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "sum from the end of the axis"}},
       .dtypes = kCumsumTypes,
       .infer = infer_cumsum,
       .reference = ref_cumsum,
       .gradient = grad_cumsum,
       .expand = expand_cumsum(cache),
       .tests = {.kernel = {{{{1}}},
                            {{{7, 33}}},
                            {{{2, 1000}}, {}, 0, 2},
                            {{{5, 130, 3}}, {{"axis", int64_t{1}}}},
                            {{{33, 7}}, {{"axis", int64_t{0}}, {"reverse", rev}}},
                            {{{4, 3, 5}}, {{"axis", int64_t{-1}}, {"reverse", rev}}}},
                 .gradient = {{{{3, 4}}}, {{{2, 3, 2}}, {{"axis", int64_t{1}}, {"reverse", rev}}}},
                 .examples = {{.inputs = {{{3}, {1, 2, 3}}}, .outputs = {{{3}, {1, 3, 6}}}},
                              {.inputs = {{{2, 2}, {1, 2, 3, 4}}},
                               .attrs = {{"axis", int64_t{0}}, {"reverse", rev}},
                               .outputs = {{{2, 2}, {4, 6, 3, 4}}}}}}});
}

}  // namespace tilerun::kernels
