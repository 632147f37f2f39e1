// The pipeline as data (lower.h): one table that lower(), its trace, --dump-kernels and
// run_passes all follow, each pass reading what the one before it left.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "compiler/dump.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/lower.h"
#include "test_kernels.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Pipeline, EachPassReadsTheFormThePreviousOneLeft) {
  const std::vector<PassInfo>& passes = pipeline();
  ASSERT_EQ(passes.size(), 12u);
  EXPECT_EQ(passes.front().input, kTileForm);
  EXPECT_EQ(passes.back().output, simt_form(SimtForm::Complete));
  for (size_t i = 1; i < passes.size(); ++i) {
    EXPECT_EQ(passes[i].input, passes[i - 1].output) << passes[i].name;
    EXPECT_EQ(find_pass(passes[i].name), &passes[i]);
    EXPECT_GT(std::string(passes[i].why).size(), 20u) << passes[i].name;
  }
  EXPECT_EQ(find_pass("no_such_pass"), nullptr);
}

TEST(Pipeline, RunningEveryPassByNameIsLower) {
  std::vector<std::string> names;
  for (const PassInfo& p : pipeline()) names.push_back(p.name);
  for (Kernel (*make)() :
       {testing::softmax_kernel, testing::matmul_kernel, testing::mixed_dtype_kernel}) {
    Kernel k = make();
    std::vector<std::pair<std::string, std::string>> by_name, by_lower;
    AnyKernel ir = run_passes(k, names, {.trace = &by_name});
    SimtKernel simt = lower(k, {.trace = &by_lower});
    EXPECT_EQ(print(std::get<SimtKernel>(ir)), print(simt));
    by_lower.erase(by_lower.begin());  // lower() also traces its input
    EXPECT_EQ(by_name, by_lower) << k.sig.name;
  }
}

TEST(Pipeline, RunPassesRefusesUnknownNamesAndTheWrongLevel) {
  Kernel k = testing::axpb_kernel();
  EXPECT_EQ(
      error_of([&] {
        run_passes(k, {"lower_copies", "fold"});
      }),
      "error: unknown pass 'fold'; the passes are: lower_copies, lower_reductions, "
      "analyze_accesses, infer_layouts, lower_parallel, flatten_buffers, "
      "lower_storage_types, vectorize_accesses, vectorize_shared_loads, hoist_copy_invariants, "
      "expand_strict_math, pin_index_width");
  EXPECT_EQ(error_of([&] { run_passes(k, {"flatten_buffers"}); }),
            "error: pass flatten_buffers reads simt lowered IR: Tile IR where SIMT IR is expected");
  // lower_parallel's output still indexes 2-d buffers with two indices: not flat yet, so
  // lower_storage_types refuses it.
  std::string e = error_of([&] {
    run_passes(testing::matmul_kernel(),
               {"lower_copies", "lower_reductions", "analyze_accesses", "infer_layouts",
                "lower_parallel", "lower_storage_types"});
  });
  EXPECT_EQ(e.rfind("error: pass lower_storage_types reads simt flat IR: ", 0), 0u) << e;
  // A pass whose output fails its verifier: lower_parallel expects copies lowered already.
  EXPECT_EQ(error_of([&] { run_passes(testing::matmul_kernel(), {"lower_parallel"}); }),
            "error: after pass lower_parallel: simt kernel 'matmul': copy in SIMT IR");
}

TEST(Pipeline, DumpWritesTheIrAfterEveryPass) {
  auto dir = std::filesystem::path(::testing::TempDir()) / "tilerun_pipeline_dump_test";
  std::filesystem::remove_all(dir);
  Kernel k = testing::softmax_kernel();
  LowerOptions options;
  options.analysis.concrete = {{"D", 512}, {"T", 4}};
  dump_kernel(k, dir.string(), options);
  std::ifstream in(dir / (k.sig.name + ".passes.txt"));
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::pair<std::string, std::string>> trace;
  lower(k, {.trace = &trace, .analysis = options.analysis});
  std::string want =
      "// replay: tilerun-opt softmax.tile.txt --passes=PASS,... --dims D=512,T=4\n"
      "// ---- input (tile)\n" +
      trace[0].second;
  for (size_t i = 0; i < pipeline().size(); ++i)
    want += std::string("// ---- after ") + pipeline()[i].name + " (" +
            form_name(pipeline()[i].output) + ")\n" + trace[i + 1].second;
  EXPECT_EQ(text.str(), want);
}

}  // namespace
}  // namespace tilerun::compiler
