// NVRTC compilation needs no GPU: cubins are byte-identical across compilations, the disk cache
// returns them without compiling, and a broken kernel reports its name and NVRTC's log.
#include "compiler/codegen/nvrtc.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

std::string scratch_dir() {
  std::random_device rd;
  auto dir = std::filesystem::temp_directory_path() /
             ("tilerun-nvrtc-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A fresh constant each run, so the cache can never answer the first compile.
std::string axpy_source(unsigned salt) {
  return "extern \"C\" __global__ void axpy(float* y, const float* x, float a, int n) {\n"
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) y[i] = a * x[i] + y[i] + " +
         std::to_string(salt) + ".0f;\n}\n";
}

// Two partial sums in turn on the tensor core (matmul_fp8's pipeline): each gemm is left running
// (wait_group 1) while the other partial is read. With the second gemm still running across the
// loop's back edge, ptxas cannot tell that nothing reads its registers and serializes every
// wgmma (remark C7514); waiting for it at the end of the pair lets the gemms overlap. The log
// of a successful compile keeps the remark, so configs_cubin_test can refuse it.
std::string two_partials_source(bool wait_at_end_of_pair) {
  return std::string(
             "#define WG(P) asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\"); \\\n"
             "  asm volatile(\"{ .reg .pred p; setp.ne.b32 p, %6, 0; "
             "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, "
             "1; }\" \\\n"
             "    : \"+f\"(P[0]), \"+f\"(P[1]), \"+f\"(P[2]), \"+f\"(P[3]) : \"l\"(da), "
             "\"l\"(db), \"r\"(1)); \\\n"
             "  asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
             "#define WAIT(N) asm volatile(\"wgmma.wait_group.sync.aligned \" #N \";\" ::: "
             "\"memory\");\n"
             "extern \"C\" __global__ void two_partials(float* y, int steps, unsigned long long "
             "da, unsigned long long db) {\n"
             "  float acc[4] = {0, 0, 0, 0}, p0[4] = {0, 0, 0, 0}, p1[4] = {0, 0, 0, 0};\n"
             "  for (int j = 0; j < steps; ++j) {\n"
             "    WG(p0) WAIT(1)\n"
             "    for (int i = 0; i < 4; ++i) acc[i] += p1[i];\n"
             "    WG(p1) WAIT(1)\n"
             "    for (int i = 0; i < 4; ++i) acc[i] += p0[i];\n") +
         (wait_at_end_of_pair ? "    WAIT(0)\n" : "") +
         "  }\n"
         "  WAIT(0)\n"
         "  for (int i = 0; i < 4; ++i) y[threadIdx.x * 4 + i] = acc[i] + p1[i];\n"
         "}\n";
}

TEST(Nvrtc, LogKeepsPtxasRemarkOfSerializedGemms) {
  CubinResult across =
      compile_cubin("two_partials", two_partials_source(false), strict_nvrtc_options(), "");
  CubinResult waited =
      compile_cubin("two_partials", two_partials_source(true), strict_nvrtc_options(), "");
  EXPECT_NE(across.log.find("C7514"), std::string::npos) << across.log;
  EXPECT_EQ(waited.log.find("C7514"), std::string::npos) << waited.log;
  EXPECT_FALSE(waited.cubin.empty());
}

TEST(Nvrtc, IdenticalCubinsAndCacheHits) {
  std::string src = axpy_source(std::random_device{}() % 100000);
  CubinResult a = compile_cubin("axpy", src, strict_nvrtc_options(), "");
  CubinResult b = compile_cubin("axpy", src, strict_nvrtc_options(), "");
  ASSERT_FALSE(a.cubin.empty());
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_FALSE(a.from_cache);
  EXPECT_EQ(a.cubin.substr(0, 4), std::string("\x7f"
                                              "ELF"));

  std::string dir = scratch_dir();
  CubinResult c = compile_cubin("axpy", src, strict_nvrtc_options(), dir);
  CubinResult d = compile_cubin("axpy", src, strict_nvrtc_options(), dir);
  EXPECT_FALSE(c.from_cache);
  EXPECT_TRUE(d.from_cache);
  EXPECT_EQ(c.cubin, a.cubin);
  EXPECT_EQ(d.cubin, a.cubin);
  std::filesystem::remove_all(dir);
}

TEST(Nvrtc, CompileErrorNamesTheKernelAndShowsTheLog) {
  try {
    compile_cubin("broken_kernel", "extern \"C\" __global__ void k() { undeclared_thing(); }",
                  strict_nvrtc_options(), "");
    FAIL() << "a broken kernel compiled";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("broken_kernel"), std::string::npos) << m;
    EXPECT_NE(m.find("undeclared_thing"), std::string::npos) << m;
    EXPECT_EQ(e.exit_code(), 1);
  }
}

}  // namespace
}  // namespace tilerun::compiler
