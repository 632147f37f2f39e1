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
