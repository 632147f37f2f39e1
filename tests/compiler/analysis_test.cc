// The index analysis (analyze_accesses.h): unique maps proved, seeded bugs disproved with a
// counterexample replayed here, guards kept or removed, alignment, and a tiny budget.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "compiler/analyze_accesses.h"
#include "compiler/builder.h"
#include "compiler/cpu_backend.h"
#include "compiler/index_eval.h"
#include "compiler/lower.h"
#include "compiler/lower_copies.h"
#include "compiler/lower_reductions.h"
#include "test_kernels.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

AnalysisReport analyze(const Kernel& k, AnalysisOptions o = {}) {
  o.throw_on_race = false;
  AnalysisReport r;
  analyze_accesses(lower_reductions(lower_copies(k)), o, &r);
  return r;
}

const AccessVerdict* find(const AnalysisReport& r, const std::string& q, const std::string& buf) {
  for (const AccessVerdict& v : r.verdicts)
    if (v.question == q && v.buffer == buf) return &v;
  return nullptr;
}

// A store y[f(block, i)] over a parallel of `tile` elements per block: the seeded maps.
Kernel store_map(const std::string& name, int tile, std::function<std::vector<Val>(Idx, Idx)> f,
                 int rank = 1) {
  KernelBuilder kb(name);
  Dim N = kb.dim("N", {.min = 1, .max = 1 << 20, .divisible_by = 64});
  Buf y = kb.output("y", DType::F32, rank == 1 ? std::vector<Val>{N} : std::vector<Val>{N, N});
  kb.body({ceildiv(N, tile)}, 64, [&](Scope& s) {
    Idx b = s.block_idx(0);
    s.parallel(tile, [&](Idx i) {
      std::vector<Val> idx = f(b, i);
      if (rank == 1) {
        s.if_then(idx[0] < N, [&] { y(idx[0]) = 1.0f; });
      } else {
        s.if_then((idx[0] < N) && (idx[1] < N), [&] { y(idx[0], idx[1]) = 1.0f; });
      }
    });
  });
  return kb.build();
}

// Replays a `unique` counterexample: evaluates the store's index map at both coordinates.
void expect_collision_replays(const AccessVerdict& v) {
  std::map<std::string, int64_t> a, b;
  for (auto& [n, x] : v.result.model) {
    auto at = n.find('@');
    if (at == std::string::npos) {
      a[n] = b[n] = x;
    } else {
      (n.substr(at) == "@a" ? a : b)[n.substr(0, at)] = x;
    }
  }
  bool same_coord = true;
  for (auto& [n, x] : a)
    if (b.count(n) && b[n] != x && (n.rfind("blockIdx", 0) == 0 || n.rfind("i.", 0) == 0 ||
                                    n.rfind("j.", 0) == 0))
      same_coord = false;
  EXPECT_FALSE(same_coord) << v.note;
  for (size_t d = 0; d < v.indices.size(); ++d)
    EXPECT_EQ(eval_index(v.indices[d], a), eval_index(v.indices[d], b)) << v.note;
}

TEST(Analysis, KnownUniqueMapsAreProved) {
  struct Case {
    std::string name;
    int tile, rank;
    std::function<std::vector<Val>(Idx, Idx)> f;
  };
  std::vector<Case> cases = {
      {"row_major", 64, 1, [](Idx b, Idx i) { return std::vector<Val>{b * 64 + i}; }},
      {"tiled", 64, 2, [](Idx b, Idx i) { return std::vector<Val>{b * 8 + i / 8, i % 8}; }},
      {"transposed", 64, 2, [](Idx b, Idx i) { return std::vector<Val>{i % 8, b * 8 + i / 8}; }},
      {"swizzled", 64, 2,
       [](Idx b, Idx i) { return std::vector<Val>{b * 8 + i / 8, (i % 8) ^ (i / 8)}; }},
  };
  for (const Case& c : cases) {
    AnalysisReport r = analyze(store_map(c.name, c.tile, c.f, c.rank));
    const AccessVerdict* v = find(r, "unique", "y");
    ASSERT_TRUE(v) << c.name;
    EXPECT_EQ(v->result.outcome, Outcome::Proved) << c.name << "\n" << r.text();
  }
}

