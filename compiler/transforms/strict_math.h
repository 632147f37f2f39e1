// Strict numerics, written once as IR. Every routine returns an expression built only from
// + − × ÷, fma, sqrt (IEEE, correctly rounded), comparisons, selects, int↔f32 conversions of
// small integers, and bit operations / bitcasts — operations every backend performs
// bit-identically — so CPU and GPU produce the same bits. Accuracy: ≤ 2 ulp against the exact
// function over the normal range (tests/compiler/strict_math_test.cc measures it).
//
// NaN results are canonical (0x7fc00000) for every routine here; stores of f32 to global memory
// canonicalise any other NaN (lower_storage_types). `prefix` names the routine's let-bound
// temporaries (`prefix.x`, ...): callers pass a fresh name per expansion.
#pragma once

#include <string>

#include "compiler/ir/ir.h"

namespace tilerun::compiler {

// exp: range-reduced by k = round(x / ln2), a degree-7 polynomial on |r| ≤ ln2/2, and 2^k
// applied in two halves so overflow/underflow round once. exp(NaN) = NaN.
Expr strict_exp(const Expr& x, const std::string& prefix);
// log: musl/FreeBSD logf (reduction to [√2/2, √2], s = f/(2+f), degree-8 odd series).
// log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
Expr strict_log(const Expr& x, const std::string& prefix);
// tanh: odd Taylor series for |x| < 0.25, -t/(2+t) with t = expm1(-2|x|) (compensated
// division) below 9, ±1 beyond.
Expr strict_tanh(const Expr& x, const std::string& prefix);
// sigmoid: 1/(1+e) or e/(1+e) with e = exp(-|x|), the sum's rounding error compensated.
Expr strict_sigmoid(const Expr& x, const std::string& prefix);
// sin, cos in radians, for every f32: ≤ 1 ulp against the exact result (the test measures
// ~0.6). Exact argument reduction x = n·π/2 + r (Cody–Waite with a 3-part π/2 below 2^17,
// Payne–Hanek with 2/π bits chosen by the exponent above), r kept as an f32 pair, then minimax
// polynomials on |r| ≤ π/4 picked and signed by n mod 4. sin(±0) = ±0, sin of tiny x = x,
// ±inf and NaN give NaN.
Expr strict_sin(const Expr& x, const std::string& prefix);
Expr strict_cos(const Expr& x, const std::string& prefix);
// erf: fdlibm's method and coefficients (rational approximations on |x| < 0.84375 and < 1.25,
// exp-scaled ones up to 4, 1 beyond) with strict_exp; ≤ 2 ulp (the test measures it).
// erf(±0) = ±0, erf(±inf) = ±1, erf(NaN) = NaN.
Expr strict_erf(const Expr& x, const std::string& prefix);
// rsqrt: 1 / sqrt(x) (two correctly rounded steps); rsqrt(±0) = ±inf, rsqrt(x < 0) = NaN.
Expr strict_rsqrt(const Expr& x, const std::string& prefix);

// min/max of f32 defined by the IR, not the hardware: NaN if either operand is NaN, and
// min(-0, +0) = -0, max(-0, +0) = +0 in either order.
Expr strict_min(const Expr& a, const Expr& b, const std::string& prefix);
Expr strict_max(const Expr& a, const Expr& b, const std::string& prefix);

// x, with any NaN replaced by the canonical quiet NaN 0x7fc00000.
Expr canonicalize_nan(const Expr& x, const std::string& prefix);

// bf16/f16 storage (i16 bits) ↔ f32. To f32 is exact; from f32 (f16 here; bf16 is the
// Bf16Bits call every backend implements) rounds to nearest even, overflows to inf, and maps NaN
// to the canonical 0x7e00.
Expr bf16_bits_to_f32(const Expr& bits);
Expr f16_bits_to_f32(const Expr& bits, const std::string& prefix);
Expr f32_to_f16_bits(const Expr& x, const std::string& prefix);

}  // namespace tilerun::compiler
