// The index analysis (analyze_accesses.h): unique maps proved, seeded bugs disproved with a
// counterexample replayed here, guards kept or removed, alignment, and a tiny budget.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "compiler/analysis/analyze_accesses.h"
#include "compiler/analysis/index_eval.h"
#include "compiler/codegen/cpu_backend.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/lower.h"
#include "compiler/transforms/lower_copies.h"
#include "compiler/transforms/lower_reductions.h"
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
    if (b.count(n) && b[n] != x &&
        (n.rfind("blockIdx", 0) == 0 || n.rfind("i.", 0) == 0 || n.rfind("j.", 0) == 0))
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
      {"tiled", 64, 2,
       [](Idx b, Idx i) {
         return std::vector<Val>{b * 8 + i / 8, i % 8};
       }},
      {"transposed", 64, 2,
       [](Idx b, Idx i) {
         return std::vector<Val>{i % 8, b * 8 + i / 8};
       }},
      {"swizzled", 64, 2,
       [](Idx b, Idx i) {
         return std::vector<Val>{b * 8 + i / 8, (i % 8) ^ (i / 8)};
       }},
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
       [](Idx b, Idx i) {
         return std::vector<Val>{i % 8, b * 8 + i % 8};
       }},
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

// A scatter y[idx[f(i)], c] = x[i, c] over rows of D columns, one block per row tile, the
// indices a permutation input (distinct values) or a plain index input.
Kernel scatter_rows(const std::string& name, bool distinct, std::function<Val(Idx)> f) {
  KernelBuilder kb(name);
  Dim N = kb.dim("N"), D = kb.dim("D");
  Buf x = kb.input("x", DType::F32, {N, D});
  Buf idx = distinct ? kb.permutation_input("idx", {N}, N) : kb.index_input("idx", {N}, N);
  Buf y = kb.output("y", DType::F32, {N, D});
  kb.body({N}, 64, [&](Scope& s) {
    Idx row = s.block_idx(0);
    Val to = s.let(to_i64(idx(f(row))), "to");
    s.parallel(64, [&](Idx c) { s.if_then(c < D, [&] { y(to, c) = x(row, c); }); });
  });
  return kb.build();
}

TEST(Analysis, ScatterThroughAPermutationIsProvedUnique) {
  AnalysisReport r = analyze(scatter_rows("scatter", true, [](Idx row) { return row; }));
  const AccessVerdict* v = find(r, "unique", "y");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->result.outcome, Outcome::Proved) << r.text();
  EXPECT_EQ(find(r, "in_bounds", "y")->result.outcome, Outcome::Proved) << r.text();
  lower(scatter_rows("scatter", true, [](Idx row) { return row; }));  // compiles
  // Round trip of the contract through the IR text.
  Kernel k = scatter_rows("scatter", true, [](Idx row) { return row; });
  EXPECT_NE(print(k).find("values in [0, N) distinct"), std::string::npos) << print(k);
}

// Segments of rows [starts[e], starts[e + 1]) (the last to N), a block per (expert, 64-row tile
// of its segment), each row of y written by its segment's block: y[starts[e] + 64 t + i] = e.
// `sorted`: the starts are a sorted input; `overlap` stores one row past each segment's end.
Kernel segment_rows(const std::string& name, bool sorted, bool overlap) {
  KernelBuilder kb(name);
  Dim N = kb.dim("N"), E = kb.dim("E");
  Buf starts = sorted ? kb.sorted_input("starts", E, N + 1) : kb.index_input("starts", {E}, N + 1);
  Buf y = kb.output("y", DType::I32, {N});
  kb.body({E, ceildiv(N, Val(int64_t{64}))}, 64, [&](Scope& s) {
    Idx e = s.block_idx(0), t = s.block_idx(1);
    Val lo = s.let(to_i64(starts(e)), "lo");
    Val next = s.let(to_i64(starts(min(e + 1, E - 1))), "next");
    Val hi = s.let(select(e + 1 < E, next, Val(N)), "hi");
    Val end = overlap ? min(hi + 1, Val(N)) : hi;
    s.parallel(64, [&](Idx i) {
      Idx row = lo + t * 64 + i;
      s.if_then(row < end, [&] { y(row) = to_i32(e); });
    });
  });
  return kb.build();
}

