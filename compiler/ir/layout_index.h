// A layout applied to IR coordinates: the index expression lowering emits for a Parallel's
// thread mapping and for shared tiles, so every layout decision is made once, in the algebra
// (layout.h), and followed here.
#pragma once

#include <vector>

#include "compiler/ir/ir.h"
#include "compiler/ir/layout.h"

namespace tilerun::compiler {

// The offset of `coords` (one I64 expression per mode of `l`) under `l`, plus `outer` times
// l.size() when `outer` is defined (the round of a repeated tile). A compact layout (is_compact)
// becomes a Horner chain over its modes in decreasing stride order, ((outer·s2 + c2)·s1 + c1),
// the form the index analysis and vectorizers read best; any other layout the plain sum of
// coordinate × stride. Size-1 modes contribute nothing.
Expr layout_index(const Layout& l, const std::vector<Expr>& coords, const Expr& outer = Expr());

}  // namespace tilerun::compiler
