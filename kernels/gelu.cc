// gelu in its exact (erf) and tanh forms, and its backward op gelu_grad; one flat map kernel
// each, strict (erf and tanh are the compiler's routines, compiler/transforms/strict_math.h).
#include <cmath>
#include <numbers>

#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr double kSqrtHalf = 0.70710678118654752440;   // 1/√2
constexpr double kTanhScale = 0.79788456080286535588;  // √(2/π)
constexpr double kTanhCubic = 0.044715;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)

bool tanh_form(const Attrs& attrs) {
  const std::string& a = attr_string(attrs, "approximate");
  if (a != "none" && a != "tanh")
    throw ShapeError("attribute 'approximate' is '" + a + "', expected none or tanh");
  return a == "tanh";
}

std::vector<TensorType> infer_gelu(const std::vector<TensorType>& in, const Attrs& attrs) {
  tanh_form(attrs);
  expect_float(in[0], "x");
  return {in[0]};
}

std::vector<TensorType> infer_gelu_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  tanh_form(attrs);
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

// Φ(x), the standard normal CDF, or its tanh approximation.
double ref_phi(double x, bool tanh) {
  if (tanh) return 0.5 * (1 + std::tanh(kTanhScale * (x + kTanhCubic * x * x * x)));
  return 0.5 * (1 + std::erf(x * kSqrtHalf));
}

// x·Φ(x), and -0 where Φ(x) is 0 (x = -inf, or far enough below 0 that Φ underflows), where
// x·Φ would be NaN or -0 anyway.
double ref_gelu_value(double x, bool tanh) {
  double phi = ref_phi(x, tanh);
  return phi == 0 ? -0.0 : x * phi;
}

// d(x·Φ(x))/dx = Φ(x) + x·Φ'(x).
double ref_gelu_derivative(double x, bool tanh) {
  if (!tanh) return ref_phi(x, false) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
  double t = std::tanh(kTanhScale * (x + kTanhCubic * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kTanhScale * (1 + 3 * kTanhCubic * x * x);
}

std::vector<RefTensor> ref_gelu(const std::vector<RefTensor>& in, const Attrs& attrs) {
  bool tanh = tanh_form(attrs);
  RefTensor y = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < y.numel(); ++i) y.data[i] = ref_gelu_value(in[0].data[i], tanh);
  return {y};
}

std::vector<RefTensor> ref_gelu_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  bool tanh = tanh_form(attrs);
  RefTensor dx = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < dx.numel(); ++i)
    dx.data[i] = in[1].data[i] * ref_gelu_derivative(in[0].data[i], tanh);
  return {dx};
}

std::vector<GradOp> grad_gelu(const std::vector<TensorType>&, const Attrs& attrs,
                              const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {
      {"gelu_grad", {"x0", "dy0"}, {"dx0"}, {{"approximate", attr_string(attrs, "approximate")}}}};
}

// The tanh form's argument √(2/π)·(x + 0.044715·x³).
cc::Val tanh_arg(const cc::Val& x) {
  return float(kTanhScale) * (x + float(kTanhCubic) * (x * x * x));
}

cc::Val phi(cc::Scope& s, const cc::Val& x, bool tanh) {
  cc::Val inner = tanh ? cc::tanh(tanh_arg(x)) : cc::erf(x * float(kSqrtHalf));
  return s.let(0.5f + 0.5f * inner, "phi");
}

MapOp gelu_kernel(bool tanh) {
  return {tanh ? "gelu_tanh" : "gelu", 1, {}, [tanh](cc::Scope& s, const auto& v, const auto&) {
            cc::Val p = phi(s, v[0], tanh);
            return cc::select(p == 0.0f, cc::Val(-0.0f), v[0] * p);
          }};
}

