// Integer index arithmetic in polynomial normal form: monomial (sorted variable names) →
// coefficient, over + - * of variables and constants, lets substituted. What the cheap affine
// proofs (analyze_accesses) and the shared-load vectorizer reason with.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"

namespace tilerun::compiler {

using Poly = std::map<std::vector<std::string>, int64_t>;

// `e` as a polynomial, or false when it has other operations (division, modulo, loads...).
// With `let_atoms`, a let whose value is not a polynomial (k % 2, say) stays a variable of its
// own instead of failing the whole expression.
bool to_poly(const Expr& e, const std::map<std::string, Expr>& lets, Poly* out, int depth = 0,
             bool let_atoms = false);

}  // namespace tilerun::compiler
