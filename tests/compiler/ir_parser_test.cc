// The IR's text form read back (ir_parser.h): parse is print's exact inverse — the same bytes and
// a structurally equal kernel — at Tile level and after every pass of the pipeline, over every
// kernel of every shipped config, the compiler's test kernels and random builder programs; and
// a mistake in the text is an error at its line and column.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "compiler/ir/ir_equal.h"
#include "compiler/ir/ir_parser.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/lower.h"
#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "graph/runtime/executor.h"
#include "random_kernels.h"
#include "test_kernels.h"
#include "tilerun/tilerun.h"

namespace tilerun::compiler {
namespace {

// Prints `k`, parses the text at `form` and checks the bytes and the structure; the SIMT form
// guessed without a hint must print the same bytes too.
void expect_round_trip(const AnyKernel& k, IrForm form, const std::string& where) {
  std::string text = std::visit([](const auto& x) { return print(x); }, k);
  SCOPED_TRACE(where + "\n" + text);
  if (form.tile) {
    Kernel parsed = parse_tile_kernel(text, "test.tir");
    EXPECT_EQ(print(parsed), text);
    EXPECT_TRUE(equal(parsed, std::get<Kernel>(k)));
  } else {
    SimtKernel parsed = parse_simt_kernel(text, "test.sir", form.simt);
    EXPECT_EQ(print(parsed), text);
    EXPECT_TRUE(equal(parsed, std::get<SimtKernel>(k)));
    EXPECT_EQ(print(parse_simt_kernel(text, "test.sir")), text);
  }
}

// The kernel as built, then after each pass of the pipeline.
void expect_round_trips_through_pipeline(const Kernel& kernel, const LowerOptions& options = {}) {
  const std::string& name = kernel.sig.name;
  expect_round_trip(kernel, kTileForm, name + " as built");
  AnyKernel ir = kernel;
  for (const PassInfo& p : pipeline()) {
    ir = p.run(ir, options);
    expect_round_trip(ir, p.output, name + " after " + p.name);
  }
}

TEST(IrParser, TestKernelsRoundTripAfterEveryPass) {
  for (Kernel (*make)() : {testing::axpb_kernel, testing::math_kernel, testing::mixed_dtype_kernel,
                           testing::softmax_kernel, testing::rmsnorm_kernel, testing::dgamma_kernel,
                           testing::matmul_kernel, testing::transpose_kernel, testing::int_kernel})
    expect_round_trips_through_pipeline(make());
}

TEST(IrParser, EveryKernelOfEveryShippedConfigRoundTripsAfterEveryPass) {
  std::vector<std::string> configs;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::string(TILERUN_SOURCE_DIR) + "/configs"))
    if (e.path().extension() == ".yaml") configs.push_back(e.path().string());
  std::sort(configs.begin(), configs.end());
  ASSERT_GE(configs.size(), 3u);
  int kernels = 0;
  for (const std::string& path : configs) {
    SCOPED_TRACE(path);
    Model model = load_model(path);
    graph::OpGraph ops = graph::build_forward(model);
    graph::append_backward(model, ops);
    graph::KernelGraph kg = graph::expand(std::move(ops));
    for (size_t k = 0; k < kg.kernels.size(); ++k) {
      // As the session compiles them: with the dims' launch values (concrete proofs can
      // remove guards and pin dims, a form the symbolic run never reaches).
      expect_round_trips_through_pipeline(*kg.kernels[k], graph::lower_options(kg, k));
      ++kernels;
    }
  }
  EXPECT_GT(kernels, 20);
}

TEST(IrParser, RandomBuilderProgramsRoundTripAfterEveryPass) {
  // The spellings that exist only to keep parsing exact must turn up among the programs.
  std::map<std::string, int> spellings = {{"i32((", 0}, {"-(", 0}, {"let ", 0}};
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Kernel k = testing::random_kernel(seed);
    if (seed <= 100)
      expect_round_trips_through_pipeline(k);
    else
      expect_round_trip(k, kTileForm, k.sig.name);
    if (::testing::Test::HasFailure()) return;  // one program's report is enough
    std::string text = print(k);
    for (auto& [s, n] : spellings) n += text.find(s) != std::string::npos;
  }
  for (const auto& [s, n] : spellings) EXPECT_GE(n, 10) << s;
}