MapOp gelu_grad_kernel(bool tanh) {
  return {tanh ? "gelu_tanh_grad" : "gelu_grad",
          2,
          {},
          [tanh](cc::Scope& s, const auto& v, const auto&) {
            const cc::Val& x = v[0];
            cc::Val d;
            if (tanh) {
              cc::Val t = s.let(cc::tanh(tanh_arg(x)), "t");
              d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * float(kTanhScale) *
                                          (1.0f + float(3 * kTanhCubic) * (x * x));
            } else {
              d = phi(s, x, false) + x * float(kInvSqrt2Pi) * cc::exp(-0.5f * (x * x));
            }
            return v[1] * d;
          }};
}

// The erf-form kernel or the tanh-form one, by the attribute.
ExpandFn expand_by_form(std::shared_ptr<KernelCache> cache, MapOp exact, MapOp tanh) {
  ExpandFn e = expand_map(cache, exact), t = expand_map(cache, tanh);
  return [e, t](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                const Attrs& attrs) {
    return tanh_form(attrs) ? t(in, out, attrs) : e(in, out, attrs);
  };
}

AttrSpec approximate_attr() {
  return {.name = "approximate",
          .kind = AttrKind::String,
          .default_value = std::string("none"),
          .doc =
              "none: the exact form x·(1 + erf(x/√2))/2; tanh: x·(1 + tanh(√(2/π)(x + "
              "0.044715x³)))/2"};
}

}  // namespace

void register_gelu(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const Attrs tanh = {{"approximate", std::string("tanh")}};
  const double inf = kInf(), nan = kNaN();
  registry.add(
      {.name = "gelu",
       .doc = "y = x·Φ(x), Φ the normal CDF (erf form, strict erf) or its tanh approximation; "
              "-0 where Φ rounds to 0 (x = -inf); gradient gelu_grad",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {approximate_attr()},
       .infer = infer_gelu,
       .reference = ref_gelu,
       .gradient = grad_gelu,
       .expand = expand_by_form(cache, gelu_kernel(false), gelu_kernel(true)),
       .tests = {.kernel = {{.shapes = {{33, 130}}, .lo = -6, .hi = 6},
                            {.shapes = {{(1 << 16) + 3}}, .lo = -6, .hi = 6},
                            {.shapes = {{1, 7}}, .attrs = tanh, .lo = -6, .hi = 6},
                            {.shapes = {{33, 130}}, .attrs = tanh, .lo = -6, .hi = 6}},
                 .gradient = {{.shapes = {{7, 5}}, .lo = -3, .hi = 3},
                              {.shapes = {{7, 5}}, .attrs = tanh, .lo = -3, .hi = 3}},
                 // gelu(1) = Φ(1) = 0.841344746068543; tanh form 0.8411919906082768.
                 .examples = {{.inputs = {{{6}, {0.0, -0.0, 1, inf, -inf, nan}}},
                               .outputs = {{{6}, {0.0, -0.0, 0.8413447460685429, inf, -0.0, nan}}}},
                              {.inputs = {{{3}, {1, inf, -inf}}},
                               .attrs = tanh,
                               .outputs = {{{3}, {0.8411919906082768, inf, -0.0}}}}}}});
  registry.add(
      {.name = "gelu_grad",
       .doc =
           "dx = dy·(Φ(x) + x·Φ'(x)) for the form named by approximate (the backward op of gelu)",
       .inputs = {"x", "dy"},
       .outputs = {"dx"},
       .attrs = {approximate_attr()},
       .infer = infer_gelu_grad,
       .reference = ref_gelu_grad,
       .expand = expand_by_form(cache, gelu_grad_kernel(false), gelu_grad_kernel(true)),
       .tests = {
           .kernel = {{.shapes = {{33, 130}, {33, 130}}, .lo = -6, .hi = 6},
                      {.shapes = {{7}, {7}}, .attrs = tanh, .lo = -6, .hi = 6}},
           // gelu'(0) = 1/2 in both forms.
           .examples = {
               {.inputs = {{{1}, {0}}, {{1}, {4}}}, .outputs = {{{1}, {2}}}},
               {.inputs = {{{1}, {0}}, {{1}, {4}}}, .attrs = tanh, .outputs = {{{1}, {2}}}}}}});
}

}  // namespace tilerun::kernels
