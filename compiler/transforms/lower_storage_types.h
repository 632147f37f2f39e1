// Pass: loads and stores move storage bits, conversions become explicit IR. bf16/f16 elements
// are i16 bits converted to/from f32 by strict_math.h (round to nearest even); u8 is i8 bits
// zero-extended to i32 and truncated back. f32 stores to global memory canonicalise NaN, so the
// outputs' bits never depend on the hardware's NaN payload rules.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel lower_storage_types(const SimtKernel& kernel);

}  // namespace tilerun::compiler