// Rows owned by segments whose starts never decrease are written once: proved from the sorted
// contract alone (the kernel never checks the order). Without it, or with one row too many, two
// segments share a row and the counterexample shows it.
TEST(Analysis, SegmentRowsAreProvedUniqueFromSortedStarts) {
  AnalysisReport r = analyze(segment_rows("segments", true, false));
  const AccessVerdict* v = find(r, "unique", "y");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->result.outcome, Outcome::Proved) << r.text();
  lower(segment_rows("segments", true, false));  // compiles
  EXPECT_NE(print(segment_rows("segments", true, false)).find("values in [0, (N + 1)) sorted"),
            std::string::npos)
      << print(segment_rows("segments", true, false));
  for (const auto& [name, sorted, overlap] : std::vector<std::tuple<std::string, bool, bool>>{
           {"segments_unsorted", false, false}, {"segments_overlap", true, true}}) {
    AnalysisReport bad = analyze(segment_rows(name, sorted, overlap));
    const AccessVerdict* u = find(bad, "unique", "y");
    ASSERT_TRUE(u) << name;
    EXPECT_EQ(u->result.outcome, Outcome::Disproved) << name << "\n" << bad.text();
    try {
      lower(segment_rows(name, sorted, overlap));
      ADD_FAILURE() << name << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name + ": y written twice"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Analysis, ScatterWithoutAPermutationIsRefusedWithACounterexample) {
  // Indices in range but possibly repeated: two rows may name one row of y.
  // A permutation read at row / 2: rows 2r and 2r + 1 read one element, so write one row of y.
  struct Case {
    std::string name;
    bool distinct;
    std::function<Val(Idx)> f;
  };
  std::vector<Case> cases = {
      {"scatter_any_index", false, [](Idx row) { return row; }},
      {"scatter_half", true, [](Idx row) { return row / 2; }},
  };
  for (const Case& c : cases) {
    AnalysisReport r = analyze(scatter_rows(c.name, c.distinct, c.f));
    const AccessVerdict* v = find(r, "unique", "y");
    ASSERT_TRUE(v) << c.name;
    ASSERT_EQ(v->result.outcome, Outcome::Disproved) << c.name << "\n" << r.text();
    // Both blocks write one row: the counterexample's rows differ, their targets agree.
    std::string vars;
    for (auto& [n, x] : v->result.model) vars += n + "=" + std::to_string(x) + " ";
    ASSERT_TRUE(v->result.model.count("blockIdx.x@a") && v->result.model.count("to.0@a")) << vars;
    EXPECT_NE(v->result.model.at("blockIdx.x@a"), v->result.model.at("blockIdx.x@b")) << vars;
    EXPECT_EQ(v->result.model.at("to.0@a"), v->result.model.at("to.0@b")) << vars;
    try {
      lower(scatter_rows(c.name, c.distinct, c.f));
      ADD_FAILURE() << c.name << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.name + ": y written twice: (block="),
                std::string::npos)
          << e.what();
    }
  }
}

// y[row, c] = table[ids[row], c], or with `moves` table[ids[c], c] (the id moves with the column).
Kernel gather_rows_kernel(const std::string& name, int64_t divisible, bool moves) {
  KernelBuilder kb(name);
  Dim N = kb.dim("N"), V = kb.dim("V"), D = kb.dim("D", {.divisible_by = divisible});
  Buf table = kb.input("table", DType::F32, {V, D});
  Buf ids = kb.index_input("ids", {moves ? Val(D) : Val(N)}, V);
  Buf y = kb.output("y", DType::F32, {N, D});
  kb.body({N}, 64, [&](Scope& s) {
    Idx row = s.block_idx(0);
    s.parallel(64, [&](Idx c) {
      s.if_then(c < D, [&] {
        Val id = s.let(to_i64(ids(moves ? Val(c) : Val(row))), "id");
        y(row, c) = table(id, c);
      });
    });
  });
  return kb.build();
}

