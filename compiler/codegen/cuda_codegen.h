// The CUDA backend: SIMT IR → readable, self-contained CUDA C++ (no #include, so the text is
// the kernel's whole identity) → NVRTC → sm_90a cubin. The host side of a launch (the packed
// parameter block) is launch_abi.h; the grid comes from launch_geometry.h.
//
// Strict numerics, bit-identical to the CPU backend (cpu_codegen.cc): every f32 +, −, ×, ÷ is
// an explicit round-to-nearest intrinsic (__fadd_rn, ...: never contracted), fma is __fmaf_rn,
// sqrt __fsqrt_rn; no libdevice math (exp, log, ... arrive expanded by expand_strict_math, and
// any that survive are expanded here from the same strict_math.h routines); integer + − × and
// shifts wrap (done in unsigned types, never signed overflow); / and % are floor division and
// modulo; f32 → int truncates, saturates and sends NaN to 0 (llvm.fptosi.sat on the CPU);
// negation flips the sign bit. Compiled with strict_nvrtc_options() (--fmad=false, IEEE div
// and sqrt, no flush-to-zero).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/launch_abi.h"
#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

// The entry point's symbol for a kernel named `kernel_name`: "tilerun_" + the name with every
// character outside [A-Za-z0-9_] replaced by '_', plus "_" + 8 hex digits of the name's
// SHA-256 when anything was replaced (so distinct names stay distinct). The prefix keeps a
// kernel called "exp" or "sqrt" apart from CUDA's own declarations.
std::string cuda_kernel_symbol(const std::string& kernel_name);

// The CUDA C++ source of one kernel: a fixed prelude of helpers, then
//   extern "C" __global__ void __launch_bounds__(threads) <symbol>(buffers..., dims..., scalars...)
// with buffers as `T* __restrict__` of their storage type (const for inputs), dims as
// `long long`, scalars as float / int / long long. Deterministic: the same kernel always gives
// the same bytes. Every IR name becomes a sanitised, function-unique identifier. Expects
// complete SIMT IR (lower.h). Shared arrays of more than 48 KiB in all live in one dynamic
// window (cuda_dynamic_shared_bytes); more than 227 KiB is a tilerun::Error.
std::string emit_cuda(const SimtKernel& kernel);

// Where each shared array (in kernel.shared's order) starts in the block's shared memory:
// 16-byte aligned, 1024 for a swizzled tile (the hardware swizzles addresses).
std::vector<int64_t> shared_offsets(const SimtKernel& kernel);
// The dynamic shared memory a launch of `kernel` must pass and its function must be allowed
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): 0 when its arrays fit statically (48 KiB).
int64_t cuda_dynamic_shared_bytes(const SimtKernel& kernel);

struct CudaBinary {
  std::string name;            // the entry point's symbol, for cuModuleGetFunction
  std::string source;          // emit_cuda's text
  std::string cubin;           // the sm_90a image for cuModuleLoadData
  int64_t dynamic_shared = 0;  // cuda_dynamic_shared_bytes: the launch's shared memory bytes
  std::vector<TensorMapParam> tensor_maps;  // launch_abi.h: encoded at bind, after the scalars
  bool from_cache = false;
  double compile_ms = 0;  // NVRTC time (0 when from the cache)
  std::string log;        // NVRTC's log (ptxas' remarks), "" when from the cache
};

// Emits and compiles through compile_cubin with strict_nvrtc_options(), behind the on-disk
// cache in `cache_dir` ("" = no cache). Throws tilerun::Error with NVRTC's log on failure.
CudaBinary compile_cuda(const SimtKernel& kernel, const std::string& cache_dir);
// Lowers (lower.h) first.
CudaBinary compile_cuda(const Kernel& kernel, const std::string& cache_dir);

}  // namespace tilerun::compiler
