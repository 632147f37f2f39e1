// Pass: exp, log, tanh, sigmoid, rsqrt and f32 min/max become their strict_math.h expansions,
// so every backend emits exactly the same arithmetic. Afterwards the only calls left are fma
// and sqrt, which are IEEE operations on every target.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel expand_strict_math(const SimtKernel& kernel);

}  // namespace tilerun::compiler
