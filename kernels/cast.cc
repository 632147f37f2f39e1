// cast(x; to): a tensor converted to another dtype, one flat kernel per (from, to) pair. Between
// floats the load widens to f32 exactly and the store rounds to nearest even, overflows to inf
// and keeps NaN (canonical), as every bf16/f16 store does (compiler/transforms/strict_math.h).
// To i32 (index arithmetic built in floats, e.g. a sliding window's positions): truncation
// toward zero as C and torch's .to(int32) do, saturating at the i32 range, NaN to 0 (the IR's
// conversion, builder.h); from i32 to a float: exact up to 2^24 in f32, then rounded. To bool:
// nonzero (NaN included) is true, as C and torch convert; from bool: 0 or 1.
#include <algorithm>
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// f32, bf16, f16, i32 or bool, named by attribute `attr`.
DType cast_dtype_attr(const Attrs& attrs, const std::string& attr) {
  const std::string& name = attr_string(attrs, attr);
  if (name == "i32") return DType::I32;
  if (name == "bool") return DType::Bool;
  return float_dtype_attr(attrs, attr);
}

// Neither integers nor bools carry a gradient.
bool exact_side(DType t) { return t == DType::I32 || t == DType::Bool; }

std::vector<TensorType> infer_cast(const std::vector<TensorType>& in, const Attrs& attrs) {
  DType to = cast_dtype_attr(attrs, "to");
  if (!exact_side(in[0].dtype)) expect_float(in[0], "x");
  return {{to, in[0].shape}};
}

// x rounded to nearest even with `digits` significand bits and exponents down to `emin`
// (subnormals below), overflowing to ±inf above `max`.
double round_binary(double x, int digits, int emin, double max) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = std::max(std::ilogb(x), emin);
  double quantum = std::ldexp(1.0, e - (digits - 1));
  double r = std::nearbyint(x / quantum) * quantum;  // the default rounding mode: to nearest even
  return std::abs(r) > max ? std::copysign(kInf(), x) : r;
}

// The value a cast to `to` stores. References compute in double, so a cast to f32 is exact
// there as every other op's f32 result is; casts to bf16 and f16 round, which is their point.
double round_to(DType to, double x) {
  switch (to) {
    case DType::BF16:
      return round_binary(x, 8, -126, 3.3895313892515355e38);
    case DType::F16:
      return round_binary(x, 11, -14, 65504.0);
    case DType::I32:
      if (std::isnan(x)) return 0;
      return std::clamp(std::trunc(x), -2147483648.0, 2147483647.0) + 0.0;  // no -0 in i32
    case DType::Bool:
      return x != 0 ? 1 : 0;  // NaN != 0: true
    default:
      return x;
  }
}

std::vector<RefTensor> ref_cast(const std::vector<RefTensor>& in, const Attrs& attrs) {
  DType to = cast_dtype_attr(attrs, "to");
  RefTensor y = in[0];
  for (double& v : y.data) v = round_to(to, v);
  return {y};
}

// The gradient casts back to the input's dtype.
// No gradient through an i32 or bool side: neither is differentiable.
std::vector<GradOp> grad_cast(const std::vector<TensorType>& in, const Attrs& attrs,
                              const std::vector<bool>& needs) {
  if (!needs[0] || exact_side(in[0].dtype) || exact_side(cast_dtype_attr(attrs, "to"))) return {};
  return {{"cast", {"dy0"}, {"dx0"}, {{"to", std::string(dtype_name(in[0].dtype))}}}};
}

constexpr int kThreads = 256;

