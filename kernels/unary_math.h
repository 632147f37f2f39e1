// Pieces of unary math that more than one op family must compute the same way: the double
// references of sigmoid and softplus, softplus's kernel expression (moe_route's scores must be
// bit for bit the softplus op's), and topk's order (a NaN above every number, ties to the lower
// index), which the router's choice follows too. One definition, so a fused op can never drift
// from the composed ops it has to match.
#pragma once

#include <cmath>
#include <cstdint>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

inline double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// log(1 + e^x) without overflow: x + log1p(e^-x) for x > 0.
inline double ref_softplus(double x) {
  if (std::isnan(x)) return x;
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// Whether a (at index ia) comes before b (at ib) in topk's order: a NaN above every number,
// ties to the lower index.
inline bool ref_topk_before(double a, int64_t ia, double b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// |x| by clearing the sign bit: abs(-0) = +0, abs(-NaN) is NaN.
inline compiler::Val abs_bits(const compiler::Val& x) {
  namespace cc = compiler;
  return cc::bitcast(cc::Type::F32,
                     cc::bitcast(cc::Type::I32, x) & cc::literal(cc::Type::I32, 0x7fffffff));
}

// log(1 + t) for t in [0, 1], accurate for small t: log(u) · t / (u - 1) with u = 1 + t cancels
// the rounding of u (Goldberg); t itself when u rounds to 1.
inline compiler::Val log1p_small(compiler::Scope& s, const compiler::Val& t) {
  namespace cc = compiler;
  cc::Val u = s.let(1.0f + t, "u");
  return cc::select(u == 1.0f, t, cc::log(u) * (t / (u - 1.0f)));
}

// softplus(x) as the kernels compute it: max(x, 0) + log1p(e^-|x|) (no overflow).
inline compiler::Val softplus_of(compiler::Scope& s, const compiler::Val& x) {
  namespace cc = compiler;
  cc::Val t = s.let(cc::exp(-abs_bits(x)), "t");
  return cc::max(x, 0.0f) + log1p_small(s, t);
}

}  // namespace tilerun::kernels
