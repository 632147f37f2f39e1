// The CPU backend: SIMT IR → LLVM IR → machine code through ORC LLJIT, and a launcher that runs
// the grid on the calling thread, block after block (deterministic; blocks are independent).
// Strict numerics: no fast-math flags, no FMA contraction (only the IR's explicit fma), IEEE
// division and sqrt, denormals kept. The object code is cached on disk (default_cache_dir(),
// folder cpu-object-v1, sealed entries as in disk_cache.h) under the SHA-256 of the LLVM
// version, the host target and the unoptimised IR: a hit skips optimisation and codegen.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/launch_abi.h"
#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

class CpuKernelImpl;

class CpuKernel {
 public:
  explicit CpuKernel(std::unique_ptr<CpuKernelImpl> impl);
  ~CpuKernel();
  // Checks the arguments (check_launch_args: the same checks as a CUDA launch), then runs the
  // whole grid.
  void launch(const KernelArgs& args) const;
  // Wall time of LLVM codegen + optimisation + JIT linking for this kernel.
  double compile_ms() const;
  // Whether the object code came from the on-disk cache.
  bool from_cache() const;
  const KernelSignature& signature() const;
  // The LLVM IR as emitted (before optimisation): deterministic text.
  const std::string& llvm_ir() const;

 private:
  std::unique_ptr<CpuKernelImpl> impl_;
};

// Lowers (lower.h) and JIT-compiles. Dims are run-time arguments: one binary serves every shape.
std::unique_ptr<CpuKernel> compile_cpu(const Kernel& kernel);
std::unique_ptr<CpuKernel> compile_cpu(const SimtKernel& kernel);

// The LLVM IR text compile_cpu would emit, without compiling it (for dumps and tests).
std::string emit_llvm_ir(const SimtKernel& kernel);

}  // namespace tilerun::compiler