TEST(Analysis, SeededBugsAreDisprovedWithAReplayableCounterexample) {
  struct Case {
    std::string name;
    int rank;
    std::function<std::vector<Val>(Idx, Idx)> f;
  };
  std::vector<Case> cases = {
      {"off_by_one_stride", 1, [](Idx b, Idx i) { return std::vector<Val>{b * 63 + i}; }},
      {"missing_block_offset", 1, [](Idx, Idx i) { return std::vector<Val>{i}; }},
      {"overlapping_transpose", 2,
       [](Idx b, Idx i) { return std::vector<Val>{i % 8, b * 8 + i % 8}; }},
  };
  for (const Case& c : cases) {
    Kernel k = store_map(c.name, 64, c.f, c.rank);
    AnalysisReport r = analyze(k);
    const AccessVerdict* v = find(r, "unique", "y");
    ASSERT_TRUE(v) << c.name;
    ASSERT_EQ(v->result.outcome, Outcome::Disproved) << c.name << "\n" << r.text();
    expect_collision_replays(*v);
    // The compile error names kernel, tensor and both coordinates.
    try {
      lower(k);
      ADD_FAILURE() << c.name << " compiled";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(c.name + ": y written twice: (block="), std::string::npos) << m;
      EXPECT_NE(m.find("→ offset "), std::string::npos) << m;
    }
  }
}

TEST(Analysis, RaggedTailNeedsItsGuardAndExactTilesDoNot) {
  // axpb: N unconstrained, 256 per block: the tail guard is needed (counterexample found).
  AnalysisReport r = analyze(testing::axpb_kernel());
  const AccessVerdict* g = find(r, "guard", "");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->result.outcome, Outcome::Disproved) << r.text();
  EXPECT_EQ(r.stats.guards_removed, 0);
  // N divisible by 64 with 64-element tiles: the guard is proved redundant and removed.
  AnalysisReport r2 = analyze(store_map("exact", 64, [](Idx b, Idx i) {
    return std::vector<Val>{b * 64 + i};
  }));
  EXPECT_EQ(find(r2, "guard", "")->result.outcome, Outcome::Proved) << r2.text();
  EXPECT_EQ(r2.stats.guards_removed, 1);
  EXPECT_EQ(find(r2, "in_bounds", "y")->result.outcome, Outcome::Proved);
}

TEST(Analysis, AlignedAccessVectorizesMisalignedDoesNot) {
  AnalysisReport r = analyze(store_map("aligned", 64, [](Idx b, Idx i) {
    return std::vector<Val>{b * 64 + i};
  }));
  const AccessVerdict* v = find(r, "vector", "y");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->result.outcome, Outcome::Proved) << r.text();
  EXPECT_EQ(v->note, "vectorizable x4");
  AnalysisReport m = analyze(store_map("misaligned", 64, [](Idx b, Idx i) {
    return std::vector<Val>{b * 64 + i + 1};
  }));
  const AccessVerdict* w = find(m, "vector", "y");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->result.outcome, Outcome::Disproved) << m.text();
  EXPECT_EQ(w->note, "scalar");
}

TEST(Analysis, TinyBudgetGivesUnknownAndStillCorrectGuardedCode) {
  // A guard only Z3 can remove (64 | N, 64 per block through a division-free map).
  Kernel k = store_map("budget", 64, [](Idx b, Idx i) { return std::vector<Val>{b * 64 + i}; });
  LowerOptions tiny;
  tiny.analysis.budget.rlimit = 1;
  AnalysisReport r;
  tiny.report = &r;
  SimtKernel s = lower(k, tiny);
  EXPECT_GT(r.stats.unknown, 0) << r.text();
  EXPECT_EQ(r.stats.guards_removed, 0) << r.text();
  // Guarded, scalar and correct: every element of y written once.
  auto cpu = compile_cpu(k);  // default budget
  (void)cpu;
  const int64_t n = 128;
  std::vector<float> y(n, -1.0f);
  compile_cpu(k)->launch({.buffers = {y.data()}, .dims = {n}, .scalars = {}});
  for (float v : y) EXPECT_EQ(v, 1.0f);
}

TEST(Analysis, ShippedTestKernelsHaveNoDisprovedSafetyQuestion) {
  for (const Kernel& k : {testing::axpb_kernel(), testing::softmax_kernel(),
                          testing::rmsnorm_kernel(), testing::dgamma_kernel(),
                          testing::matmul_kernel(), testing::transpose_kernel()}) {
    AnalysisReport r = analyze(k);
    for (const AccessVerdict& v : r.verdicts)
      if (v.question == "unique" || v.question == "in_bounds")
        EXPECT_NE(v.result.outcome, Outcome::Disproved) << k.sig.name << "\n" << r.text();
  }
}

TEST(Analysis, VerdictTextIsDeterministic) {
  EXPECT_EQ(analyze(testing::matmul_kernel()).text(), analyze(testing::matmul_kernel()).text());
}

}  // namespace
}  // namespace tilerun::compiler
