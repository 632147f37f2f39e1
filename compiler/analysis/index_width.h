// Whether a SIMT kernel's index arithmetic fits 32 bits: every i64 value it computes — each
// subexpression, loop variable and its end, let, local, the thread and block indices and the dims
// — proved within [-2^31, 2^31) by interval arithmetic at the dims' bounds (the launch refuses dims
// outside them: launch_geometry.h check_dims). The CUDA backend then computes those values as
// `int` with plain signed operators (cuda_codegen.cc): no value wraps, so the compiler may
// treat them as non-overflowing; a kernel whose tensors may pass 2^31 elements keeps 64-bit math.
// Loads are their type's range, or an index contract's [0, values_below) (kernel.h); an i64 value
// loaded from memory or converted from f32 therefore keeps the kernel at 64 bits.
#pragma once

#include <string>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

struct IndexWidth {
  bool fits_32 = false;
  // When it does not fit: the first i64 value (in program order) that may leave the 32-bit range,
  // with its interval; or the construct the analysis does not bound.
  std::string reason;
};

IndexWidth index_width(const SimtKernel& kernel);

}  // namespace tilerun::compiler