// y[e] = x[e], x of dtype `from`, y of `to`, `ept` elements per thread.
cc::Kernel build_cast(DType from, DType to, int64_t ept, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim n = kb.dim("N");
  cc::Buf x = kb.input("x", from, {n});
  cc::Buf y = kb.output("y", to, {n});
  const int64_t per_block = kThreads * ept;
  kb.body({cc::ceildiv(n, per_block)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * per_block;
    s.parallel(per_block, [&](cc::Idx i) {
      cc::Idx e = base + i;
      s.if_then(e < n, [&] {
        // The IR converts between int and float only when asked (builder.h cast).
        if (to == DType::Bool)  // a bool stores any nonzero i32 as true
          y(e) = exact_side(from)
                     ? x(e)
                     : cc::select(x(e) != 0.0f, cc::to_i32(cc::Val(1)), cc::to_i32(cc::Val(0)));
        else if (to == DType::I32)
          y(e) = exact_side(from) ? x(e) : cc::to_i32(x(e));
        else if (exact_side(from))
          y(e) = cc::to_f32(x(e));
        else
          y(e) = x(e);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_cast(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
        DType from = in[0].dtype, to = out[0].dtype;
        int64_t n = numel(out[0]), ept = n < (int64_t{1} << 16) ? 1 : 4;
        std::string name = "cast" + std::string(ept == 1 ? "" : "_x4") + "_" +
                           std::string(dtype_name(from)) + "_" + std::string(dtype_name(to));
        KernelCall call{.kernel = cache->get(name, [&] { return build_cast(from, to, ept, name); }),
                        .buffers = {input_slot(0), output_slot(0)},
                        .dims = {n}};
        return OpExpansion{.calls = {call}};
      };
}

Attrs to(const char* dtype) { return {{"to", std::string(dtype)}}; }

}  // namespace

void register_cast(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const double nan = kNaN(), inf = kInf();
  registry.add(
      {.name = "cast",
       .doc = "y = x converted to the dtype named by to: between floats rounded to nearest even, "
              "overflow to inf, NaN kept; to i32 truncated toward zero, saturating, NaN to 0; "
              "from i32 exact up to 2^24; to bool: nonzero (NaN included) is true, from bool 0 or "
              "1; gradient dy cast back to x's dtype (none through i32 or bool)",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {{.name = "to",
                  .kind = AttrKind::String,
                  .doc = "the output dtype: f32, bf16, f16, i32 or bool"}},
       .dtypes = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::Bool},
       .dtype_attr = "to",
       .infer = infer_cast,
       .reference = ref_cast,
       .gradient = grad_cast,
       .expand = expand_cast(cache),
       .tests = {
           .kernel = {{.shapes = {{33, 130}}, .attrs = to("f32")},
                      {.shapes = {{33, 130}}, .attrs = to("bf16")},
                      {.shapes = {{(1 << 16) + 3}}, .attrs = to("f16")},
                      // Large values, still within f16's range (an f16 input would be inf).
                      {.shapes = {{1}}, .attrs = to("bf16"), .lo = -6e4, .hi = 6e4},
                      // Floats to indices and back (i32 inputs draw integers in [-50, 50)).
                      {.shapes = {{9, 70}},
                       .attrs = to("i32"),
                       .lo = -300,
                       .hi = 300,
                       .int_lo = -50,
                       .int_hi = 50},
                      {.shapes = {{9, 70}}, .attrs = to("f32"), .int_lo = -50, .int_hi = 50},
                      // To masks: a quarter of the values are zeros.
                      {.shapes = {{5, 300}}, .attrs = to("bool"), .step = 1}},
           .gradient = {{.shapes = {{7, 5}}, .attrs = to("f32")}},
           // 1 + 2^-8 is a tie in bf16 (to 1, even); 1 + 3·2^-9 rounds up; 65520 is f16's
           // overflow tie (to inf); 2^-25 a tie below f16's smallest subnormal (to 0).
           .examples = {{.inputs = {{{6}, {1.00390625, 1.005859375, -0.0, inf, nan, 3e38}}},
                         .attrs = to("bf16"),
                         .outputs = {{{6}, {1, 1.0078125, -0.0, inf, nan, 3.00405527047391e+38}}}},
                        {.inputs = {{{5}, {65504, 65520, -70000, 2.98023223876953125e-8, 0.1}}},
                         .attrs = to("f16"),
                         .outputs = {{{5}, {65504, inf, -inf, 0, 0.0999755859375}}}},
                        // Toward zero, saturating, NaN to 0.
                        {.inputs = {{{7}, {2.75, -2.75, -0.5, 3e9, -3e9, nan, 127}}},
                         .attrs = to("i32"),
                         .outputs = {{{7}, {2, -2, 0, 2147483647, -2147483648, 0, 127}}}},
                        // Nonzero, NaN included, is true.
                        {.inputs = {{{6}, {0, -0.0, 0.5, nan, -3, inf}}},
                         .attrs = to("bool"),
                         .outputs = {{{6}, {0, 0, 1, 1, 1, 1}}}}}}});
}

}  // namespace tilerun::kernels
