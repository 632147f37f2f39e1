#include "compiler/ir/layout_index.h"

#include <algorithm>
#include <numeric>

#include "compiler/base/check.h"

namespace tilerun::compiler {

Expr layout_index(const Layout& l, const std::vector<Expr>& coords, const Expr& outer) {
  TR_CHECK(coords.size() == l.shape.size(), "layout_index: one coordinate per mode");
  std::vector<size_t> order(l.shape.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Decreasing stride; ties (size-1 modes) keep mode order, so the result is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return l.stride[a] > l.stride[b]; });
  if (is_compact(l)) {
    Expr acc = outer;
    for (size_t m : order) {
      if (l.shape[m] == 1) continue;
      acc = acc.defined() ? add(mul(acc, make_i64(l.shape[m])), coords[m]) : coords[m];
    }
    return acc.defined() ? acc : make_i64(0);
  }
  Expr acc = outer.defined() ? mul(outer, make_i64(l.size())) : Expr();
  for (size_t m : order) {
    if (l.shape[m] == 1) continue;
    Expr term = l.stride[m] == 1 ? coords[m] : mul(coords[m], make_i64(l.stride[m]));
    acc = acc.defined() ? add(acc, term) : term;
  }
  return acc.defined() ? acc : make_i64(0);
}

}  // namespace tilerun::compiler
