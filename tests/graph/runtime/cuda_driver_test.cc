// The driver is reached at run time: on a machine without libcuda.so.1 the program still runs
// and cuda_driver() says "no CUDA device"; where the driver and a GPU exist it loads.
#include "graph/runtime/cuda_driver.h"
#include "graph/runtime/cupti.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "tilerun/error.h"

namespace tilerun::graph {
namespace {

TEST(CudaDriver, LoadsExactlyWhenTheDriverLibraryExists) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  std::string why;
  const CudaDriver* d = cuda_driver(&why);
  if (lib == nullptr) {
    EXPECT_EQ(d, nullptr);
    EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
    return;
  }
  dlclose(lib);
  if (d == nullptr) {
    EXPECT_NE(why.find("CUDA"), std::string::npos) << why;  // a driver but no usable device
    return;
  }
  int count = 0;
  ASSERT_EQ(d->cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_GT(count, 0);
  EXPECT_NE(d->cuLaunchKernel, nullptr);
  EXPECT_NE(d->cuGraphLaunch, nullptr);
}

TEST(CudaDriver, CheckNamesTheCallAndTheKernel) {
  try {
    cuda_check(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel", "kernel rmsnorm_fwd");
    FAIL() << "cuda_check accepted an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuLaunchKernel failed for kernel rmsnorm_fwd"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), 1);
  }
}

TEST(CudaDriver, AnAttachedToolIsRecognisedFromWhatItExports) {
  for (const char* v :
       {"NV_SANITIZER_INJECTION_PORT_BASE", "NV_SANITIZER_INJECTION_PORT_RANGE_BEGIN",
        "NV_COMPUTE_PROFILER_PERFWORKS_DIR", "NSYS_PROFILING_SESSION_ID", "CUDA_INJECTION64_PATH"})
    ::unsetenv(v);
  EXPECT_EQ(attached_cuda_tool(), "");
  ::setenv("NV_SANITIZER_INJECTION_PORT_BASE", "49152", 1);
  EXPECT_EQ(attached_cuda_tool(), "compute-sanitizer (NV_SANITIZER_INJECTION_PORT_BASE is set)");
  ::unsetenv("NV_SANITIZER_INJECTION_PORT_BASE");
  ::setenv("CUDA_INJECTION64_PATH", "/opt/tool/libinjection.so", 1);
  EXPECT_NE(attached_cuda_tool().find("CUDA_INJECTION64_PATH"), std::string::npos);
  ::setenv("CUDA_INJECTION64_PATH", "", 1);  // set but empty: nothing is injected
  EXPECT_EQ(attached_cuda_tool(), "");
  ::unsetenv("CUDA_INJECTION64_PATH");
}

TEST(CudaDriver, CuptiStepsAsideForAnAttachedSanitizer) {
  ::setenv("NV_SANITIZER_INJECTION_PORT_BASE", "49152", 1);
  std::string why;
  EXPECT_EQ(CuptiKernelTimer::get(&why), nullptr);
  EXPECT_EQ(why,
            "CUPTI stepped aside: compute-sanitizer (NV_SANITIZER_INJECTION_PORT_BASE is set)");
  ::unsetenv("NV_SANITIZER_INJECTION_PORT_BASE");
}

}  // namespace
}  // namespace tilerun::graph
