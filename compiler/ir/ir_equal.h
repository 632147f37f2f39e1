// Structural equality of IR: same node kinds, types, names, constants (floats bit for bit) and
// children, recursively, up to how far a let's scope reaches (Seq{let x = v in A, B} equals
// let x = v in Seq{A, B}: one text, one meaning, since names are unique). The round-trip
// tests' notion of "the parsed kernel is the kernel".
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

bool equal(const Expr& a, const Expr& b);
bool equal(const Stmt& a, const Stmt& b);
bool equal(const Kernel& a, const Kernel& b);
bool equal(const SimtKernel& a, const SimtKernel& b);

}  // namespace tilerun::compiler
