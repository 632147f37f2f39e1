#include "graph/runtime/cuda_driver.h"

#include <cuda_runtime_api.h>

#include "tilerun/error.h"

namespace tilerun::graph {

namespace {

struct LoadedDriver {
  CudaDriver driver;
  bool ok = false;
  std::string why;
};

LoadedDriver load() {
  LoadedDriver out;
  CudaDriver& d = out.driver;
  bool missing = false;
#define TILERUN_LOAD(name)                                                                        \
  {                                                                                               \
    void* fn = nullptr;                                                                           \
    cudaDriverEntryPointQueryResult status{};                                                     \
    if (cudaGetDriverEntryPointByVersion(#name, &fn, CUDA_VERSION, cudaEnableDefault, &status) != \
            cudaSuccess ||                                                                        \
        status != cudaDriverEntryPointSuccess || fn == nullptr) {                                 \
      if (!missing) out.why = std::string("CUDA driver lacks ") + #name;                          \
      missing = true;                                                                             \
    }                                                                                             \
    d.name = reinterpret_cast<decltype(d.name)>(fn);                                              \
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
  throw Error(std::string(call) + " failed for " + what + ": " + name + " (" + text + ")",
              ErrorKind::Runtime);
}

}  // namespace tilerun::graph
