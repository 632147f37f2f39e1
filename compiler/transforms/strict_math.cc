#include "compiler/transforms/strict_math.h"

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// y, or the canonical NaN where x is NaN. y is let-bound first: as an inline arm of the select,
// NVRTC guarded y's whole computation with a branch per element (BSSY/BRA/BSYNC), which also kept
// a thread's elements from interleaving; bound, the select is one FSEL after it.
Val nan_or(const Val& x, const Val& y, const std::string& p) {
  return let_in(p + ".y", y, [&](Val y) { return select(is_nan(x), canonical_nan(), y); });
}

// 1/d for d in [1, 2] without a division: a linear first guess (24/17 - 8/17·d, within 1/17 of
// it) and two Newton steps r + r·(1 - d·r) in fma form, each squaring the error (below 2^-16
// after the second). An IEEE division costs a GPU some twenty instructions and a slow-path
// branch; on the H100 sigmoid's two of them made silu's kernel issue-bound (83.8 us for 32M bf16
// elements, 87% of the SM's issue rate, twice its memory floor).
Val reciprocal_1_2(const Val& d, const std::string& p, const std::function<Val(Val)>& body) {
  return let_in(p + ".r0", fma(d, F(-8.0f / 17.0f), F(24.0f / 17.0f)), [&](Val r0) {
    return let_in(p + ".r1", fma(r0, fma(-d, r0, F(1.0f)), r0), [&](Val r1) {
      return let_in(p + ".r", fma(r1, fma(-d, r1, F(1.0f)), r1), body);
    });
  });
}

// (num_hi + num_lo) / (d_hi + d_lo), each pair an unevaluated exact sum, d_hi in [1, 2]: the
// rounded parts' quotient through reciprocal_1_2, then one fma-based correction for its error and
// the pairs' rounding (the residual num - q·d is exact in the fma; times r, whose 2^-16 error
// leaves under 2^-38 of q, the sum rounds once). `num_lo` null: none.
Val compensated_div(const Val& num_hi, const std::optional<Val>& num_lo, const Val& d_hi,
                    const Val& d_lo, const std::string& p) {
  return reciprocal_1_2(d_hi, p, [&](Val r) {
    return let_in(p + ".q", num_hi * r, [&](Val q) {
      Val residual = fma(-q, d_hi, num_hi);
      if (num_lo) residual = residual + *num_lo;
      residual = fma(-q, d_lo, residual);
      return fma(residual, r, q);
    });
  });
}

// e^x before the NaN rule (a NaN x gives some NaN, not the canonical one). `nonpositive`: the
// caller knows x <= 0 or NaN (sigmoid's e^-|x|), so the clamp at 89 is left out: on the GPU the
// clamp and the NaN select are four of an element's ~50 instructions in silu.
Val exp_core(const Val& x, const std::string& p, bool nonpositive) {
  // Outside [-104, 89] the result is 0 or inf; clamping keeps k in range and lets the final
  // scaling overflow or underflow naturally. NaN passes the compares untouched.
  Val low = select(x < -104.0f, F(-104.0f), x);
  Val xc = nonpositive ? low : select(x > 89.0f, F(89.0f), low);
  return let_in(p + ".xc", xc, [&](Val xc) {
    return with_reduced(xc, p, [&](const Reduced& red) {
      Val poly = F(1.98412701e-4f);
      for (float c :
           {1.38888892e-3f, 8.33333377e-3f, 4.16666679e-2f, 1.66666672e-1f, 0.5f, 1.0f, 1.0f})
        poly = fma(poly, red.r, F(c));
      // k in [-150, 129]: 2^k as 2^(k>>1) · 2^(k - (k>>1)), both normal, one final rounding.
      Val k1 = shr(red.k, I(1));
      return (poly * pow2(k1)) * pow2(red.k - k1);
    });
  });
}

}  // namespace

Expr strict_exp(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) { return nan_or(x, exp_core(x, p, /*nonpositive=*/false), p); })
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
                          // y bound first (nan_or says why).
                          return let_in(p + ".y", y, [&](Val y) {
                            Val special =
                                select(x == F(INFINITY), x, select(x == F(0.0f), F(-INFINITY), y));
                            return select(is_nan(x) || x < F(0.0f), canonical_nan(), special);
                          });
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
                    return nan_or(x, y, p);
                  });
                })
      .expr();
}

