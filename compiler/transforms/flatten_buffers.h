// Pass: multi-dimensional loads and stores of global tensors and shared arrays become a single
// row-major element index ((i0 * e1 + i1) * e2 + i2). Local arrays are already 1-d.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel flatten_buffers(const SimtKernel& kernel);

}  // namespace tilerun::compiler
