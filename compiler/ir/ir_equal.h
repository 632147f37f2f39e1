// Structural equality of IR: same node kinds, types, names, constants (floats bit for bit) and
// children, recursively. The round-trip tests' notion of "the parsed kernel is the kernel".
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

bool equal(const Expr& a, const Expr& b);
bool equal(const Stmt& a, const Stmt& b);
bool equal(const Kernel& a, const Kernel& b);
bool equal(const SimtKernel& a, const SimtKernel& b);

}  // namespace tilerun::compiler
