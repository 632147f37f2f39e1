// The IR's text forms: one stable notation, and deterministic lowering — building and lowering
// the same kernel twice gives byte-identical Tile IR, SIMT IR and LLVM IR.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/dump.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/lower.h"
#include "test_kernels.h"

namespace tilerun::compiler {
namespace {

using KernelFactory = Kernel (*)();
const std::vector<std::pair<const char*, KernelFactory>>& all_kernels() {
  static const std::vector<std::pair<const char*, KernelFactory>> kernels = {
      {"axpb", testing::axpb_kernel},          {"math", testing::math_kernel},
      {"mixed", testing::mixed_dtype_kernel},  {"softmax", testing::softmax_kernel},
      {"rmsnorm", testing::rmsnorm_kernel},    {"dgamma", testing::dgamma_kernel},
      {"matmul", testing::matmul_kernel},      {"int", testing::int_kernel},
      {"transpose", testing::transpose_kernel}};
  return kernels;
}

TEST(IrText, LoweringTwiceGivesByteIdenticalText) {
  for (const auto& [name, make] : all_kernels()) {
    Kernel a = make(), b = make();
    EXPECT_EQ(print(a), print(b)) << name;
    SimtKernel sa = lower(a), sb = lower(b);
    EXPECT_EQ(print(sa), print(sb)) << name;
    EXPECT_EQ(emit_llvm_ir(sa), emit_llvm_ir(sb)) << name;
  }
}

TEST(IrText, TileIrNotation) {
  std::string text = print(testing::rmsnorm_kernel());
  EXPECT_EQ(text,
            "tile_kernel rmsnorm_fwd\n"
            "  dim T in [1, 2147483647]\n"
            "  dim D in [1, 65536]\n"
            "  input x: f32[T, D]\n"
            "  input gamma: f32[D]\n"
            "  output y: f32[T, D]\n"
            "  scalar eps: f32\n"
            "  grid [T] threads 128\n"
            "{\n"
            "  let sum.1 = reduce_sum r.0 in [0, D) of (x[blockIdx.x, r.0] * x[blockIdx.x, r.0])\n"
            "  parallel i.2 in [0, D) {\n"
            "    y[blockIdx.x, i.2] = ((x[blockIdx.x, i.2] * rsqrt(((sum.1 / f32(D)) + eps))) * "
            "gamma[i.2])\n"
            "  }\n"
            "}\n");
}

TEST(IrText, SimtIrShowsTheThreadMappingAndBarriers) {
  std::string text = print(lower(testing::matmul_kernel()));
  // The K loop stays block-level with its two barriers; parallel loops are gone.
  EXPECT_NE(text.find(" in [0, ((K + 7) / 8)) {\n    for it."), std::string::npos) << text;
  EXPECT_NE(text.find("barrier"), std::string::npos);
  EXPECT_EQ(text.find("parallel"), std::string::npos);
  EXPECT_NE(text.find("threadIdx.x"), std::string::npos);
  EXPECT_NE(text.find("local acc: f32[4]"), std::string::npos) << text;  // 16*16 / 64 threads
  EXPECT_NE(text.find("shared As: f32[16, 8]"), std::string::npos);
}

TEST(IrText, LlvmIrIsStrict) {
  std::string ll = emit_llvm_ir(lower(testing::matmul_kernel()));
  EXPECT_NE(ll.find("@llvm.fma.f32"), std::string::npos);
  for (const char* flag : {" fast ", " contract ", " reassoc ", " afn ", " nnan ", " ninf "})
    EXPECT_EQ(ll.find(flag), std::string::npos) << flag;
}

TEST(IrText, TraceListsEveryPassInPipelineOrder) {
  std::vector<std::pair<std::string, std::string>> trace;
  lower(testing::softmax_kernel(), {.trace = &trace});
  std::vector<std::string> names;
  for (const auto& [pass, text] : trace) names.push_back(pass);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "input", "lower_copies", "lower_reductions", "analyze_accesses",
                       "infer_layouts", "lower_parallel", "flatten_buffers", "lower_storage_types",
                       "vectorize_accesses", "vectorize_shared_loads", "hoist_copy_invariants",
                       "expand_strict_math", "pin_index_width"}));
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(IrText, DumpWritesTheThreeLevels) {
  auto dir = std::filesystem::path(::testing::TempDir()) / "tilerun_dump_test";
  std::filesystem::remove_all(dir);
  Kernel k = testing::matmul_kernel();
  dump_kernel(k, dir.string());
  EXPECT_EQ(read(dir / "matmul.tile.txt"), print(k));
  EXPECT_EQ(read(dir / "matmul.simt.txt"), print(lower(k)));
  EXPECT_EQ(read(dir / "matmul.ll"), emit_llvm_ir(lower(k)));
  std::string first = read(dir / "matmul.ll");
  dump_kernel(testing::matmul_kernel(), dir.string());
  EXPECT_EQ(read(dir / "matmul.ll"), first);
}

// proofs.txt says which index width the kernel's buffers need: at the model's dims when the
// caller pins them (a [M, K] a of 50000 x 50000 is 2.5e9 elements: 64-bit; 1000 x 1000 fits 32
// bits), else at the dims' upper bounds (2^31 - 1 rows of K columns: 64-bit); and which width
// the CUDA code computes its index values in (pin_index_width: 32 bits at the small shape).
TEST(IrText, ProofsReportTheIndexWidthTheBuffersNeed) {
  auto dir = std::filesystem::path(::testing::TempDir()) / "tilerun_index_width_test";
  auto line_of = [&](const std::map<std::string, int64_t>& dims, const std::string& head) {
    std::filesystem::remove_all(dir);
    LowerOptions options;
    options.analysis.concrete = dims;
    dump_kernel(testing::matmul_kernel(), dir.string(), options);
    std::string text = read(dir / "matmul.proofs.txt");
    size_t at = text.find(head);
    EXPECT_NE(at, std::string::npos) << text;
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  auto width_line = [&](const std::map<std::string, int64_t>& dims) {
    return line_of(dims, "index width: ");
  };
  auto math_line = [&](const std::map<std::string, int64_t>& dims) {
    return line_of(dims, "index math: ");
  };
  EXPECT_EQ(math_line({{"M", 1000}, {"N", 64}, {"K", 1000}}),
            "index math: 32-bit on the GPU (every i64 value proved within [-2^31, 2^31) at the "
            "dims' bounds), 64-bit on the CPU");
  EXPECT_EQ(math_line({{"M", 50000}, {"N", 64}, {"K", 50000}}).rfind("index math: 64-bit ('", 0),
            0u);
  EXPECT_EQ(math_line({}).rfind("index math: 64-bit (", 0), 0u);
  std::string small = width_line({{"M", 1000}, {"N", 64}, {"K", 1000}});
  EXPECT_NE(small.find("32-bit offsets would do"), std::string::npos) << small;
  EXPECT_NE(small.find("the model's dims"), std::string::npos) << small;
  std::string large = width_line({{"M", 50000}, {"N", 64}, {"K", 50000}});
  EXPECT_NE(large.find("64-bit offsets needed"), std::string::npos) << large;
  EXPECT_NE(large.find("largest 'a', 2.5e+09 elements"), std::string::npos) << large;
  std::string bounds = width_line({});
  EXPECT_NE(bounds.find("64-bit offsets needed"), std::string::npos) << bounds;
  EXPECT_NE(bounds.find("the dims' upper bounds"), std::string::npos) << bounds;
}

}  // namespace
}  // namespace tilerun::compiler
