#include "compiler/transforms/narrow_float.h"

#include <bit>
#include <cmath>
#include <functional>

#include "compiler/base/check.h"
#include "compiler/ir/builder.h"

namespace tilerun::compiler {
namespace {

Val I(int64_t v) { return Val(make_i32(v)); }
Val F(float v) { return Val(make_f32(v)); }
Val bits_of(const Val& x) { return bitcast(Type::I32, x); }
Val from_bits(const Val& b) { return bitcast(Type::F32, b); }
Val shl_c(const Val& a, int n) { return shl(a, I(n)); }
Val shr_c(const Val& a, int n) { return shr_logical(a, I(n)); }
Val let_in(const std::string& name, const Val& value, const std::function<Val(Val)>& body) {
  Val v = Var::make(value.type(), name);
  return Let::make(name, value.expr(), body(v).expr());
}

// An IEEE-like small format of `bits` bits (the top one the sign): `man` fraction bits, exponent
// bias `bias` (the smallest normal exponent is 1 - bias), the largest finite magnitude code, the
// magnitude code an overflow gets (infinity, or the largest finite one to saturate), and the
// whole code for NaN.
struct Format8 {
  int bits, man, exp_bits, bias;
  int max_code, on_overflow, nan;
  bool has_inf;       // the all-ones exponent is ±inf (fraction 0) and NaN, not numbers
  bool has_nan_code;  // the all-ones magnitude is NaN (e4m3); e2m1 has no NaN
};
constexpr Format8 kE4M3 = {8, 3, 4, 7, 0x7E, 0x7E, 0x7F, false, true};
constexpr Format8 kE5M2 = {8, 2, 5, 15, 0x7B, 0x7C, 0x7E, true, false};
// NaN, which e2m1 cannot hold, goes to +6 like any out-of-range value (numeric_convert.h).
constexpr Format8 kE2M1 = {4, 1, 2, 1, 0x7, 0x7, 0x7, false, false};

const Format8& format_of(DType d) {
  TR_CHECK(d == DType::F8E4M3 || d == DType::F8E5M2 || d == DType::FP4E2M1,
           "not an 8- or 4-bit float format");
  return d == DType::F8E4M3 ? kE4M3 : d == DType::F8E5M2 ? kE5M2 : kE2M1;
}

Val decode8(const Format8& f, const Val& code) {
  const int sign_bit = 1 << (f.bits - 1);
  Val c = code & I((1 << f.bits) - 1);
  Val sign = shl_c(c & I(sign_bit), 32 - f.bits);
  Val e = shr_c(c, f.man) & I((1 << f.exp_bits) - 1);
  Val m = c & I((1 << f.man) - 1);
  Val normal = from_bits(sign | shl_c(e + I(127 - f.bias), 23) | shl_c(m, 23 - f.man));
  // Subnormals are m · 2^(1 - bias - man): exact in f32, the sign put back by a multiply.
  Val subnormal =
      to_f32(m) * F(std::ldexp(1.0f, 1 - f.bias - f.man)) * select(sign == I(0), F(1.0f), F(-1.0f));
  Val nan = from_bits(I(0x7fc00000));
  Val value = select(e == I(0), subnormal, normal);
  if (f.has_inf) {
    Val inf = from_bits(sign | I(0x7f800000));
    return select(e == I((1 << f.exp_bits) - 1), select(m == I(0), inf, nan), value);
  }
  if (!f.has_nan_code) return value;
  return select((c & I(sign_bit - 1)) == I(sign_bit - 1), nan, value);
}

Val encode8(const Format8& f, const Val& x, const std::string& p) {
  return let_in(p + ".b", bits_of(x), [&](Val b) {
    return let_in(p + ".a", b & I(0x7fffffff), [&](Val a) {
      Val sign = shr_c(b, 32 - f.bits) & I(1 << (f.bits - 1));
      const int drop = 23 - f.man;
      // Normal range: round the dropped fraction bits to nearest even (a carry into the
      // exponent is right: it rounds up to the next binade), then rebias the exponent.
      Val normal = shr_c(a + I((1 << (drop - 1)) - 1) + (shr_c(a, drop) & I(1)), drop) -
                   I((127 - f.bias) << f.man);
      // Below the smallest normal 2^(1-bias): adding 2^(1-bias-man+23) aligns the format's
      // subnormal step with that f32's last bit, so the f32 addition (round to nearest even)
      // does the rounding; the code is the distance in bits (2^man: the smallest normal).
      const float align = std::ldexp(1.0f, 1 - f.bias - f.man + 23);
      Val subnormal = bits_of(from_bits(a) + F(align)) - I(std::bit_cast<int32_t>(align));
      const int32_t smallest_normal = std::bit_cast<int32_t>(std::ldexp(1.0f, 1 - f.bias));
      Val mag = select(a < I(smallest_normal), subnormal, normal);
      mag = select(mag > I(f.max_code), I(f.on_overflow), mag);
      return select(a > I(0x7f800000), I(f.nan), mag | sign);
    });
  });
}

// decode8(encode8(x)) on the f32 bits. A normal code is the magnitude's bits rounded to `man`
// fraction bits (nearest even) and rebiased, so its value is those rounded bits with the
// dropped ones cleared; a subnormal one is the f32 addition's rounding, so its value is that sum
// minus the alignment; a code past the largest finite one is the overflow code's value, which is
// monotonic in the bits. The sign is put back; NaN becomes the NaN code's value.
Val round8(const Format8& f, const Val& x, const std::string& p) {
  // A non-negative code's value as f32 bits, as decode8 gives it.
  auto value_bits = [&](int code) {
    const int e = (code >> f.man) & ((1 << f.exp_bits) - 1), m = code & ((1 << f.man) - 1);
    const int all = (1 << (f.bits - 1)) - 1;
    if ((f.has_inf && e == (1 << f.exp_bits) - 1) || (f.has_nan_code && code == all))
      return f.has_inf && m == 0 ? int32_t{0x7f800000} : int32_t{0x7fc00000};
    const float v = e == 0
                        ? std::ldexp(static_cast<float>(m), 1 - f.bias - f.man)
                        : std::ldexp(1.0f + std::ldexp(static_cast<float>(m), -f.man), e - f.bias);
    return std::bit_cast<int32_t>(v);
  };
  return let_in(p + ".b", bits_of(x), [&](Val b) {
    return let_in(p + ".a", b & I(0x7fffffff), [&](Val a) {
      const int drop = 23 - f.man;
      Val normal = (a + I((1 << (drop - 1)) - 1) + (shr_c(a, drop) & I(1))) & I(~((1 << drop) - 1));
      const float align = std::ldexp(1.0f, 1 - f.bias - f.man + 23);
      Val subnormal = bits_of(from_bits(a) + F(align) - F(align));
      const int32_t smallest_normal = std::bit_cast<int32_t>(std::ldexp(1.0f, 1 - f.bias));
      // Named once: written out twice, the CUDA compiler branched around both copies.
      return let_in(p + ".m", select(a < I(smallest_normal), subnormal, normal), [&](Val r) {
        Val mag = select(r > I(value_bits(f.max_code)), I(value_bits(f.on_overflow)), r);
        return from_bits(select(a > I(0x7f800000), I(value_bits(f.nan)),
                                mag | (b & I(static_cast<int32_t>(0x80000000u)))));
      });
    });
  });
}

Val decode_e8m0(const Val& code) {
  Val c = code & I(0xff);
  return select(c == I(0xff), from_bits(I(0x7fc00000)),
                select(c == I(0), from_bits(I(0x00400000)), from_bits(shl_c(c, 23))));
}

Val encode_e8m0(const Val& x, const std::string& p) {
  return let_in(p + ".b", bits_of(x), [&](Val b) {
    Val e = shr_c(b, 23) & I(0xff);
    Val frac = b & I(0x7fffff);
    // 2^(e-127) ≤ x < 2^(e-126): up from 1.5·2^(e-127) (the fraction's top bit).
    Val normal = e + select(frac >= I(0x400000), I(1), I(0));
    normal = select(normal > I(0xfe), I(0xfe), normal);
    // f32 subnormals: 1 (2^-126) from 1.5·2^-127, else 0 (2^-127, the smallest code).
    Val subnormal = select(frac >= I(0x600000), I(1), I(0));
    Val positive = select(e == I(0), subnormal, normal);
    Val is_nan = (b & I(0x7fffffff)) > I(0x7f800000);
    return select(is_nan, I(0xff), select(x > F(0.0f), positive, I(0)));
  });
}

}  // namespace

bool is_narrow_float(DType d) {
  return d == DType::F8E4M3 || d == DType::F8E5M2 || d == DType::E8M0;
}

Expr narrow_float_to_f32(DType d, const Expr& code, const std::string& prefix) {
  if (d == DType::E8M0) return decode_e8m0(Val(code)).expr();
  return let_in(prefix + ".c", Val(code), [&](Val c) { return decode8(format_of(d), c); }).expr();
}

bool is_small_float_code(DType d) { return is_narrow_float(d) || d == DType::FP4E2M1; }

Expr f32_to_narrow_float(DType d, const Expr& x, const std::string& prefix) {
  return let_in(prefix + ".x", Val(x),
                [&](Val v) {
                  return d == DType::E8M0 ? encode_e8m0(v, prefix)
                                          : encode8(format_of(d), v, prefix);
                })
      .expr();
}

Expr round_to_narrow_float(DType d, const Expr& x, const std::string& prefix) {
  TR_CHECK(d != DType::E8M0, "round_to_narrow_float: e8m0 is a scale, not a value format");
  return let_in(prefix + ".x", Val(x), [&](Val v) { return round8(format_of(d), v, prefix); })
      .expr();
}

}  // namespace tilerun::compiler