TEST(Analysis, AGatheredRowIsAVectorWhenItsWidthIsAMultipleOfTheLanes) {
  // id · D + c with D a multiple of 4: aligned whatever id is, without Z3 (which gave up on the
  // product of a loaded id and a symbolic D).
  AnalysisReport r = analyze(gather_rows_kernel("gather_aligned", 4, false));
  const AccessVerdict* v = find(r, "vector", "table");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->result.outcome, Outcome::Proved) << r.text();
  EXPECT_EQ(v->result.method, "affine") << r.text();
  EXPECT_EQ(v->note, "vectorizable x4");
  // D of any width: the row may start anywhere.
  AnalysisReport any = analyze(gather_rows_kernel("gather_any_width", 1, false));
  ASSERT_TRUE(find(any, "vector", "table"));
  EXPECT_NE(find(any, "vector", "table")->result.outcome, Outcome::Proved) << any.text();
  // An id read at the column moves with the lanes: never a vector.
  AnalysisReport moving = analyze(gather_rows_kernel("gather_moving_id", 4, true));
  ASSERT_TRUE(find(moving, "vector", "table"));
  EXPECT_NE(find(moving, "vector", "table")->result.outcome, Outcome::Proved) << moving.text();
  lower(gather_rows_kernel("gather_aligned", 4, false));  // compiles
}

TEST(Analysis, RaggedTailNeedsItsGuardAndExactTilesDoNot) {
  // axpb: N unconstrained, 256 per block: the tail guard is needed (counterexample found).
  AnalysisReport r = analyze(testing::axpb_kernel());
  const AccessVerdict* g = find(r, "guard", "");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->result.outcome, Outcome::Disproved) << r.text();
  EXPECT_EQ(r.stats.guards_removed, 0);
  // N divisible by 64 with 64-element tiles: the guard is proved redundant and removed.
  AnalysisReport r2 =
      analyze(store_map("exact", 64, [](Idx b, Idx i) { return std::vector<Val>{b * 64 + i}; }));
  EXPECT_EQ(find(r2, "guard", "")->result.outcome, Outcome::Proved) << r2.text();
  EXPECT_EQ(r2.stats.guards_removed, 1);
  EXPECT_EQ(find(r2, "in_bounds", "y")->result.outcome, Outcome::Proved);
}

TEST(Analysis, AlignedAccessVectorizesMisalignedDoesNot) {
  AnalysisReport r =
      analyze(store_map("aligned", 64, [](Idx b, Idx i) { return std::vector<Val>{b * 64 + i}; }));
  const AccessVerdict* v = find(r, "vector", "y");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->result.outcome, Outcome::Proved) << r.text();
  EXPECT_EQ(v->note, "vectorizable x4");
  AnalysisReport m = analyze(
      store_map("misaligned", 64, [](Idx b, Idx i) { return std::vector<Val>{b * 64 + i + 1}; }));
  const AccessVerdict* w = find(m, "vector", "y");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->result.outcome, Outcome::Disproved) << m.text();
  EXPECT_EQ(w->note.rfind("scalar", 0), 0u) << w->note;
}

