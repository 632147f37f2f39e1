// CI without a GPU: every kernel of every shipped config compiles to an sm_90a cubin through
// NVRTC, and two compilations give byte-identical cubins (and identical CUDA source).
// TILERUN_CUBIN_REPEATS=N compiles each N times instead: NVRTC 13.0's PTX can depend on where its
// heap lies (its load vectoriser merged a row's 8 adjacent bf16 shared loads one way or another
// from one compilation to the next, bench/RESULTS.md, thirty-fifth session), which two
// compilations catch only now and then.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "compiler/codegen/cuda_codegen.h"
#include "compiler/ir/kernel.h"
#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

std::vector<std::string> shipped_configs() {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::string(TILERUN_SOURCE_DIR) + "/configs"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

int repeats() {
  const char* env = std::getenv("TILERUN_CUBIN_REPEATS");
  return env != nullptr ? std::max(2, std::atoi(env)) : 2;
}

TEST(ConfigsToCubin, EveryKernelCompilesDeterministically) {
  std::vector<std::string> configs = shipped_configs();
  ASSERT_FALSE(configs.empty());
  for (const std::string& path : configs) {
    SCOPED_TRACE(path);
    Model model = load_model(path);
    graph::OpGraph ops = graph::build_forward(model);
    graph::append_backward(model, ops);
    graph::KernelGraph kg = graph::expand(std::move(ops));
    ASSERT_FALSE(kg.kernels.empty());
    for (const auto& kernel : kg.kernels) {
      compiler::CudaBinary a = compiler::compile_cuda(*kernel, "");
      for (int i = 1; i < repeats(); ++i) {
        compiler::CudaBinary b = compiler::compile_cuda(*kernel, "");
        EXPECT_EQ(a.source, b.source) << kernel->sig.name;
        EXPECT_EQ(a.cubin, b.cubin) << kernel->sig.name << " (compilation " << i + 1 << ")";
      }
      EXPECT_EQ(a.cubin.substr(0, 4), std::string("\x7f"
                                                  "ELF"))
          << kernel->sig.name;
      // ptxas serializes a kernel's every wgmma when it cannot see that no other instruction
      // touches a running gemm's accumulator (remark C7514): the kernel is then correct but
      // loses the tensor core's overlap, which no GPU test would notice.
      EXPECT_EQ(a.log.find("C7514"), std::string::npos) << kernel->sig.name << ":\n" << a.log;
      std::printf("%-32s %8zu bytes of cubin, NVRTC %.0f ms\n", kernel->sig.name.c_str(),
                  a.cubin.size(), a.compile_ms);
    }
  }
}

}  // namespace
}  // namespace tilerun
