// Unary math: neg, abs, exp, log, sqrt, rsqrt, sigmoid, tanh, softplus, sin, cos, and the
// backward ops that need a kernel of their own (abs_grad, sqrt_grad, rsqrt_grad, sigmoid_grad,
// tanh_grad, softplus_grad, sin_grad, cos_grad). One flat map kernel each
// (kernels/map_kernel.h), strict: exp, log, rsqrt, sigmoid, tanh, sin and cos are the compiler's
// own routines (compiler/transforms/strict_math.h), so the CPU and the GPU give the same bits.
// Backward ops read the forward output where that is cheaper (sigmoid' = y(1 - y)).
#include <cmath>

#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/unary_math.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<TensorType> infer_unary(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {in[0]};
}

// (x or y, dy) -> dx, all of one type.
std::vector<TensorType> infer_backward(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

using Fn1 = double (*)(double);
using Fn2 = double (*)(double, double);

// One unary op and, where its gradient needs a kernel, its backward op.
struct Unary {
  const char* name;
  const char* doc;
  Fn1 ref;
  MapFn kernel;
  OpTests tests;
  // The gradient rule's single op: {type, inputs}; type "" for none.
  const char* grad_type = "";
  std::vector<std::string> grad_inputs = {};
};

struct Backward {
  const char* name;
  const char* doc;
  Fn2 ref;  // (x or y, dy) -> dx
  MapFn kernel;
  OpExample example;
  double lo = -2, hi = 2;
  std::string first_slot = "y";  // the forward output, or its input "x"
};

RefTensor t1(std::vector<double> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return {{n}, std::move(v)};
}

OpTests unary_tests(double lo, double hi, std::vector<double> in, std::vector<double> out,
                    double grad_lo, double grad_hi, double min_abs = 0) {
  return {.kernel = {{.shapes = {{33, 130}}, .lo = lo, .hi = hi},
                     {.shapes = {{(1 << 16) + 3}}, .lo = lo, .hi = hi},
                     {.shapes = {{1}}, .lo = lo, .hi = hi}},
          .gradient = {{.shapes = {{7, 5}}, .lo = grad_lo, .hi = grad_hi, .min_abs = min_abs}},
          .examples = {{.inputs = {t1(std::move(in))}, .outputs = {t1(std::move(out))}}}};
}

// sin and cos: small arguments, then large ones (reduced by many multiples of π/2; f16 holds up
// to 65504). The whole f32 range is tested by ulp in tests/kernels/sincos_op_test.cc.
OpTests trig_tests(std::vector<double> in, std::vector<double> out) {
  OpTests t = unary_tests(-10, 10, std::move(in), std::move(out), -4, 4);
  t.kernel.push_back({.shapes = {{(1 << 12) + 1}}, .lo = -6e4, .hi = 6e4});
  return t;
}

std::vector<Unary> unary_ops() {
  const double nan = kNaN(), inf = kInf();
  return {
      {"neg",
       "y = -x (the sign flipped: neg(+0) = -0); gradient -dy",
       [](double x) { return -x; },
       [](cc::Scope&, const auto& v, const auto&) { return -v[0]; },
       unary_tests(-2, 2, {0.0, -0.0, inf, nan, 1.5}, {-0.0, 0.0, -inf, nan, -1.5}, -2, 2),
       "neg",
       {"dy0"}},
      {"abs",
       "y = abs(x) (the sign bit cleared: abs(-0) = +0); gradient sign(x) · dy, 0 at 0",
       [](double x) { return std::fabs(x); },
       [](cc::Scope&, const auto& v, const auto&) { return abs_bits(v[0]); },
       unary_tests(-2, 2, {-0.0, -inf, -2, nan, 3}, {0.0, inf, 2, nan, 3}, -2, 2, 1e-3),
       "abs_grad",
       {"x0", "dy0"}},
      {"exp",
       "y = e^x (strict, <= 2 ulp); gradient dy · y",
       [](double x) { return std::exp(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::exp(v[0]); },
       unary_tests(-10, 10, {0, -inf, inf, nan, 1}, {1, 0, inf, nan, std::exp(1.0)}, -2, 2),
       "mul",
       {"dy0", "y0"}},
      {"log",
       "y = ln x (strict, <= 2 ulp; log(±0) = -inf, log(x < 0) = NaN); gradient dy / x",
       [](double x) { return std::log(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::log(v[0]); },
       unary_tests(0.01, 10, {1, 0.0, -0.0, -1, inf, nan}, {0, -inf, -inf, nan, inf, nan}, 0.5, 2),
       "div",
       {"dy0", "x0"}},
      {"sqrt",
       "y = √x (IEEE, correctly rounded; sqrt(-0) = -0, sqrt(x < 0) = NaN); gradient sqrt_grad",
       [](double x) { return std::sqrt(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::sqrt(v[0]); },
       unary_tests(0, 10, {4, 0.0, -0.0, -1, inf, nan}, {2, 0.0, -0.0, nan, inf, nan}, 0.5, 2),
       "sqrt_grad",
       {"y0", "dy0"}},
      {"rsqrt",
       "y = 1/√x (strict; rsqrt(±0) = ±inf, rsqrt(x < 0) = NaN); gradient rsqrt_grad",
       [](double x) { return 1.0 / std::sqrt(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::rsqrt(v[0]); },
       unary_tests(0.05, 10, {4, 0.0, -0.0, -1, inf, nan}, {0.5, inf, -inf, nan, 0, nan}, 0.5, 2),
       "rsqrt_grad",
       {"y0", "dy0"}},
      {"sigmoid",
       "y = 1 / (1 + e^-x) (strict, <= 2 ulp); gradient sigmoid_grad",
       ref_sigmoid,
       [](cc::Scope&, const auto& v, const auto&) { return cc::sigmoid(v[0]); },
       unary_tests(-12, 12, {0, inf, -inf, nan, -800}, {0.5, 1, 0, nan, 0}, -4, 4),
       "sigmoid_grad",
       {"y0", "dy0"}},
      {"tanh",
       "y = tanh x (strict, <= 2 ulp; tanh(-0) = -0); gradient tanh_grad",
       [](double x) { return std::tanh(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::tanh(v[0]); },
       unary_tests(-6, 6, {0.0, -0.0, inf, -inf, nan}, {0.0, -0.0, 1, -1, nan}, -3, 3),
       "tanh_grad",
       {"y0", "dy0"}},
      {"softplus",
       "y = ln(1 + e^x), computed as max(x, 0) + log1p(e^-abs(x)) (no overflow); gradient "
       "softplus_grad",
       ref_softplus,
       [](cc::Scope& s, const auto& v, const auto&) { return softplus_of(s, v[0]); },
       unary_tests(-20, 20, {0, inf, -inf, nan, 1, -30},
                   {std::log(2.0), inf, 0, nan, 1.3132616875182228, 9.357622968840175e-14}, -4, 4),
       "softplus_grad",
       {"x0", "dy0"}},
      {"sin",
       "y = sin x (radians, strict, <= 1 ulp for every f32: exact argument reduction; sin(-0) = "
       "-0, sin(±inf) = NaN); gradient sin_grad",
       [](double x) { return std::sin(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::sin(v[0]); },
       trig_tests({0.0, -0.0, inf, -inf, nan, 3, 0x1p100},
                  {0.0, -0.0, nan, nan, nan, 0.1411200080598672, -0.8721836054182673}),
       "sin_grad",
       {"x0", "dy0"}},
      {"cos",
       "y = cos x (radians, strict, <= 1 ulp for every f32: exact argument reduction; cos(±inf) = "
       "NaN); gradient cos_grad",
       [](double x) { return std::cos(x); },
       [](cc::Scope&, const auto& v, const auto&) { return cc::cos(v[0]); },
       trig_tests({0.0, -0.0, inf, -inf, nan, 3, 0x1p100},
                  {1, 1, nan, nan, nan, -0.9899924966004454, 0.48917865697472146}),
       "cos_grad",
       {"x0", "dy0"}},
  };
}

std::vector<Backward> backward_ops() {
  return {
      {"abs_grad",
       "dx = dy · sign(x), 0 at x = ±0 (the backward op of abs)",
       [](double x, double dy) { return x > 0   ? dy
                                        : x < 0 ? -dy
                                                : 0.0; },
       [](cc::Scope&, const auto& v, const auto&) {
         return cc::select(v[0] > 0.0f, v[1], cc::select(v[0] < 0.0f, -v[1], cc::Val(0.0f)));
       },
       {.inputs = {t1({-3, 0, 2}), t1({5, 5, 5})}, .outputs = {t1({-5, 0, 5})}},
       -2,
       2,
       "x"},
      {"sqrt_grad",
       "dx = 0.5 · dy / y, y = √x (the backward op of sqrt)",
       [](double y, double dy) { return 0.5 * dy / y; },
       [](cc::Scope&, const auto& v, const auto&) { return (0.5f * v[1]) / v[0]; },
       {.inputs = {t1({2, 0.0}), t1({4, 1})}, .outputs = {t1({1, kInf()})}},
       0.5,
       3},
      {"rsqrt_grad",
       "dx = -0.5 · dy · y³, y = 1/√x (the backward op of rsqrt)",
       [](double y, double dy) { return -0.5 * dy * (y * y * y); },
       [](cc::Scope&, const auto& v, const auto&) { return -0.5f * v[1] * (v[0] * v[0] * v[0]); },
       {.inputs = {t1({0.5}), t1({8})}, .outputs = {t1({-0.5})}}},
      {"sigmoid_grad",
       "dx = dy · y · (1 - y), y = sigmoid(x) (the backward op of sigmoid)",
       [](double y, double dy) { return dy * y * (1 - y); },
       [](cc::Scope&, const auto& v, const auto&) { return v[1] * v[0] * (1.0f - v[0]); },
       {.inputs = {t1({0.5, 1}), t1({4, 4})}, .outputs = {t1({1, 0})}},
       0,
       1},
      {"tanh_grad",
       "dx = dy · (1 - y²), y = tanh(x) (the backward op of tanh)",
       [](double y, double dy) { return dy * (1 - y * y); },
       [](cc::Scope&, const auto& v, const auto&) { return v[1] * (1.0f - v[0] * v[0]); },
       {.inputs = {t1({0.5, -1}), t1({4, 4})}, .outputs = {t1({3, 0})}},
       -1,
       1},
      {"softplus_grad",
       "dx = dy · sigmoid(x) (the backward op of softplus)",
       [](double x, double dy) { return dy * ref_sigmoid(x); },
       [](cc::Scope&, const auto& v, const auto&) { return v[1] * cc::sigmoid(v[0]); },
       {.inputs = {t1({0, -kInf()}), t1({4, 4})}, .outputs = {t1({2, 0})}},
       -12,
       12,
       "x"},
      {"sin_grad",
       "dx = dy · cos x (the backward op of sin)",
       [](double x, double dy) { return dy * std::cos(x); },
       [](cc::Scope&, const auto& v, const auto&) { return v[1] * cc::cos(v[0]); },
       {.inputs = {t1({0, 3, -kInf()}), t1({4, 2, 1})},
        .outputs = {t1({4, 2 * -0.9899924966004454, kNaN()})}},
       -20,
       20,
       "x"},
      {"cos_grad",
       "dx = -dy · sin x (the backward op of cos)",
       [](double x, double dy) { return -dy * std::sin(x); },
       [](cc::Scope&, const auto& v, const auto&) { return -v[1] * cc::sin(v[0]); },
       {.inputs = {t1({0, 3, kNaN()}), t1({4, 2, 1})},
        .outputs = {t1({-0.0, -2 * 0.1411200080598672, kNaN()})}},
       -20,
       20,
       "x"},
  };
}

}  // namespace

void register_unary(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  for (Unary& u : unary_ops()) {
    Fn1 f = u.ref;
    std::string grad_type = u.grad_type;
    std::vector<std::string> grad_inputs = u.grad_inputs;
    registry.add({.name = u.name,
                  .doc = u.doc,
                  .inputs = {"x"},
                  .outputs = {"y"},
                  .infer = infer_unary,
                  .reference =
                      [f](const std::vector<RefTensor>& in, const Attrs&) {
                        RefTensor y = ref_zeros(in[0].shape);
                        for (int64_t i = 0; i < y.numel(); ++i) y.data[i] = f(in[0].data[i]);
                        return std::vector<RefTensor>{y};
                      },
                  .gradient =
                      [grad_type, grad_inputs](const std::vector<TensorType>&, const Attrs&,
                                               const std::vector<bool>& needs) {
                        if (!needs[0]) return std::vector<GradOp>{};
                        return std::vector<GradOp>{{grad_type, grad_inputs, {"dx0"}, {}}};
                      },
                  .expand = expand_map(cache, MapOp{u.name, 1, {}, u.kernel}),
                  .tests = u.tests});
  }
  for (Backward& b : backward_ops()) {
    Fn2 f = b.ref;
    registry.add({.name = b.name,
                  .doc = b.doc,
                  .inputs = {b.first_slot, "dy"},
                  .outputs = {"dx"},
                  .infer = infer_backward,
                  .reference =
                      [f](const std::vector<RefTensor>& in, const Attrs&) {
                        RefTensor dx = ref_zeros(in[0].shape);
                        for (int64_t i = 0; i < dx.numel(); ++i)
                          dx.data[i] = f(in[0].data[i], in[1].data[i]);
                        return std::vector<RefTensor>{dx};
                      },
                  .expand = expand_map(cache, MapOp{b.name, 2, {}, b.kernel}),
                  .tests = {.kernel = {{.shapes = {{33, 130}, {33, 130}}, .lo = b.lo, .hi = b.hi},
                                       {.shapes = {{1}, {1}}, .lo = b.lo, .hi = b.hi}},
                            .examples = {b.example}}});
  }
}

}  // namespace tilerun::kernels