Expr strict_sigmoid(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  // e^-|x| in (0, 1], or a NaN with x (the select below makes it canonical).
                  Val e = let_in(p + ".exp.x", -abs(x), [&](Val nx) {
                    return exp_core(nx, p + ".exp", /*nonpositive=*/true);
                  });
                  return let_in(p + ".e", e, [&](Val e) {
                    return let_in(p + ".d", F(1.0f) + e, [&](Val d) {
                      Val d_lo = (F(1.0f) - d) + e;  // exact error of 1 + e (e ≤ 1)
                      Val num = select(x < F(0.0f), e, F(1.0f));
                      Val y = compensated_div(num, std::nullopt, d, d_lo, p);
                      return nan_or(x, y, p);
                    });
                  });
                })
      .expr();
}

Expr strict_rsqrt(const Expr& x_in, const std::string& p) {
  return let_in(p + ".x", Val(x_in),
                [&](Val x) {
                  return let_in(p + ".y", F(1.0f) / sqrt(x), [&](Val y) {  // nan_or says why
                    return select(is_nan(x) || x < F(0.0f), canonical_nan(), y);
                  });
                })
      .expr();
}

// ---------------------------------------------------------------------------------------------
// sin and cos: x = n·π/2 + r exactly enough that r keeps ≥ 31 correct bits for every f32, then
// sin or cos of r by n mod 4. The numbers behind the error argument (worst cancellation, the
// size of each term) come from an exhaustive scan of all f32 with 2/π to 400 bits
// (tests/compiler/sincos_reduction_scan.cc).
namespace {

// Let-bindings collected in order and wrapped around the result at the end, so a long
// derivation reads as a list of named steps instead of nested lambdas.
class LetChain {
 public:
  explicit LetChain(std::string prefix) : prefix_(std::move(prefix)) {}
  Val operator()(const std::string& name, const Val& value) {
    binds_.emplace_back(prefix_ + "." + name, value.expr());
    return Var::make(value.type(), binds_.back().first);
  }
  Val wrap(const Val& body) const {
    Expr e = body.expr();
    for (auto it = binds_.rbegin(); it != binds_.rend(); ++it)
      e = Let::make(it->first, it->second, e);
    return e;
  }