TEST(IrParser, ReadsWhatPeopleWrite) {
  // Comments, blank lines and free spacing; types come from declarations and bindings.
  Kernel k = parse_tile_kernel(
      "// a hand-written kernel\n"
      "tile_kernel scale\n  dim N in [1, 1024]\n  input x: bf16[N]\n  output y: f32[N]\n"
      "  scalar a: f32\n  grid [1] threads 32\n"
      "{\n  parallel i in [0, N) {\n    let v = (x[i] * a)\n"
      "    y[i]    =   select((v < 0f), -v, v)\n  }\n}\n",
      "hand.tir");
  EXPECT_EQ(print(k),
            "tile_kernel scale\n  dim N in [1, 1024]\n  input x: bf16[N]\n  output y: f32[N]\n"
            "  scalar a: f32\n  grid [1] threads 32\n"
            "{\n  parallel i in [0, N) {\n    let v = (x[i] * a)\n"
            "    y[i] = select((v < 0f), -v, v)\n  }\n}\n");
  SimtKernel lowered = lower(k);
  EXPECT_EQ(print(lower(parse_tile_kernel(print(k), "again.tir"))), print(lowered));
}

// The message of the Error that parsing `text` throws.
std::string parse_error(const std::string& text, bool simt = false) {
  try {
    if (simt)
      parse_simt_kernel(text, "bad.sir");
    else
      parse_tile_kernel(text, "bad.tir");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

const char* kHeader =
    "tile_kernel k\n  dim N in [1, 64]\n  output y: f32[N]\n  grid [1] threads 32\n";

TEST(IrParser, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0] = (1f + )\n}\n"),
            "bad.tir:6:16: error: expected an expression, found ')'");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0] = q\n}\n"),
            "bad.tir:6:10: error: unknown name 'q'");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  w[0] = 1f\n}\n"),
            "bad.tir:6:3: error: unknown buffer 'w'");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0] = (1f + 2)\n}\n"),
            "bad.tir:6:14: error: '+' of f32 and i64");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0.5f] = 1f\n}\n"),
            "bad.tir:6:5: error: an index is i64, not f32");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0] = 1f\n"),
            "bad.tir:7:1: error: expected '}', found the end of the text");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0] = 1f\n}\nextra\n"),
            "bad.tir:8:1: error: expected the end of the text after the body");
  EXPECT_EQ(parse_error("tile_kernel k\n  dim N in [1, 64]\n  input x: f99[N]\n"),
            "bad.tir:3:12: error: unknown dtype 'f99'");
  EXPECT_EQ(parse_error("tile_kernel k\n  grid [1] threads 32\n{\n  $\n}\n"),
            "bad.tir:4:3: error: unexpected character '$'");
  EXPECT_EQ(parse_error("simt_kernel k\n  var a: f64\n", true),
            "bad.sir:2:10: error: unknown type 'f64' (bool, i8, i16, i32, i64, f32)");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  for i in [0, 4) vectorized {\n  }\n}\n"),
            "no error");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  for i in [0, N) vectorized {\n  }\n}\n"),
            "bad.tir:6:16: error: a vectorized loop has a constant extent");
  // A sorted contract speaks of a 1-d buffer's order.
  EXPECT_EQ(parse_error("tile_kernel k\n  dim N in [1, 64]\n"
                        "  input s: i32[N, N] values in [0, N) sorted\n"),
            "bad.tir:4:1: error: sorted values need a 1-d buffer, 's' has 2 dims");
  EXPECT_EQ(
      parse_error("tile_kernel k\n  dim N in [1, 64]\n  input s: i32[N] values in [0, (N + 1)) "
                  "sorted\n  output y: f32[N]\n  grid [1] threads 32\n{\n}\n"),
      "no error");
  // Hostile nesting is an error, not a stack overflow (fuzz_ir_parser found the crash).
  const std::string deep =
      std::string(kHeader) + "{\n  y[0] = " + std::string(5000, '-') + "1f\n}\n";
  EXPECT_EQ(parse_error(deep), "bad.tir:6:1009: error: nested more than 1000 levels deep");
  EXPECT_EQ(parse_error(std::string(kHeader) + "{\n  y[0] = " + std::string(900, '-') + "1f\n}\n"),
            "no error");
}

}  // namespace
}  // namespace tilerun::compiler
