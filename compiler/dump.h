// Writes what the compiler made of a kernel, for people and for diffing: <dir>/<name>.tile.txt
// (Tile IR as built), <name>.simt.txt (SIMT IR after the pipeline), <name>.ll (the LLVM IR
// the CPU backend emits, before optimisation) and <name>.cu (the CUDA C++ the GPU backend
// compiles), <name>.proofs.txt (index analysis verdicts, analyze_accesses.h, and the tiles'
// layouts). Deterministic text; `dir` is created if needed.
#pragma once

#include <string>

#include "compiler/kernel.h"

namespace tilerun::compiler {

void dump_kernel(const Kernel& kernel, const std::string& dir);

}  // namespace tilerun::compiler