 private:
  std::string prefix_;
  std::vector<std::pair<std::string, Expr>> binds_;
};

Val L(int64_t v) { return Val(make_i64(v)); }

// |x| = n·π/2 + hi + lo with |hi + lo| ≤ π/4 + 0.004 and lo below half an ulp of hi.
struct Reduction {
  Val n, hi, lo;  // n: i32, only n mod 4 is used
};

// π/2 = kPio2[0] + kPio2[1] + kPio2[2] + δ, each part the f32 nearest what is left; |δ| < 2^-76.
constexpr float kPio2[3] = {0x1.921fb6p+0f, -0x1.777a5cp-25f, -0x1.ee59dap-50f};
// Below this Cody–Waite reduces (n ≤ 83443 < 2^16.35); from it on, Payne–Hanek.
constexpr float kPayneHanekFrom = 131072.0f;  // 2^17

// Cody–Waite for a < 2^17 (a = |x|). Every step is exact except the three roundings in `tail`;
// the total error is below 2^-54 (n·|δ| < 2^-59.9, each rounding < 2^-56), while the exhaustive
// scan shows |r| ≥ 2^-27.8 for every f32 in [π/4, 2^17): ≤ 0.13 ulp of r at worst.
Reduction cody_waite(LetChain& let, const Val& a) {
  // nf = round(a·c), c = f32(2/π): a·c < 2^22, so adding 1.5·2^23 rounds it to an integer whose
  // value sits in t's low mantissa bits. c's error moves a·c by < 2^17·2^-26 = 2^-9, so
  // |a·2/π - nf| < 1/2 + 2^-9 and |r| < π/4 + 0.004 (the polynomials cover |r| ≤ 0.79).
  Val t = let("t", fma(a, F(0x1.45f306p-1f), F(kRoundMagic)));
  Val nf = let("nf", t - F(kRoundMagic));
  // Exact: for nf ≥ 1, a ≥ π/4 is a multiple of 2^-24 and nf·P1 of 2^-23, and the difference,
  // |r| + nf·|π/2 - P1| < 0.79 + 2^16.35·2^-24.45 < 1, fits in 24 bits. nf = 0: r1 = a.
  Val r1 = let("r1", fma(-nf, F(kPio2[0]), a));
  // nf·P2 and nf·P3 as exact pairs (the fma gives each product's rounding error, representable
  // since both products are ≥ 2^-50 when nf ≥ 1, far above underflow).
  Val p2h = let("p2h", nf * F(kPio2[1]));
  Val p2l = let("p2l", fma(nf, F(kPio2[1]), -p2h));
  Val p3h = let("p3h", nf * F(kPio2[2]));
  Val p3l = fma(nf, F(kPio2[2]), -p3h);
  // s + es = r1 - p2h exactly (2Sum: r1 and p2h can be of any relative size here).
  Val s = let("s", r1 - p2h);
  Val bb = let("bb", s - r1);
  Val es = (r1 - (s - bb)) + (-p2h - bb);
  // The small terms: |es| ≤ ulp(s)/2, |p2l| < 2^-32, |p3h| < 2^-32.7, |p3l| < 2^-57; three
  // roundings of partial sums below 2^-31, each < 2^-56.
  Val tail = let("tail", ((es - p2l) - p3h) - p3l);
  // Fast2Sum: |s| > |tail| because |r| ≥ 2^-27.8 whenever nf ≥ 1 (tail = 0 when nf = 0).
  Val hi = let("hi", s + tail);
  return {bits_of(t) - I(0x4b400000), hi, tail - (hi - s)};
}

// The bits of 2/π after the binary point (2/π = 0.a2f9836e...₁₆), enough for every window.
constexpr uint32_t kTwoOverPi[7] = {0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0,
                                    0xdb629599, 0x3c439041, 0xfe5163ab};
// Window k: bits [8k, 8k + 32) of the stream "24 zero bits, then the bits of 2/π".
constexpr uint32_t two_over_pi_window(int k) {
  uint32_t w = 0;
  for (int i = 0; i < 32; ++i) {
    int pos = 8 * k + i - 24;  // 0 is the 2^-1 bit of 2/π
    w = (w << 1) | (pos < 0 ? 0u : (kTwoOverPi[pos / 32] >> (31 - pos % 32)) & 1u);
  }
  return w;
}
static_assert(two_over_pi_window(0) == 0xa2u && two_over_pi_window(3) == 0xa2f9836eu &&
              two_over_pi_window(23) == 0x3c439041u);

// Payne–Hanek for a ≥ 2^17 (ia = bits of a; the same steps as ARM optimized-routines' sinf
// reduce_large). With a = M·2^(E-150), M < 2^24, s = E mod 8, M' = M·2^s, k = E/8 - 16:
//   a·2/π mod 4 = M'·W·2^-94 mod 4 + ε,  W = windows k, k+4, k+8 as one 96-bit number,
// because the 2/π bits before the window give multiples of 4 (M is an integer) and those
// after it add ε ∈ [0, 2^-63). The value times 2^62, bits [32, 96) of the 127-bit M'·W, is
// formed in wrapping 64-bit arithmetic from three M'·w products (M' < 2^31, w < 2^32: each
// < 2^63); dropping M'·w2's low 32 bits costs < 2^-62. So f·2^-62 = a·2/π - n to within
// 1.5·2^-62, and the scan's smallest |a·2/π - n| for a ≥ 2^17 is 2^-29.86: ≥ 31 correct bits.
Reduction payne_hanek(LetChain& let, const Val& ia) {
  Val m = let("m", shl(to_i64((ia & I(0x7fffff)) | I(0x800000)), to_i64(shr_c(ia, 23) & I(7))));
  // The window index is 4 bits of ia; pick each word by a select tree on them (no tables in
  // the IR). Below 2^17 the result is unused (below 2, E < 128, the index is meaningless).
  Val k = let("k", shr_c(ia, 26) & I(15));
  Val bit[4];
  for (int b = 0; b < 4; ++b) bit[b] = let("k" + std::to_string(b), (k & I(1 << b)) != I(0));
  std::function<Val(int, int, int)> pick = [&](int word, int first, int level) -> Val {
    if (level < 0) return L(two_over_pi_window(first + 4 * word));
    return select(bit[level], pick(word, first + (1 << level), level - 1),
                  pick(word, first, level - 1));
  };
  Val w0 = pick(0, 0, 3), w1 = pick(1, 0, 3), w2 = pick(2, 0, 3);
  Val res = let("res", shl(m * w0, L(32)) + m * w1 + shr_logical(m * w2, L(32)));
  // n = round(res / 2^62) mod 4; f = res - n·2^62 ∈ [-2^61, 2^61) is the signed remainder.
  Val n = let("quadrant", shr_logical(res + L(int64_t{1} << 61), L(62)));
  Val f = let("f", res - shl(n, L(62)));
  // f = fh + fl: fh = f rounded to f32, the rest exact in i64 (|f - fh| ≤ 2^37), then rounded
  // (relative 2^-48 of f). r = f·(π/2·2^-62), with that constant as ch + cl (relative 2^-49.7)
  // and fh·ch as an exact pair: (hi, lo) carries r to ~2^-46 beyond the reduction's error.
  Val fh = let("fh", to_f32(f));
  Val fl = to_f32(f - to_i64(fh));
  const float ch = 0x1.921fb6p-62f, cl = -0x1.777a5cp-87f;
  Val rh = let("rh", fh * F(ch));
  Val rl = let("rl", fma(fh, F(ch), -rh) + fma(fh, F(cl), fl * F(ch)));
  Val hi = let("phhi", rh + rl);  // Fast2Sum: |rl| < 2^-23·|rh|
  return {to_i32(n), hi, rl - (hi - rh)};
}

// sin(hi + lo), |hi| ≤ 0.79: hi + hi³·S(hi²) + lo·(1 - hi²/2). S is a minimax fit with f32
// coefficients (relative error of the polynomial < 2^-32 on |r| ≤ 0.79); the correction
// term is < 0.11·|hi|, so its few roundings cost < 0.3 ulp before the final addition's 0.5.
Val sin_poly(const Val& hi, const Val& lo, const Val& z) {
  Val s = F(0x1.7d9d14p-19f);
  for (float c : {-0x1.a05f56p-13f, 0x1.11117ap-7f, -0x1.555556p-3f}) s = fma(s, z, F(c));
  return hi + fma(hi * z, s, fma(F(-0.5f) * z, lo, lo));
}

// cos(hi + lo) = 1 - z/2 + z²·C(z) - hi·lo with z = hi² kept exact as zh + zl, and 1 - zh/2 as
// w plus its exact error (Fast2Sum, 1 ≥ zh/2): all but the final addition is below 0.02 of
// the result, so the error is the final rounding plus < 0.05 ulp. C: minimax, < 2^-32.
Val cos_poly(LetChain& let, const Val& hi, const Val& lo, const Val& zh) {
  Val zl = fma(hi, hi, -zh);
  Val hz = let("hz", F(0.5f) * zh);
  Val w = let("w", F(1.0f) - hz);
  Val werr = (F(1.0f) - w) - hz;
  Val c = F(0x1.9a5f94p-16f);
  for (float coef : {-0x1.6c0e1ep-10f, 0x1.55554ep-5f}) c = fma(c, zh, F(coef));
  return w + fma(zh * zh, c, werr - (F(0.5f) * zl + hi * lo));
}

Expr sin_or_cos(const Expr& x_in, const std::string& p, bool is_cos) {
  LetChain let(p);
  Val x = let("x", Val(x_in));
  Val ix = let("ix", bits_of(x));
  Val ia = let("ia", ix & I(0x7fffffff));
  Val a = from_bits(ia);
  // Both reductions are computed (the IR has no branches inside an expression); a select keeps
  // one. Neither can trap or misbehave on the other's inputs, inf and NaN included.
  Reduction cw = cody_waite(let, a);
  Reduction ph = payne_hanek(let, ia);
  Val small = let("small", a < F(kPayneHanekFrom));
  Val n = let("n", select(small, cw.n, ph.n));
  Val hi = let("r", select(small, cw.hi, ph.hi));
  Val lo = let("rlo", select(small, cw.lo, ph.lo));
  Val z = let("z", hi * hi);
  Val sin_r = sin_poly(hi, lo, z);
  Val cos_r = cos_poly(let, hi, lo, z);
  // sin|x| by q = n mod 4: sin r, cos r, -sin r, -cos r; cos|x| is the same table at q = n + 1.
  // sin is odd: x's sign bit is flipped in at the end, so sin(-0) = -0 and sin(-x) = -sin(x).
  Val q = let("q", is_cos ? n + I(1) : n);
  Val y = select((q & I(1)) == I(0), sin_r, cos_r);
  Val sign = shl_c(q & I(2), 30);
  if (!is_cos) sign = sign ^ (ix & I(INT32_MIN));
  Val out = from_bits(bits_of(y) ^ sign);
  return let.wrap(select(ia < I(0x7f800000), out, canonical_nan())).expr();
}

}  // namespace

