#include "compiler/transforms/strict_math.h"

#include <cmath>
#include <functional>

#include "compiler/ir/builder.h"

// The routines are written with the builder's Val operators so they read as the formulas they
// are; every operator here builds plain IR (no hidden calls).
namespace tilerun::compiler {
namespace {

Val F(float v) { return Val(make_f32(v)); }
Val I(int64_t v) { return Val(make_i32(v)); }
Val bits_of(const Val& x) { return bitcast(Type::I32, x); }
Val from_bits(const Val& b) { return bitcast(Type::F32, b); }
Val is_nan(const Val& x) { return x != x; }
Val canonical_nan() { return from_bits(I(0x7fc00000)); }
// Shifts by a constant; ShrL for unsigned bit fields.
Val shl_c(const Val& a, int n) { return shl(a, I(n)); }
Val shr_c(const Val& a, int n) { return shr_logical(a, I(n)); }
Val copysign_of(const Val& magnitude, const Val& sign_source) {
  return from_bits(bits_of(magnitude) | (bits_of(sign_source) & I(INT32_MIN)));
}

// `let name = value in body(name)`.
Val let_in(const std::string& name, const Val& value, const std::function<Val(Val)>& body) {
  Val v = Var::make(value.type(), name);
  return Let::make(name, value.expr(), body(v).expr());
}

// 2^k for k in [-126, 127], from the exponent bits.
Val pow2(const Val& k) { return from_bits(shl_c(k + I(127), 23)); }

// Cody–Waite reduction: kf = round(x / ln2) (an integer-valued f32, exact via the 1.5·2^23
// rounding constant), k its i32 value read from the same bits, r = x - kf·ln2 in two fma steps
// (ln2_hi has 9 significant bits, so the first step is exact).
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
struct Reduced {
  Val kf, k, r;
};
Val with_reduced(const Val& x, const std::string& p,
                 const std::function<Val(const Reduced&)>& body) {
  Val t = fma(x, F(1.44269502f), F(kRoundMagic));
  return let_in(p + ".t", t, [&](Val t) {
    Val kf = t - F(kRoundMagic);
    Val k = bits_of(t) - I(0x4b400000);
    return let_in(p + ".kf", kf, [&](Val kf) {
      Val r = fma(kf, F(-0.693359375f), x);
      r = fma(kf, F(2.12194442e-4f), r);
      return let_in(p + ".r", r, [&](Val r) { return body({kf, k, r}); });
    });
  });
}

// e^r - 1 for |r| ≤ ln2/2: Taylor to r^9 (truncation < 1e-9 relative), r + r²·q in fma form.
Val expm1_poly(const Val& r) {
  Val q = F(2.75573188e-6f);
  for (float c : {2.48015876e-5f, 1.98412701e-4f, 1.38888892e-3f, 8.33333377e-3f, 4.16666679e-2f,
                  1.66666672e-1f, 0.5f})
    q = fma(q, r, F(c));
  return fma(r * r, q, r);
}

// (num_hi + num_lo) / (d_hi + d_lo), each pair an unevaluated exact sum: the quotient of the
// rounded parts, then one fma-based correction for the division's and the pairs' rounding.
Val compensated_div(const Val& num_hi, const Val& num_lo, const Val& d_hi, const Val& d_lo,
                    const std::string& p) {
  return let_in(p + ".q", num_hi / d_hi, [&](Val q) {
    Val residual = fma(-q, d_hi, num_hi) + num_lo;
    residual = fma(-q, d_lo, residual);
    return q + residual / d_hi;
  });
}

}  // namespace

Expr strict_exp(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  // Outside [-104, 89] the result is 0 or inf; clamping keeps k in range and lets
                  // the final scaling overflow or underflow naturally. NaN passes the compares
                  // untouched.
                  Val xc = select(x > 89.0f, F(89.0f), select(x < -104.0f, F(-104.0f), x));
                  return let_in(p + ".xc", xc, [&](Val xc) {
                    return with_reduced(xc, p, [&](const Reduced& red) {
                      Val poly = F(1.98412701e-4f);
                      for (float c : {1.38888892e-3f, 8.33333377e-3f, 4.16666679e-2f,
                                      1.66666672e-1f, 0.5f, 1.0f, 1.0f})
                        poly = fma(poly, red.r, F(c));
                      // k in [-150, 129]: 2^k as 2^(k>>1) · 2^(k - (k>>1)), both normal, one final
                      // rounding.
                      Val k1 = shr(red.k, I(1));
                      Val y = (poly * pow2(k1)) * pow2(red.k - k1);
                      return select(is_nan(x), canonical_nan(), y);
                    });
                  });
                })
      .expr();
}

