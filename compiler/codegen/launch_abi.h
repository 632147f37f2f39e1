// The launch ABI both backends share: a kernel's run-time arguments in its signature's order,
// the checks every launch passes (CPU and CUDA accept exactly the same calls), and the packed
// parameter block a CUDA launch takes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
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

// A tensor map a CUDA kernel takes by value after its scalars (ir.h TmaCopy): one per distinct
// (source buffer, box, swizzle) of its tma_copys, in the order they first appear in the body.
// The launcher encodes it from the buffer's address and shape at bind time.
struct TensorMapParam {
  int buffer = 0;            // index into the signature's buffers
  DType dtype = DType::F32;  // the buffer's element type
  std::vector<int64_t> box;  // the box's extents, outermost first
  int swizzle_bytes = 0;     // the tensor core's swizzle of the destination: 32, 64 or 128
  bool operator==(const TensorMapParam&) const = default;
};
// The map one tma_copy of the kernel reads through; and all of them, deduplicated, in order.
TensorMapParam tensor_map_param(const KernelSignature& sig, const TmaCopy& op);
std::vector<TensorMapParam> tensor_map_params(const SimtKernel& kernel);

// The bytes of one encoded tensor map (CUtensorMap: 128 bytes, 64-byte aligned).
using TensorMapBytes = std::array<std::byte, 128>;
// Encodes `map` for a tensor at `address` of `dims` (outermost first, row-major); throws
// tilerun::Error where the driver refuses.
using TensorMapEncoder = std::function<TensorMapBytes(const TensorMapParam& map, void* address,
                                                      const std::vector<int64_t>& dims)>;

// One kernel's parameter values laid out once in a persistent byte block (each value at its
// natural alignment), with the array of pointers into it that cuLaunchKernel's kernelParams
// takes. Move-only: the pointers stay valid across moves.
class CudaParams {
 public:
  struct Slot {
    std::string name;  // the signature's parameter name
    size_t offset = 0;
    size_t size = 0;  // 8 for pointers, dims and i64 scalars, 4 for f32 and i32 scalars, 128
                      // for a tensor map
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
  friend CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args,
                                     const std::vector<TensorMapParam>& maps,
                                     const TensorMapEncoder& encode);
  std::unique_ptr<std::byte[]> storage_;
  size_t size_ = 0;
  std::vector<Slot> slots_;
  std::vector<void*> pointers_;
};

// Packs `args` (buffers as device addresses) in the kernel's parameter order, after
// check_launch_args.
CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args);
// The same followed by the kernel's tensor maps, each encoded by `encode` from its buffer's
// address and shape (evaluated on the dims).
CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args,
                            const std::vector<TensorMapParam>& maps,
                            const TensorMapEncoder& encode);

}  // namespace tilerun::compiler