Expr strict_sin(const Expr& x, const std::string& prefix) { return sin_or_cos(x, prefix, false); }
Expr strict_cos(const Expr& x, const std::string& prefix) { return sin_or_cos(x, prefix, true); }

// ---------------------------------------------------------------------------------------------
// erf: Sun's fdlibm method in f32 (the published s_erff.c coefficients), every branch computed
// and the right one selected. On a = |x|:
//   a < 0.84375:  a + a·P(a²)/Q(a²)
//   a < 1.25:     erx + P(s)/Q(s), s = a - 1, erx = f32(0.84506291151)
//   a < 4:        1 - exp(-z² - 0.5625)·exp((z - a)(z + a) + R(1/a²)/S(1/a²)) / a, z = a with
//                 its 12 low mantissa bits cleared (so z² is exact); R/S from one of two sets
//                 of coefficients, split at 1/0.35
//   a ≥ 4:        1 (erf(a) rounds to 1 from 3.92 on)
// then the sign of x. The erfc term is below 0.08, so strict_exp's ≤ 2 ulp in it costs well under
// one ulp of the result.
namespace {

// c[0] + t·(c[1] + t·(...)), in fma steps.
Val horner(const Val& t, const std::vector<float>& c) {
  Val acc = F(c.back());
  for (size_t i = c.size() - 1; i-- > 0;) acc = fma(acc, t, F(c[i]));
  return acc;
}

// Per element, one of two coefficient lists (the shorter padded with zeros at the top: the
// Horner steps on those are exact).
std::vector<Val> pick(const Val& first, std::vector<float> a, std::vector<float> b) {
  a.resize(std::max(a.size(), b.size()), 0.0f);
  b.resize(a.size(), 0.0f);
  std::vector<Val> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(select(first, F(a[i]), F(b[i])));
  return out;
}

Val horner_picked(const Val& t, const std::vector<Val>& c) {
  Val acc = c.back();
  for (size_t i = c.size() - 1; i-- > 0;) acc = fma(acc, t, c[i]);
  return acc;
}

}  // namespace

