// pow(x; exponent) with a constant exponent, and its backward op pow_grad; one flat map kernel
// each, the exponent an f32 scalar. x^p is exp(p·log|x|) from the strict routines, with C's
// pow rules for signs, zeros and infinities (a negative x needs an integer p, else NaN; an odd
// integer p keeps x's sign) and exact products for p = 1, 2, 3 and -1.
#include <cmath>

#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<TensorType> infer_pow(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {in[0]};
}

std::vector<TensorType> infer_pow_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

std::vector<RefTensor> ref_pow(const std::vector<RefTensor>& in, const Attrs& attrs) {
  double p = attr_float(attrs, "exponent");
  RefTensor y = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < y.numel(); ++i) y.data[i] = std::pow(in[0].data[i], p);
  return {y};
}

// dy·p·x^(p-1); 0 for p = 0 (x^0 is constant, also at x = 0).
std::vector<RefTensor> ref_pow_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  double p = attr_float(attrs, "exponent");
  RefTensor dx = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < dx.numel(); ++i)
    dx.data[i] = p == 0 ? 0.0 : in[1].data[i] * (p * std::pow(in[0].data[i], p - 1));
  return {dx};
}

std::vector<GradOp> grad_pow(const std::vector<TensorType>&, const Attrs& attrs,
                             const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"pow_grad", {"x0", "dy0"}, {"dx0"}, {{"exponent", attr_float(attrs, "exponent")}}}};
}

// x^p for an f32 scalar p, following C's pow.
cc::Val strict_pow(cc::Scope& s, const cc::Val& x, const cc::Val& p) {
  cc::Val r = s.let(cc::exp(p * cc::log(cc::abs(x))), "r");
  // p is an integer when it survives the round trip through i32 (|p| ≥ 2^31 is an even integer);
  // odd only below 2^24, where f32 still has a units bit.
  cc::Val pi = s.let(cc::to_i32(p), "pi");
  cc::Val is_int = s.let(cc::to_f32(pi) == p || cc::abs(p) >= 2147483648.0f, "int");
  cc::Val odd = is_int && cc::abs(p) < 16777216.0f &&
                (pi & cc::literal(cc::Type::I32, 1)) == cc::literal(cc::Type::I32, 1);
  cc::Val negative = cc::bitcast(cc::Type::I32, x) < cc::literal(cc::Type::I32, 0);  // -0 too
  cc::Val y = cc::select(negative && odd, -r, r);
  // A negative finite x with a fractional p has no real power.
  y = cc::select(x < 0.0f && x != -INFINITY && !is_int, cc::Val(NAN), y);
  y = cc::select(p == 2.0f, x * x, cc::select(p == 3.0f, x * x * x, y));
  y = cc::select(p == 1.0f, x, cc::select(p == -1.0f, 1.0f / x, y));
  return cc::select(p == 0.0f, cc::Val(1.0f), y);
}

const MapOp kPow{"pow", 1, {"exponent"}, [](cc::Scope& s, const auto& v, const auto& sc) {
                   return strict_pow(s, v[0], sc[0]);
                 }};
const MapOp kPowGrad{"pow_grad", 2, {"exponent"}, [](cc::Scope& s, const auto& v, const auto& sc) {
                       cc::Val d = v[1] * (sc[0] * strict_pow(s, v[0], sc[0] - 1.0f));
                       return cc::select(sc[0] == 0.0f, cc::Val(0.0f), d);
                     }};

AttrSpec exponent_attr() {
  return {.name = "exponent", .kind = AttrKind::Float, .doc = "the constant power p"};
}

Attrs p(double v) { return {{"exponent", v}}; }

}  // namespace

void register_pow(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const double nan = kNaN(), inf = kInf();
  registry.add(
      {.name = "pow",
       .doc = "y = x^exponent (a constant; C's pow rules: a negative x needs an integer "
              "exponent, else NaN; exp(p·log) strict, products for p = 1, 2, 3, -1); gradient "
              "dy·p·x^(p-1)",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {exponent_attr()},
       .infer = infer_pow,
       .reference = ref_pow,
       .gradient = grad_pow,
       .expand = expand_map(cache, kPow),
       .tests = {.kernel = {{.shapes = {{33, 130}}, .attrs = p(2.5), .lo = 0.1, .hi = 4},
                            {.shapes = {{1025}}, .attrs = p(3), .lo = -3, .hi = 3},
                            {.shapes = {{7, 1}}, .attrs = p(-0.5), .lo = 0.1, .hi = 4},
                            {.shapes = {{1}}, .attrs = p(2), .lo = -3, .hi = 3}},
                 .gradient = {{.shapes = {{7, 5}}, .attrs = p(2.5), .lo = 0.2, .hi = 3},
                              {.shapes = {{7, 5}}, .attrs = p(3), .lo = -2, .hi = 2},
                              {.shapes = {{3}}, .attrs = p(0), .lo = -2, .hi = 2}},
                 .examples = {{.inputs = {{{7}, {4, -2, -0.0, 0.0, -inf, nan, -8}}},
                               .attrs = p(0.5),
                               .outputs = {{{7}, {2, nan, 0.0, 0.0, inf, nan, nan}}}},
                              {.inputs = {{{6}, {-2, -0.0, 0.0, -inf, nan, 2}}},
                               .attrs = p(3),
                               .outputs = {{{6}, {-8, -0.0, 0.0, -inf, nan, 8}}}},
                              {.inputs = {{{4}, {-0.0, 0.0, -inf, nan}}},
                               .attrs = p(-3),
                               .outputs = {{{4}, {-inf, inf, -0.0, nan}}}},
                              {.inputs = {{{3}, {nan, 0.0, -inf}}},
                               .attrs = p(0),
                               .outputs = {{{3}, {1, 1, 1}}}}}}});
  registry.add(
      {.name = "pow_grad",
       .doc = "dx = dy·p·x^(p-1), 0 for p = 0 (the backward op of pow)",
       .inputs = {"x", "dy"},
       .outputs = {"dx"},
       .attrs = {exponent_attr()},
       .infer = infer_pow_grad,
       .reference = ref_pow_grad,
       .expand = expand_map(cache, kPowGrad),
       .tests = {.kernel = {{.shapes = {{33, 130}, {33, 130}}, .attrs = p(2.5), .lo = 0.1, .hi = 4},
                            {.shapes = {{7}, {7}}, .attrs = p(3), .lo = -3, .hi = 3}},
                 .examples = {{.inputs = {{{2}, {3, 0.0}}, {{2}, {2, 2}}},
                               .attrs = p(2),
                               .outputs = {{{2}, {12, 0}}}}}}});
}

}  // namespace tilerun::kernels
