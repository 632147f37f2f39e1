// SIMT IR → LLVM IR for the CPU backend (internal to cpu_backend.cc and dump.cc).
//
// The emitted function runs a range of blocks:
//   void tilerun_kernel(void** buffers, const int64_t* dims, const double* scalars,
//                       const int64_t* grid /*[3]*/, int64_t block_begin, int64_t block_end)
// Per block, each maximal barrier-free stretch of the body becomes one loop over the block's
// threads; barriers are the boundaries between those loops, so they cost nothing. Loops and
// lets that contain barriers stay at block level, outside the thread loops (the verifier
// guarantees they are block-uniform). Values that live across a barrier — locals and local
// arrays — sit in per-thread slots. Slots and shared memory are stack allocations of the
// function, reused block after block: unlike a heap buffer, LLVM knows they alias neither each
// other nor the tensors, so it keeps a fragment element in a register through an inner loop.
#pragma once

#include <cstdint>
#include <memory>

#include "compiler/ir/kernel.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tilerun::compiler {

inline constexpr const char* kCpuEntryName = "tilerun_kernel";

using CpuEntry = void (*)(void** buffers, const int64_t* dims, const double* scalars,
                          const int64_t* grid, int64_t block_begin, int64_t block_end);

// Shared memory plus per-thread slots a block may use on the CPU (they live on the stack of the
// launching thread); beyond it compile_cpu throws tilerun::Error. Far above what a GPU allows.
inline constexpr int64_t kCpuBlockStorageLimit = 2 << 20;

struct CpuModule {
  CpuModule();
  CpuModule(CpuModule&&) noexcept;
  ~CpuModule();
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  int64_t block_storage_bytes = 0;  // shared arrays + per-thread slots
};

// A verified, target-independent module (no triple or data layout yet). tilerun::Error when the
// kernel needs more than kCpuBlockStorageLimit bytes of block storage.
CpuModule codegen_cpu(const SimtKernel& kernel);

}  // namespace tilerun::compiler