Expr strict_log(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  // Subnormals: scale by 2^25 first, remember -25 in the exponent.
                  Val sub = x < F(1.17549435e-38f);
                  Val xs = select(sub, x * F(33554432.0f), x);
                  Val k0 = select(sub, I(-25), I(0));
                  return let_in(p + ".ix", bits_of(xs) + I(0x3f800000 - 0x3f3504f3), [&](Val ix) {
                    Val k = shr_c(ix, 23) - I(0x7f) + k0;
                    Val m = from_bits((ix & I(0x007fffff)) + I(0x3f3504f3));  // in [√2/2, √2)
                    return let_in(p + ".f", m - F(1.0f), [&](Val f) {
                      return let_in(p + ".s", f / (F(2.0f) + f), [&](Val s) {
                        return let_in(p + ".z", s * s, [&](Val z) {
                          Val w = z * z;
                          Val t1 = w * (F(0.400009722f) + w * F(0.242790788f));
                          Val t2 = z * (F(0.666666627f) + w * F(0.284987867f));
                          Val hfsq = F(0.5f) * f * f;
                          Val dk = to_f32(k);
                          Val y = s * (hfsq + (t2 + t1)) + dk * F(9.05800061e-6f) - hfsq + f +
                                  dk * F(0.693138123f);
                          y = select(x == F(INFINITY), x, y);
                          y = select(x == F(0.0f), F(-INFINITY), y);
                          return select(is_nan(x) || x < F(0.0f), canonical_nan(), y);
                        });
                      });
                    });
                  });
                })
      .expr();
}

Expr strict_tanh(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  return let_in(p + ".a", abs(x), [&](Val a) {
                    // |x| < 0.25: x + x·z·P(z), z = x², Taylor through x^13 (truncation < 1e-11
                    // relative).
                    Val z = x * x;
                    Val poly = F(3.59212793e-3f);
                    for (float c : {-8.86323582e-3f, 2.18694881e-2f, -5.39682545e-2f,
                                    1.33333340e-1f, -3.33333343e-1f})
                      poly = fma(poly, z, F(c));
                    // x = ±0 returns itself: fma(x·z, P, x) would turn -0 into +0.
                    Val small = select(a == F(0.0f), x, fma(x * z, poly, x));
                    // 0.25 ≤ |x| < 9: tanh|x| = -t / (2 + t), t = expm1(-2|x|) in (-1, -0.39]. t is
                    // kept as an exact pair t_hi + t_lo: rounding it would cost up to 1.6 ulp of
                    // the result, since t sits in a coarser binade than tanh and the quotient
                    // amplifies its error.
                    Val mid = with_reduced(F(-2.0f) * a, p + ".m", [&](const Reduced& red) {
                      Val em = expm1_poly(red.r);
                      Val s = pow2(red.k);
                      // t = 2^k·(1 + em) - 1 = (s - 1) + s·em, both exact (s is a power of two) for
                      // k ≥ -24; below, s·(1 + em) is so small that rounding it is harmless.
                      Val far = red.k < I(-24);
                      Val big = select(far, F(-1.0f), s - F(1.0f));
                      Val small_part = select(far, fma(s, em, s), s * em);
                      return let_in(p + ".th", big + small_part, [&](Val t_hi) {
                        Val t_lo = small_part - (t_hi - big);  // Fast2Sum: |big| ≥ |small_part|
                        return let_in(p + ".tl", t_lo, [&](Val t_lo) {
                          return let_in(p + ".d", F(2.0f) + t_hi, [&](Val d) {
                            Val d_lo = ((F(2.0f) - d) + t_hi) +
                                       t_lo;  // exact error of 2 + t_hi, plus t_lo
                            return compensated_div(-t_hi, -t_lo, d, d_lo, p);
                          });
                        });
                      });
                    });
                    Val y = select(a < F(0.25f), small,
                                   copysign_of(select(a < F(9.0f), mid, F(1.0f)), x));
                    return select(is_nan(x), canonical_nan(), y);
                  });
                })
      .expr();
}

Expr strict_sigmoid(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  Val e = Val(strict_exp((-abs(x)).expr(), p + ".exp"));  // in (0, 1]
                  return let_in(p + ".e", e, [&](Val e) {
                    return let_in(p + ".d", F(1.0f) + e, [&](Val d) {
                      Val d_lo = (F(1.0f) - d) + e;  // exact error of 1 + e (e ≤ 1)
                      Val num = select(x < F(0.0f), e, F(1.0f));
                      Val y = compensated_div(num, F(0.0f), d, d_lo, p);
                      return select(is_nan(x), canonical_nan(), y);
                    });
                  });
                })
      .expr();
}

