#include "graph/runtime/cuda_driver.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string_view>

#include "compiler/codegen/fault_injection.h"
#include "tilerun/error.h"

namespace tilerun::graph {

namespace {

// The entry points a test can make fail (compiler/codegen/fault_injection.h), one of each kind
// a session depends on: allocation, module load, graph build and instantiation, launch,
// synchronisation, copies. Each fails with the error the real call gives for that kind.
// clang-format off
#define TILERUN_FAULTABLE_DRIVER_FUNCTIONS(X)                                                 \
  X(cuMemAlloc, CUDA_ERROR_OUT_OF_MEMORY) X(cuModuleLoadData, CUDA_ERROR_INVALID_IMAGE)     \
  X(cuModuleGetFunction, CUDA_ERROR_NOT_FOUND) X(cuStreamCreate, CUDA_ERROR_OUT_OF_MEMORY)  \
  X(cuEventCreate, CUDA_ERROR_OUT_OF_MEMORY) X(cuGraphCreate, CUDA_ERROR_OUT_OF_MEMORY)     \
  X(cuGraphAddKernelNode, CUDA_ERROR_INVALID_VALUE)                                         \
  X(cuGraphInstantiateWithFlags, CUDA_ERROR_INVALID_VALUE)                                  \
  X(cuGraphUpload, CUDA_ERROR_OUT_OF_MEMORY) X(cuLaunchKernel, CUDA_ERROR_LAUNCH_FAILED)    \
  X(cuLaunchKernelEx, CUDA_ERROR_LAUNCH_FAILED) X(cuGraphLaunch, CUDA_ERROR_LAUNCH_FAILED)  \
  X(cuStreamSynchronize, CUDA_ERROR_LAUNCH_FAILED)                                         \
  X(cuCtxSynchronize, CUDA_ERROR_LAUNCH_FAILED)                                            \
  X(cuMemcpyHtoDAsync, CUDA_ERROR_INVALID_VALUE)                                           \
  X(cuMemcpyDtoHAsync, CUDA_ERROR_INVALID_VALUE)
// clang-format on

// The real entry points behind the fault-injecting wrappers.
struct RealCalls {
#define TILERUN_DECLARE_REAL(name, code) decltype(&::name) name = nullptr;
  TILERUN_FAULTABLE_DRIVER_FUNCTIONS(TILERUN_DECLARE_REAL)
#undef TILERUN_DECLARE_REAL
};
RealCalls g_real;

// Set by a wrapper that failed a call on purpose, read (and cleared) by cuda_check on the same
// thread, so the message says the failure was injected.
thread_local bool t_injected = false;

// Puts a wrapper in front of each faultable entry point: disarmed, it costs one atomic load.
void install_fault_wrappers(CudaDriver& d) {
#define TILERUN_WRAP(name, code)          \
  g_real.name = d.name;                   \
  d.name = [](auto... args) -> CUresult { \
    if (compiler::inject_fault(#name)) {  \
      t_injected = true;                  \
      return code;                        \
    }                                     \
    return g_real.name(args...);          \
  };
  TILERUN_FAULTABLE_DRIVER_FUNCTIONS(TILERUN_WRAP)
#undef TILERUN_WRAP
}

struct LoadedDriver {
  CudaDriver driver;
  bool ok = false;
  std::string why;
};

// The ABI version each entry point is asked for: the toolkit's, except where that version
// changed the signature behind the name the headers declare. CUDA 13 hands out
// cuCtxSynchronize_v2(CUcontext) for "cuCtxSynchronize", while cuda.h declares the no-argument
// cuCtxSynchronize(void) (called through the newer pointer, the argument register holds garbage:
// CUDA_ERROR_CONTEXT_IS_DESTROYED on the H200).
int abi_version(const char* name) {
  return std::string_view(name) == "cuCtxSynchronize" ? 12000 : CUDA_VERSION;
}

LoadedDriver load() {
  LoadedDriver out;
  CudaDriver& d = out.driver;
  bool missing = false;
#define TILERUN_LOAD(name)                                                                  \
  {                                                                                         \
    void* fn = nullptr;                                                                     \
    cudaDriverEntryPointQueryResult status{};                                               \
    if (cudaGetDriverEntryPointByVersion(#name, &fn, abi_version(#name), cudaEnableDefault, \
                                         &status) != cudaSuccess ||                         \
        status != cudaDriverEntryPointSuccess || fn == nullptr) {                           \
      if (!missing) out.why = std::string("CUDA driver lacks ") + #name;                    \
      missing = true;                                                                       \
    }                                                                                       \
    d.name = reinterpret_cast<decltype(d.name)>(fn);                                        \
  }
  // Without libcuda.so.1 the runtime cannot even find cuInit: report that plainly.
  void* probe = nullptr;
  cudaDriverEntryPointQueryResult probe_status{};
  cudaError_t err = cudaGetDriverEntryPointByVersion("cuInit", &probe, CUDA_VERSION,
                                                     cudaEnableDefault, &probe_status);
  if (err != cudaSuccess || probe == nullptr) {
    cudaGetLastError();  // clear the runtime's sticky state
    out.why =
        "no CUDA device (no usable CUDA driver: " + std::string(cudaGetErrorString(err)) + ")";
    return out;
  }
  TILERUN_CUDA_DRIVER_FUNCTIONS(TILERUN_LOAD)
#undef TILERUN_LOAD
  if (missing) return out;
  if (d.cuInit(0) != CUDA_SUCCESS) {
    out.why = "no CUDA device (cuInit failed)";
    return out;
  }
  int count = 0;
  if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    out.why = "no CUDA device";
    return out;
  }
  install_fault_wrappers(d);
  out.ok = true;
  return out;
}

}  // namespace

const CudaDriver* cuda_driver(std::string* why) {
  static const LoadedDriver loaded = load();
  if (why) *why = loaded.why;
  return loaded.ok ? &loaded.driver : nullptr;
}

void cuda_check(CUresult result, const char* call, const std::string& what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "";
  if (const CudaDriver* d = cuda_driver()) {
    d->cuGetErrorName(result, &name);
    d->cuGetErrorString(result, &text);
  }
  const bool injected = t_injected;
  t_injected = false;
  throw Error(std::string(call) + " failed for " + what + ": " + name + " (" + text + ")" +
                  (injected ? " [injected by TILERUN_FAULT]" : ""),
              ErrorKind::Runtime);
}

std::string attached_cuda_tool() {
  // What each tool exports to the process it starts (a path's name decides nothing).
  static const struct {
    const char* variable;
    const char* tool;
  } kSigns[] = {
      {"NV_SANITIZER_INJECTION_PORT_BASE", "compute-sanitizer"},
      {"NV_SANITIZER_INJECTION_PORT_RANGE_BEGIN", "compute-sanitizer"},
      {"NV_COMPUTE_PROFILER_PERFWORKS_DIR", "Nsight Compute"},
      {"NSYS_PROFILING_SESSION_ID", "Nsight Systems"},
      {"CUDA_INJECTION64_PATH", "a CUDA injection library"},
  };
  for (const auto& sign : kSigns)
    if (const char* v = std::getenv(sign.variable); v && *v)
      return std::string(sign.tool) + " (" + sign.variable + " is set)";
  return "";
}

}  // namespace tilerun::graph
