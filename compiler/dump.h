// Writes what the compiler made of a kernel, for people and for diffing: <dir>/<name>.tile.txt
// (Tile IR as built), <name>.simt.txt (SIMT IR after the pipeline), <name>.ll (the LLVM IR
// the CPU backend emits, before optimisation) and <name>.cu (the CUDA C++ the GPU backend
// compiles), <name>.proofs.txt (index analysis verdicts, analyze_accesses.h, and the tiles'
// layouts), <name>.passes.txt (the IR after every pass of pipeline(), lower.h). Deterministic text;
// `dir` is created if needed.
#pragma once

#include <string>

#include "compiler/ir/kernel.h"
#include "compiler/lower.h"

namespace tilerun::compiler {

// `options` as the kernel is compiled with (its concrete dims, budgets); trace/report are
// the dump's own.
void dump_kernel(const Kernel& kernel, const std::string& dir, const LowerOptions& options = {});

}  // namespace tilerun::compiler
