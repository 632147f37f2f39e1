// The launch ABI both backends share: a kernel's run-time arguments in its signature's order,
// the checks every launch passes (CPU and CUDA accept exactly the same calls), and the packed
// parameter block a CUDA launch takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

// Run-time arguments, each list in its parameter order (KernelSignature): one pointer per
// global buffer, one value per dim, one value per scalar (f32/i32/i64 scalars passed as double).
struct KernelArgs {
  std::vector<void*> buffers;
  std::vector<int64_t> dims;
  std::vector<double> scalars;
};

// Checks the counts, the dims (check_dims: bounds and divisibility), that no buffer is null or
// misaligned for its element type, and that integer scalars are whole numbers in range:
// tilerun::Error (kind Runtime) naming the kernel otherwise.
void check_launch_args(const KernelSignature& sig, const KernelArgs& args);

// One kernel's parameter values laid out once in a persistent byte block (each value at its
// natural alignment), with the array of pointers into it that cuLaunchKernel's kernelParams
// takes. Move-only: the pointers stay valid across moves.
class CudaParams {
 public:
  struct Slot {
    std::string name;  // the signature's parameter name
    size_t offset = 0;
    size_t size = 0;  // 8 for pointers, dims and i64 scalars, 4 for f32 and i32 scalars
  };

  CudaParams() = default;
  CudaParams(CudaParams&&) noexcept = default;
  CudaParams& operator=(CudaParams&&) noexcept = default;
  CudaParams(const CudaParams&) = delete;
  CudaParams& operator=(const CudaParams&) = delete;

  void** kernel_params() { return pointers_.data(); }
  const std::vector<Slot>& slots() const { return slots_; }  // buffers, dims, scalars in order
  const std::byte* data() const { return storage_.get(); }
  size_t size_bytes() const { return size_; }

 private:
  friend CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args);
  std::unique_ptr<std::byte[]> storage_;
  size_t size_ = 0;
  std::vector<Slot> slots_;
  std::vector<void*> pointers_;
};

// Packs `args` (buffers as device addresses) in the kernel's parameter order, after
// check_launch_args.
CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args);

}  // namespace tilerun::compiler
