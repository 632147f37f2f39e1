// Pass: loads and stores move storage bits, conversions become explicit IR. bf16/f16 elements
// are i16 bits converted to/from f32 by strict_math.h (round to nearest even); the 8-bit floats
// (f8e4m3, f8e5m2, e8m0) are i8 bits converted by narrow_float.h; u8 is i8 bits
// zero-extended to i32 and truncated back. f32 stores to global memory canonicalise NaN, so the
// outputs' bits never depend on the hardware's NaN payload rules.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel lower_storage_types(const SimtKernel& kernel);

}  // namespace tilerun::compiler
