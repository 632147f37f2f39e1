#include "compiler/analysis/index_poly.h"

#include <algorithm>

namespace tilerun::compiler {

bool to_poly(const Expr& e, const std::map<std::string, Expr>& lets, Poly* out, int depth,
             bool let_atoms) {
  if (depth > 64) return false;
  if (const IntImm* i = e.as<IntImm>()) {
    if (i->value) (*out)[{}] = i->value;
    return true;
  }
  if (const Var* v = e.as<Var>()) {
    auto it = lets.find(v->name);
    if (it != lets.end()) {
      Poly inner;
      if (to_poly(it->second, lets, &inner, depth + 1, let_atoms)) {
        *out = std::move(inner);
        return true;
      }
      if (!let_atoms) return false;
    }
    (*out)[{v->name}] = 1;
    return true;
  }
  const Binary* b = e.as<Binary>();
  if (!b || !is_int(e.type())) return false;
  Poly x, y;
  if (!to_poly(b->a, lets, &x, depth + 1, let_atoms) ||
      !to_poly(b->b, lets, &y, depth + 1, let_atoms))
    return false;
  Poly r;
  if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub) {
    r = x;
    for (auto& [m, c] : y) r[m] += b->op == BinaryOp::Add ? c : -c;
  } else if (b->op == BinaryOp::Mul) {
    for (auto& [m1, c1] : x)
      for (auto& [m2, c2] : y) {
        std::vector<std::string> m = m1;
        m.insert(m.end(), m2.begin(), m2.end());
        std::sort(m.begin(), m.end());
        r[m] += c1 * c2;
      }
  } else {
    return false;
  }
  for (auto it = r.begin(); it != r.end();) it = it->second == 0 ? r.erase(it) : std::next(it);
  *out = std::move(r);
  return true;
}

}  // namespace tilerun::compiler
