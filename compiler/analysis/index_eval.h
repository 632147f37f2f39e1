// Evaluates an i64 index expression over named integer values on the host — how launchers turn
// a kernel's grid (expressions over dims) into block counts.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "compiler/ir/ir.h"

namespace tilerun::compiler {

// Integer arithmetic (+ - * floor-/ floor-% min max), constants and bound names only.
int64_t eval_index(const Expr& e, const std::map<std::string, int64_t>& values);

}  // namespace tilerun::compiler