TEST(Analysis, TinyBudgetGivesUnknownAndStillCorrectGuardedCode) {
  // A guard only Z3 can remove (64 | N, 64 per block through a division-free map).
  Kernel k = store_map("budget", 64, [](Idx b, Idx i) { return std::vector<Val>{b * 64 + i}; });
  LowerOptions tiny;
  tiny.analysis.budget.rlimit = 1;
  tiny.analysis.optimisation_budget.rlimit = 1;
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

TEST(Analysis, ConcreteShapeSettlesWhatTheSymbolicDimsLeaveOpenAndPinsTheKernel) {
  // axpb: N unconstrained, 256 per block. Over the symbolic N the tail guard is needed and the
  // access cannot be proved aligned; over N = 4096 both are proved, the kernel is pinned to
  // N = 4096 and the CPU launch refuses any other N instead of running unguarded code.
  Kernel k = testing::axpb_kernel();
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 256 * std::uniform_int_distribution<int64_t>(1, 64)(rng);
  LowerOptions lo;
  lo.analysis.concrete = {{"N", n}};
  AnalysisReport r;
  lo.report = &r;
  SimtKernel s = lower(k, lo);
  EXPECT_TRUE(r.pinned) << r.text();
  const AccessVerdict* g = find(r, "guard", "");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->result.outcome, Outcome::Proved) << r.text();
  EXPECT_NE(g->result.method.find("@concrete"), std::string::npos) << r.text();
  EXPECT_EQ(r.stats.guards_removed, 1);
  ASSERT_EQ(s.sig.dims.size(), 1u);
  EXPECT_EQ(s.sig.dims[0].bounds.min, n);
  EXPECT_EQ(s.sig.dims[0].bounds.max, n);

  // The pinned kernel computes y = a*x + b at its shape, against a plain loop here.
  auto cpu = compile_cpu(s);
  std::vector<float> x(n), y(n, -1.0f);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  const float a = u(rng), b = u(rng);
  cpu->launch({.buffers = {x.data(), y.data()}, .dims = {n}, .scalars = {a, b}});
  for (int64_t i = 0; i < n; ++i) {
    volatile float ax = a * x[i];  // no contraction into an fma: the kernel rounds twice too
    ASSERT_EQ(y[i], ax + b) << i;
  }
  // Another N: a clear error naming the kernel and the dim, not a silent overrun.
  std::vector<float> x2(n + 1), y2(n + 1);
  try {
    cpu->launch({.buffers = {x2.data(), y2.data()}, .dims = {n + 1}, .scalars = {a, b}});
    ADD_FAILURE() << "a pinned kernel launched at another shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("axpb"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("N"), std::string::npos) << e.what();
  }

  // Without the concrete shape nothing is pinned and the guard stays.
  AnalysisReport sym;
  SimtKernel s2 = lower(k, {.report = &sym});
  EXPECT_FALSE(sym.pinned);
  EXPECT_EQ(sym.stats.guards_removed, 0);
  EXPECT_EQ(s2.sig.dims[0].bounds.min, 1);
}

TEST(Analysis, AConcreteShapeNeverExcusesARace) {
  // Disproved over the symbolic dims: a compile error even though the launch shape is known.
  Kernel k = store_map("race", 64, [](Idx, Idx i) { return std::vector<Val>{i}; });
  LowerOptions lo;
  lo.analysis.concrete = {{"N", 64}};
  EXPECT_THROW(lower(k, lo), Error);
}

// A double-buffered shared tile: stage k writes half k % 2. Unique without Z3 (a mixed radix
// over the half, the row and the column); halves that overlap are a collision Z3 finds.
Kernel double_buffer(int64_t half) {
  KernelBuilder kb("double_buffer_" + std::to_string(half));
  Dim n = kb.dim("N");
  Buf y = kb.output("y", DType::F32, {n});
  kb.body({ceildiv(n, 256)}, 256, [&](Scope& s) {
    Buf sh = s.alloc_shared("sh", DType::F32, {4096});
    s.serial(4, [&](Idx k) {
      Val cur = s.let(k % 2, "cur");
      s.parallel(128, 16, [&](Idx i, Idx j) { sh(cur * half + i * 16 + j) = to_f32(i); });
      s.barrier();
    });
    s.parallel(256, [&](Idx i) {
      Idx e = s.block_idx(0) * 256 + i;
      s.if_then(e < n, [&] { y(e) = sh(i); });
    });
  });
  return kb.build();
}

TEST(Analysis, DoubleBufferedTilesAreUniqueByMixedRadixAndOverlapsAreCaught) {
  AnalysisReport ok = analyze(double_buffer(2048));
  const AccessVerdict* v = find(ok, "unique", "sh");
  ASSERT_TRUE(v) << ok.text();
  EXPECT_EQ(v->result.outcome, Outcome::Proved) << ok.text();
  EXPECT_EQ(v->result.method, "affine") << ok.text();
  AnalysisReport bad = analyze(double_buffer(1024));
  const AccessVerdict* w = find(bad, "unique", "sh");
  ASSERT_TRUE(w) << bad.text();
  EXPECT_EQ(w->result.outcome, Outcome::Disproved) << bad.text();
  EXPECT_EQ(w->result.method, "z3") << bad.text();
}

TEST(Analysis, ShippedTestKernelsHaveNoDisprovedSafetyQuestion) {
  for (const Kernel& k :
       {testing::axpb_kernel(), testing::softmax_kernel(), testing::rmsnorm_kernel(),
        testing::dgamma_kernel(), testing::matmul_kernel(), testing::transpose_kernel()}) {
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
