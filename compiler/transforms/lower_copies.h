// Pass: each copy(dst, src) becomes a parallel loop over the box, with the guard that gives
// copies their meaning at ragged edges: global elements outside the tensor read as 0 and are
// not written. (Tile IR → Tile IR; Z3 analysis later drops guards it proves redundant.)
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

Kernel lower_copies(const Kernel& kernel);

}  // namespace tilerun::compiler
