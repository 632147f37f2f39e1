// The CUDA driver API, reached at run time. tilerun never links -lcuda: machines without a GPU
// have no libcuda.so.1, and the binary must still start there and say "no CUDA device". Entry
// points come from cudaGetDriverEntryPointByVersion of the static CUDA runtime.
#pragma once

#include <cuda.h>

#include <string>

namespace tilerun::graph {

// One member per driver entry point we use, typed from cuda.h's own prototypes.
// clang-format off
#define TILERUN_CUDA_DRIVER_FUNCTIONS(X)                                                   \
  X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)             \
  X(cuCtxSynchronize) X(cuGetErrorString) X(cuGetErrorName)                               \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute)      \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                                          \
  X(cuLaunchKernel) X(cuLaunchKernelEx)                                                   \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH)             \
  X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)         \
  X(cuMemsetD8) X(cuMemsetD8Async)                                                        \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                             \
  X(cuCtxGetStreamPriorityRange)                                                          \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)               \
  X(cuEventElapsedTime)                                                                   \
  X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddMemsetNode)      \
  X(cuGraphAddDependencies) X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy)          \
  X(cuGraphLaunch) X(cuGraphUpload) X(cuGraphKernelNodeSetAttribute)                      \
  X(cuTensorMapEncodeTiled)
// clang-format on

struct CudaDriver {
#define TILERUN_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  TILERUN_CUDA_DRIVER_FUNCTIONS(TILERUN_DECLARE_MEMBER)
#undef TILERUN_DECLARE_MEMBER
};

// The driver with cuInit done and at least one device, or nullptr; `why` says why not
// ("no CUDA driver (libcuda.so.1 not found)", "no CUDA device", ...). Loaded once, thread-safe.
const CudaDriver* cuda_driver(std::string* why = nullptr);

// Throws tilerun::Error (kind Runtime) "CALL failed for WHAT: CUDA_ERROR_X (message)" unless
// result is CUDA_SUCCESS. The allocation, module load, graph, launch, synchronisation and copy
// entry points of cuda_driver() fail on purpose where a test armed TILERUN_FAULT
// (compiler/codegen/fault_injection.h); the message then says so.
void cuda_check(CUresult result, const char* call, const std::string& what);

// The tool attached to the CUDA driver of this process (compute-sanitizer, Nsight Compute or
// Systems, any CUDA injection library), from the variables it exports to the process it starts,
// e.g. "compute-sanitizer (NV_SANITIZER_INJECTION_PORT_BASE is set)"; "" when none. Profiling
// (CUPTI) steps aside for it: two tools subscribed to one driver is unsupported.
std::string attached_cuda_tool();

}  // namespace tilerun::graph
