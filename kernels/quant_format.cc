#include "kernels/quant_format.h"

#include <algorithm>
#include <cmath>

#include "kernels/ref_values.h"

namespace tilerun::kernels::quant {

Format format_named(const std::string& name, const std::string& attr) {
  if (name == "f8e4m3") return {DType::F8E4M3, 4, -6, 448.0, true};
  if (name == "f8e5m2") return {DType::F8E5M2, 3, -14, 57344.0, false};
  if (name == "fp4e2m1") return {DType::FP4E2M1, 2, 0, 6.0, true};
  throw ShapeError("attribute '" + attr + "' is '" + name +
                   "', expected one of f8e4m3, f8e5m2, fp4e2m1");
}

double round_format(double v, const Format& f) {
  if (std::isnan(v) && f.dtype == DType::FP4E2M1) return f.max;
  if (!std::isfinite(v) || v == 0) {
    if (std::isinf(v) && f.saturates) return std::copysign(f.max, v);
    return v;
  }
  int e = std::max(std::ilogb(v), f.emin);
  double quantum = std::ldexp(1.0, e - (f.digits - 1));
  double r = std::nearbyint(v / quantum) * quantum;
  if (std::abs(r) > f.max) return f.saturates ? std::copysign(f.max, v) : std::copysign(kInf(), v);
  return r;
}

double ceil_pow2(double s) {
  int e = 0;
  double m = std::frexp(s, &e);  // s = m·2^e, m in [0.5, 1)
  return m == 0.5 ? s : std::ldexp(1.0, e);
}

double amax(const double* x, int64_t count, int64_t stride) {
  double m = 0;
  for (int64_t j = 0; j < count; ++j) {
    double a = std::abs(x[j * stride]);
    m = std::isnan(a) || std::isnan(m) ? kNaN() : std::max(m, a);
  }
  return m;
}

// A normal s with a fraction moves to the next exponent; a subnormal one is scaled by 2^64
// first (exact).
cc::Val ceil_pow2(cc::Scope& s, const cc::Val& x) {
  cc::Val e = s.let(cc::shr_logical(bits(x), i32(23)) & i32(0xff), "se");
  cc::Val t = s.let(cc::select(e == i32(0), x * 0x1p64f, x), "st");
  cc::Val tb = s.let(bits(t), "stb");
  cc::Val up = from_bits(cc::shl((cc::shr_logical(tb, i32(23)) & i32(0xff)) + i32(1), i32(23)));
  cc::Val r = s.let(cc::select((tb & i32(0x7fffff)) == i32(0), t, up), "sr");
  cc::Val back = cc::select(e == i32(0), r * 0x1p-64f, r);
  return cc::select(e == i32(0xff) || x == 0.0f, x, back);
}

cc::Val block_scale(cc::Scope& s, const cc::Val& amax, const Format& f, bool pow2) {
  cc::Val q = s.let(amax / static_cast<float>(f.max), "q");
  cc::Val scale = s.let(cc::select(amax == 0.0f, cc::Val(1.0f), q), "scale");
  return pow2 ? s.let(ceil_pow2(s, scale), "scale2") : scale;
}

Divisor divisor(cc::Scope& s, const cc::Val& scale, bool pow2) {
  if (!pow2) return {scale, cc::Val(), cc::Val(), false};
  cc::Val subnormal = (bits(scale) & i32(0x7f800000)) == i32(0);
  cc::Val pre = s.let(cc::select(subnormal, cc::Val(0x1p64f), cc::Val(1.0f)), "pre");
  return {scale, pre, s.let(1.0f / (scale * pre), "post"), true};
}

}  // namespace tilerun::kernels::quant