Expr strict_erf(const Expr& x_in, const std::string& p) {
  LetChain let(p);
  Val x = let("x", Val(x_in));
  Val a = let("a", from_bits(bits_of(x) & I(INT32_MAX)));
  // a < 0.84375.
  Val z = let("z", a * a);
  Val small = fma(a,
                  horner(z, {1.2837916613e-01f, -3.2504209876e-01f, -2.8481749818e-02f,
                             -5.7702702470e-03f, -2.3763017452e-05f}) /
                      horner(z, {1.0f, 3.9791721106e-01f, 6.5022252500e-02f, 5.0813062117e-03f,
                                 1.3249473704e-04f, -3.9602282413e-06f}),
                  a);
  // 0.84375 ≤ a < 1.25.
  Val s = let("s", a - F(1.0f));
  Val mid = F(8.4506291151e-01f) +
            horner(s, {-2.3621185683e-03f, 4.1485610604e-01f, -3.7220788002e-01f, 3.1834661961e-01f,
                       -1.1089469492e-01f, 3.5478305072e-02f, -2.1663755178e-03f}) /
                horner(s, {1.0f, 1.0642088205e-01f, 5.4039794207e-01f, 7.1828655899e-02f,
                           1.2617121637e-01f, 1.3637083583e-02f, 1.1984500103e-02f});
  // 1.25 ≤ a < 4.
  Val inv = let("inv", F(1.0f) / (a * a));
  Val near = a < F(2.857142857f);  // 1/0.35
  Val r = horner_picked(
      inv, pick(near,
                {-9.8649440333e-03f, -6.9385856390e-01f, -1.0558626175e+01f, -6.2375331879e+01f,
                 -1.6239666748e+02f, -1.8460508728e+02f, -8.1287437439e+01f, -9.8143291473e+00f},
                {-9.8649431020e-03f, -7.9928326607e-01f, -1.7757955551e+01f, -1.6063638306e+02f,
                 -6.3756646729e+02f, -1.0250950928e+03f, -4.8351919556e+02f}));
  Val q = horner_picked(
      inv, pick(near,
                {1.0f, 1.9651271820e+01f, 1.3765776062e+02f, 4.3456588745e+02f, 6.4538726807e+02f,
                 4.2900814819e+02f, 1.0863500214e+02f, 6.5702495575e+00f, -6.0424413532e-02f},
                {1.0f, 3.0338060379e+01f, 3.2579251099e+02f, 1.5367296143e+03f, 3.1998581543e+03f,
                 2.5530502930e+03f, 4.7452853394e+02f, -2.2440952301e+01f}));
  Val zt = let("zt", from_bits(bits_of(a) & I(static_cast<int32_t>(0xfffff000u))));
  Val e1 = Val(strict_exp((-zt * zt - F(0.5625f)).expr(), p + ".e1"));
  Val e2 = Val(strict_exp(((zt - a) * (zt + a) + r / q).expr(), p + ".e2"));
  Val tail = F(1.0f) - e1 * e2 / a;
  Val y =
      select(a < F(0.84375f), small, select(a < F(1.25f), mid, select(a < F(4.0f), tail, F(1.0f))));
  return let.wrap(nan_or(x, copysign_of(y, x), p)).expr();
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
