// Layouts that lowering consumes: a Parallel's thread-value layout (lower_parallel follows the
// Layout object infer_layouts stores) and a shared tile's stated layout (flatten_buffers follows
// it). Each kernel is compared against a plain computation on fresh random inputs.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/ir_equal.h"
#include "compiler/ir/ir_parser.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/layout.h"
#include "compiler/ir/layout_index.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/lower.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

// out[r][c] = in[c][r] for a 32x32 tile per block, staged through a shared tile of `layout`.
Kernel transpose_via(const Layout& layout, const std::string& name) {
  KernelBuilder kb(name);
  Dim b = kb.dim("B");
  Buf in = kb.input("in", DType::F32, {b, 32, 32});
  Buf out = kb.output("out", DType::F32, {b, 32, 32});
  kb.body({b}, 128, [&](Scope& s) {
    Idx blk = s.block_idx(0);
    Buf tile = layout.rank() ? s.alloc_shared("tile", DType::F32, {32, 32}, layout)
                             : s.alloc_shared("tile", DType::F32, {32, 32});
    s.parallel(32, 32, [&](Idx r, Idx c) { tile(r, c) = in(blk, r, c); });
    s.barrier();
    s.parallel(32, 32, [&](Idx r, Idx c) { out(blk, r, c) = tile(c, r); });
  });
  return kb.build();
}

std::vector<float> run_transpose(const Kernel& k, const std::vector<float>& in, int64_t blocks) {
  std::vector<float> out(in.size(), -1.0f);
  auto cpu = compile_cpu(k);
  cpu->launch({{const_cast<float*>(in.data()), out.data()}, {blocks}, {}});
  return out;
}

TEST(TileLayout, SharedTilesFollowTheirLayoutWithTheSameResults) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t blocks = 3;
  std::vector<float> in(blocks * 32 * 32);
  for (float& v : in) v = u(rng);
  std::vector<float> want(in.size());
  for (int64_t b = 0; b < blocks; ++b)
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 32; ++c) want[(b * 32 + r) * 32 + c] = in[(b * 32 + c) * 32 + r];

  // Row-major (none stated), column-major, and rows padded to 33 (the classic bank-conflict fix).
  const std::vector<std::pair<std::string, Layout>> layouts = {
      {"row_major", Layout{}},
      {"col_major", make_layout({32, 32}, {1, 32})},
      {"padded", make_layout({32, 32}, {33, 1})}};
  for (const auto& [name, layout] : layouts) {
    SCOPED_TRACE(name);
    Kernel k = transpose_via(layout, "transpose_" + name);
    EXPECT_EQ(run_transpose(k, in, blocks), want);
    SimtKernel simt = lower(k);
    ASSERT_EQ(simt.shared.size(), 1u);
    EXPECT_EQ(simt.shared[0].size(), layout.rank() ? layout.cosize() : 1024);
    if (layout.rank()) EXPECT_NE(print(k).find("layout " + to_string(layout)), std::string::npos);
    // The text form keeps the layout: parsing gives the same kernel, at both levels.
    Kernel parsed = parse_tile_kernel(print(k), name + ".tile");
    EXPECT_TRUE(equal(parsed, k));
    EXPECT_EQ(print(parsed), print(k));
    EXPECT_EQ(print(parse_simt_kernel(print(simt), name + ".simt")), print(simt));
  }
}