Expr strict_rsqrt(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  Val y = F(1.0f) / sqrt(x);
                  return select(is_nan(x) || x < F(0.0f), canonical_nan(), y);
                })
      .expr();
}

namespace {
Expr min_max(const Expr& a_in, const Expr& b_in, bool is_min, const std::string& p) {
  return let_in(p + ".a", Val(a_in),
                [&](Val a) {
                  return let_in(p + ".b", Val(b_in), [&](Val b) {
                    // Equal operands differ at most in the sign of zero: OR of the bits prefers -0,
                    // AND +0.
                    Val tie = is_min ? from_bits(bits_of(a) | bits_of(b))
                                     : from_bits(bits_of(a) & bits_of(b));
                    Val pick = is_min ? select(a < b, a, select(b < a, b, tie))
                                      : select(a > b, a, select(b > a, b, tie));
                    return select(is_nan(a) || is_nan(b), canonical_nan(), pick);
                  });
                })
      .expr();
}
}  // namespace

Expr strict_min(const Expr& a, const Expr& b, const std::string& p) {
  return min_max(a, b, true, p);
}
Expr strict_max(const Expr& a, const Expr& b, const std::string& p) {
  return min_max(a, b, false, p);
}

Expr canonicalize_nan(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in), [&](Val x) { return select(is_nan(x), canonical_nan(), x); })
      .expr();
}

Expr bf16_bits_to_f32(const Expr& bits) {
  return from_bits(shl_c(cast(Type::I32, Val(bits)), 16)).expr();
}

Expr f32_to_bf16_bits(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  return let_in(p + ".b", bits_of(x), [&](Val b) {
                    // Round to nearest even on the 16 dropped bits; a carry into the exponent is
                    // correct (it rounds up to the next binade or to inf).
                    Val rounded = shr_c(b + I(0x7fff) + (shr_c(b, 16) & I(1)), 16);
                    return cast(Type::I16, select(is_nan(x), I(0x7fc0), rounded));
                  });
                })
      .expr();
}

Expr f16_bits_to_f32(const Expr& bits, const std::string& p) {
  return let_in(p + ".h", cast(Type::I32, Val(bits)) & I(0xffff),
                [&](Val h) {
                  Val sign = shl_c(h & I(0x8000), 16);
                  Val e = shr_c(h, 10) & I(0x1f);
                  Val m = h & I(0x3ff);
                  Val normal = from_bits(sign | shl_c(e + I(112), 23) | shl_c(m, 13));
                  Val special = select(m == I(0), from_bits(sign | I(0x7f800000)), canonical_nan());
                  // Subnormal halves are m·2^-24: exact in f32.
                  Val subnormal = copysign_of(to_f32(m) * F(5.96046448e-8f), from_bits(sign));
                  return select(e == I(0), subnormal, select(e == I(31), special, normal));
                })
      .expr();
}

Expr f32_to_f16_bits(const Expr& x_in, const std::string& p) {
  // F. Giesen's float_to_half_fast3_rtne.
  return let_in(p + ".b", bits_of(Val(x_in)),
                [&](Val b) {
                  return let_in(p + ".a", b & I(0x7fffffff), [&](Val a) {
                    Val sign = shr_c(b & I(INT32_MIN), 16);
                    Val inf_or_nan = select(I(0x7f800000) < a, I(0x7e00), I(0x7c00));
                    // Below 2^-14: adding 0.5 aligns the half's subnormal ulp (2^-24) with the f32
                    // ulp of 0.5, so the hardware's round-to-nearest-even addition does the
                    // rounding.
                    Val subnormal = bits_of(from_bits(a) + F(0.5f)) - I(0x3f000000);
                    Val mant_odd = shr_c(a, 13) & I(1);
                    Val normal = shr_c(a + I(((15 - 127) << 23) + 0xfff) + mant_odd, 13);
                    Val o = select(a < I(0x47800000), select(a < I(0x38800000), subnormal, normal),
                                   inf_or_nan);
                    // NaN is canonical (0x7e00) whatever its sign: x86 keeps an arithmetic NaN's
                    // sign, the GPU does not, so the sign must not reach the bits.
                    return cast(Type::I16, select(I(0x7f800000) < a, I(0x7e00), o | sign));
                  });
                })
      .expr();
}

}  // namespace tilerun::compiler
