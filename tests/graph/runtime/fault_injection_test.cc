// Injected failures of the compilers a session depends on (NVRTC, LLVM's JIT) give a clear
// tilerun::Error naming the call and the kernel, leave nothing half-written behind, and the next
// attempt works. Needs no GPU (the driver's faults are in tests/cuda/fault_gpu_test.cc).
#include "compiler/codegen/fault_injection.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "compiler/codegen/nvrtc.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

namespace fs = std::filesystem;

class FaultInjection : public ::testing::Test {
 protected:
  void TearDown() override { compiler::set_faults(""); }
};

Model tiny() { return load_model(std::string(TILERUN_SOURCE_DIR) + "/configs/tiny.yaml"); }

std::string source(const std::string& name, unsigned salt) {
  return "extern \"C\" __global__ void " + name + "(float* y) { y[0] = " + std::to_string(salt) +
         ".0f; }\n";
}

TEST_F(FaultInjection, FailsExactlyTheNthCallOfTheNamedKind) {
  compiler::set_faults("cuMemAlloc:3,cuLaunchKernelEx:1");
  std::vector<bool> alloc;
  for (int i = 0; i < 5; ++i) alloc.push_back(compiler::inject_fault("cuMemAlloc"));
  EXPECT_EQ(alloc, (std::vector<bool>{false, false, true, false, false}));
  EXPECT_FALSE(compiler::inject_fault("cuModuleLoadData"));
  EXPECT_TRUE(compiler::inject_fault("cuLaunchKernelEx"));
  EXPECT_FALSE(compiler::inject_fault("cuLaunchKernelEx"));
  EXPECT_EQ(compiler::injected_faults(), 2);
  // Re-arming resets the counts; an empty spec disarms.
  compiler::set_faults("cuMemAlloc:1");
  EXPECT_TRUE(compiler::inject_fault("cuMemAlloc"));
  compiler::set_faults("");
  EXPECT_FALSE(compiler::inject_fault("cuMemAlloc"));
  EXPECT_EQ(compiler::injected_faults(), 0);
}

TEST_F(FaultInjection, MalformedSpecsAreRefused) {
  for (const char* bad :
       {"cuMemAlloc", "cuMemAlloc:0", "cuMemAlloc:x", ":1", "cuMemAlloc:1,", "cuMemAlloc:-2"}) {
    EXPECT_THROW(compiler::set_faults(bad), Error) << bad;
  }
  EXPECT_NO_THROW(compiler::set_faults("LLJIT::lookup:2"));  // a call name may hold colons
  EXPECT_FALSE(compiler::inject_fault("LLJIT::lookup"));
  EXPECT_TRUE(compiler::inject_fault("LLJIT::lookup"));
}

TEST_F(FaultInjection, NvrtcFailureNamesTheKernelAndCachesNothing) {
  const std::string dir =
      (fs::temp_directory_path() / ("tilerun-fault-" + std::to_string(std::random_device{}())))
          .string();
  const unsigned salt = std::random_device{}() % 1000000;
  const std::string good = source("fault_first", salt), bad = source("fault_second", salt);
  const auto options = compiler::strict_nvrtc_options();
  compiler::set_faults("nvrtcCompileProgram:2");
  EXPECT_FALSE(compiler::compile_cubin("fault_first", good, options, dir).cubin.empty());
  try {
    compiler::compile_cubin("fault_second", bad, options, dir);
    FAIL() << "the injected NVRTC failure was not reported";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fault_second"), std::string::npos) << m;
    EXPECT_NE(m.find("NVRTC"), std::string::npos) << m;
    EXPECT_NE(m.find("injected"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), 1);
  }
  EXPECT_FALSE(fs::exists(compiler::cubin_cache_path(dir, bad, options)));
  // The next attempt compiles and caches as usual.
  compiler::CubinResult again = compiler::compile_cubin("fault_second", bad, options, dir);
  EXPECT_FALSE(again.from_cache);
  EXPECT_TRUE(compiler::compile_cubin("fault_second", bad, options, dir).from_cache);
  fs::remove_all(dir);
}

TEST_F(FaultInjection, LlvmFailureRefusesTheSessionAndTheNextOneWorks) {
  const uint64_t seed = std::random_device{}();
  compiler::set_faults("LLJIT::lookup:2");
  try {
    Session broken(tiny(), {.device = Device::Cpu, .seed = seed});
    FAIL() << "a session was built around a kernel that failed to compile";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("LLVM failed to compile kernel "), std::string::npos) << m;
    EXPECT_NE(m.find("LLJIT::lookup"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), 1);
  }
  EXPECT_EQ(compiler::injected_faults(), 1);
  compiler::set_faults("");
  Session s(tiny(), {.device = Device::Cpu, .seed = seed});
  s.forward();
  s.backward();
  CheckResult c = s.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " " << c.worst_error;
}

}  // namespace
}  // namespace tilerun