TEST(TileLayout, ALayoutSendingTwoCoordinatesToOneOffsetIsRefused) {
  try {
    transpose_via(make_layout({32, 32}, {1, 1}), "overlapping");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two coordinates share offset"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(transpose_via(make_layout({16, 64}, {64, 1}), "wrong_shape"), Error);
}

TEST(TileLayout, ParallelsCarryTheThreadValueLayoutLoweringFollows) {
  KernelBuilder kb("scale4");
  Dim n = kb.dim("N", {.divisible_by = 1024});
  Buf x = kb.input("x", DType::F32, {n});
  Buf y = kb.output("y", DType::F32, {n});
  kb.body({ceildiv(n, 1024)}, 256, [&](Scope& s) {
    Idx base = s.block_idx(0) * 1024;
    s.annotate_layout(4);
    s.parallel(1024, [&](Idx i) { y(base + i) = x(base + i) * 2.0f; });
  });
  Kernel k = kb.build();
  std::vector<std::pair<std::string, std::string>> trace;
  lower(k, {.trace = &trace});
  // After infer_layouts the Parallel holds (T,W):(W,1); the default is not printed again.
  EXPECT_EQ(thread_value_layout(256, 4), make_layout({256, 4}, {4, 1}));
  EXPECT_EQ(to_string(thread_value_layout(256, 1)), "256:1");
  EXPECT_TRUE(is_compact(thread_value_layout(256, 4)));
  EXPECT_FALSE(is_compact(make_layout({32, 32}, {33, 1})));
  std::string lowered;
  for (const auto& [pass, text] : trace)
    if (pass == "lower_parallel") lowered = text;
  EXPECT_NE(lowered.find("let group.0 = threadIdx.x"), std::string::npos) << lowered;
  EXPECT_NE(lowered.find("(group.0 * 4) + lane.0"), std::string::npos) << lowered;

  // A thread-value layout other than the default, (8,32,4):(128,4,1): thread t0 + 8·t1 holds
  // the 4 values from t0·128 + t1·4. It prints, parses back, and lowering follows it.
  std::vector<std::string> front = {"lower_copies", "lower_reductions", "analyze_accesses",
                                    "infer_layouts"};
  Kernel inferred = std::get<Kernel>(run_passes(k, front));
  EXPECT_EQ(print(inferred).find(" layout "), std::string::npos) << "the default is not printed";
  struct SetTv : IRMutator {
    Stmt mutate_stmt(const Parallel* op, const Stmt&) override {
      ParallelLayout l = op->layout;
      l.tv = make_layout({8, 32, 4}, {128, 4, 1});
      return Parallel::make(op->vars, op->extents, mutate(op->body), l);
    }
  } set_tv;
  Kernel permuted = inferred;
  permuted.body = set_tv.mutate(inferred.body);
  const std::string text = print(permuted);
  ASSERT_NE(text.find("provable 4 layout (8,32,4):(128,4,1)"), std::string::npos) << text;
  Kernel reparsed = parse_tile_kernel(text, "permuted.tile");
  EXPECT_TRUE(equal(reparsed, permuted));
  std::vector<std::string> back;
  bool after = false;
  for (const PassInfo& p : pipeline()) {
    if (after) back.push_back(p.name);
    after = after || std::string(p.name) == "infer_layouts";
  }
  SimtKernel simt = std::get<SimtKernel>(run_passes(reparsed, back));
  EXPECT_NE(print(simt).find("(threadIdx.x % 8)"), std::string::npos) << print(simt);

  std::vector<float> in(4096), out(4096, 0.0f);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : in) v = u(rng);
  compile_cpu(k)->launch({{in.data(), out.data()}, {4096}, {}});
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] * 2.0f) << i;
  std::vector<float> out2(4096, 0.0f);
  compile_cpu(simt)->launch({{in.data(), out2.data()}, {4096}, {}});
  EXPECT_EQ(out2, out);
}

TEST(TileLayout, LayoutIndexIsTheLayoutAsAFunction) {
  // layout_index builds the same function the algebra evaluates, Horner chain or plain sum.
  for (const Layout& l : {make_layout({4, 8}, {8, 1}), make_layout({4, 8}, {1, 4}),
                          make_layout({4, 8}, {9, 1}), make_layout({2, 3, 4}, {12, 4, 1})}) {
    for (int64_t i = 0; i < l.size(); ++i) {
      std::vector<Expr> coords;
      int64_t rest = i;
      std::vector<int64_t> c;
      for (int m = 0; m < l.rank(); ++m) {
        c.push_back(rest % l.shape[m]);
        rest /= l.shape[m];
        coords.push_back(make_i64(c.back()));
      }
      int64_t got;
      ASSERT_TRUE(const_int(layout_index(l, coords, make_i64(3)), &got)) << to_string(l);
      EXPECT_EQ(got, 3 * l.size() + l(c)) << to_string(l) << " " << i;
    }
  }
}

}  // namespace
}  // namespace tilerun::compiler
