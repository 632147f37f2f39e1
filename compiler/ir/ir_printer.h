// The one text form of the IR, used by dumps, error messages and tests. Deterministic: the same
// IR always prints the same bytes (floats print with 9 significant digits, which round-trips).
#pragma once

#include <string>

#include "compiler/ir/ir.h"
#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

std::string to_string(const Expr& e);
std::string to_string(const Stmt& s, int indent = 0);
// A whole kernel: its signature, storage and body.
std::string print(const Kernel& k);
std::string print(const SimtKernel& k);

}  // namespace tilerun::compiler
