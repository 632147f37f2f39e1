// Well-formedness of Tile IR: names bound before use, buffers indexed with their rank and
// type, outputs-only stores to globals, barriers and reductions only at block level,
// fragments only inside parallel loops. A violation is a kernel author's mistake, reported as
// tilerun::Error naming the kernel; run after the builder and after every Tile IR pass.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

void verify_tile(const Kernel& kernel);

}  // namespace tilerun::compiler
