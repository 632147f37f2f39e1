// One case per pass: a tiny kernel through the pipeline, checking only what that pass changes in
// the IR text (the FileCheck style of STYLE.md, with substrings).
#include <gtest/gtest.h>

#include <map>

#include "compiler/ir/builder.h"
#include "compiler/lower.h"
#include "test_kernels.h"

namespace tilerun::compiler {
namespace {

// A bf16 tile copied to shared memory, a block max over it, an exp per element: every pass has
// something to do. Two threads keep the text short.
std::map<std::string, std::string> trace_tiny() {
  KernelBuilder kb("tiny");
  Dim N = kb.dim("N");
  Buf x = kb.input("x", DType::BF16, {N});
  Buf y = kb.output("y", DType::F32, {N});
  kb.body({ceildiv(N, 4)}, 2, [&](Scope& s) {
    Buf sh = s.alloc_shared("sh", DType::F32, {4});
    s.copy(sh, x.region({s.block_idx(0) * 4}, {4}));
    s.barrier();
    Val m = s.reduce_max(4, [&](Idx i) { return sh(i); });
    s.parallel(3, [&](Idx i) { y(s.block_idx(0) * 4 + i) = exp(sh(i) - m); });
  });
  std::vector<std::pair<std::string, std::string>> trace;
  lower(kb.build(), {.trace = &trace});
  return {trace.begin(), trace.end()};
}

bool has(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

TEST(Passes, LowerCopiesGuardsGlobalReadsWithZeroFill) {
  std::string t = trace_tiny()["lower_copies"];
  EXPECT_FALSE(has(t, "copy ")) << t;
  EXPECT_TRUE(has(t,
                  "  parallel cp.0 in [0, 4) {\n"
                  "    if ((0 <= ((blockIdx.x * 4) + cp.0)) & (((blockIdx.x * 4) + cp.0) < N)) {\n"
                  "      sh[cp.0] = x[((blockIdx.x * 4) + cp.0)]\n"
                  "    } else {\n"
                  "      sh[cp.0] = 0f\n"))
      << t;
}

TEST(Passes, LowerReductionsFoldsPerThreadThenAShuffleTreeThenWarpsInOrder) {
  std::string t = trace_tiny()["lower_reductions"];
  EXPECT_FALSE(has(t, "reduce_max")) << t;
  EXPECT_TRUE(has(t, "  fragment max.1.part.0: f32[2]\n  shared max.1.scratch.0: f32[2]\n")) << t;
  EXPECT_TRUE(has(t, "max.1.part.0[t.0] = f32(-inf)")) << t;
  EXPECT_TRUE(has(t,
                  "  for k.0 in [0, 2) {\n"
                  "    parallel t.1 in [0, 2) {\n"
                  "      let r.0 = ((k.0 * 2) + t.1)\n"
                  "      if (r.0 < 4) {\n"
                  "        max.1.part.0[t.1] = max(max.1.part.0[t.1], sh[r.0])\n"))
      << t;
  // Two threads, one warp: one shuffle round, then thread 0 publishes the result.
  EXPECT_TRUE(has(t,
                  "  max.1.lane.0 = shuffle_xor(max.1.part.0, 1)\n"
                  "  parallel t.2 in [0, 2) {\n"
                  "    max.1.part.0[t.2] = max(max.1.part.0[t.2], max.1.lane.0[t.2])\n"
                  "  }\n"
                  "  parallel t.3 in [0, 2) {\n"
                  "    if ((t.3 % 2) == 0) {\n"
                  "      max.1.scratch.0[0] = max.1.part.0[t.3]\n"
                  "    }\n"
                  "  }\n"
                  "  barrier\n"
                  "  let max.1 = max.1.scratch.0[0]\n"
                  "  barrier\n"))
      << t;
}

TEST(Passes, ReductionsOverManyWarpsShuffleInEachWarpThenAcrossWarpsInOrder) {
  std::vector<std::pair<std::string, std::string>> trace;
  lower(testing::rmsnorm_kernel(), {.trace = &trace});
  std::map<std::string, std::string> m(trace.begin(), trace.end());
  const std::string& t = m["lower_reductions"];
  // 128 threads: a butterfly 16, 8, 4, 2, 1 inside each warp, each warp's lane 0 stores its
  // total at its warp's index, one barrier, then the 4 totals in warp order through 2, 1.
  size_t at = 0;
  for (int x : {16, 8, 4, 2, 1, 2, 1}) {
    at = t.find("shuffle_xor(sum.1.part.0, " + std::to_string(x) + ")", at);
    ASSERT_NE(at, std::string::npos) << "round " << x << "\n" << t;
  }
  EXPECT_TRUE(
      has(t, "if ((t.7 % 32) == 0) {\n      sum.1.scratch.0[(t.7 / 32)] = sum.1.part.0[t.7]"))
      << t;
  EXPECT_TRUE(has(t, "select((t.8 < 4), sum.1.scratch.0[t.8], -0f)")) << t;
  // Two barriers for the tree, one after the result is read: not one per tree level.
  size_t barriers = 0;
  for (size_t p = t.find("barrier"); p != std::string::npos; p = t.find("barrier", p + 1))
    ++barriers;
  EXPECT_EQ(barriers, 3u) << t;
}

TEST(Passes, LowerParallelMapsElementsToThreadsAndFragmentsToLocals) {
  std::string t = trace_tiny()["lower_parallel"];
  EXPECT_FALSE(has(t, "parallel")) << t;
  EXPECT_TRUE(has(t, "  local max.1.part.0: f32[1]\n")) << t;
  // 4 elements on 2 threads: two uniform trips, no guard (4 % 2 == 0).
  EXPECT_TRUE(has(t,
                  "  for it.0 in [0, 2) {\n    let lin.0 = ((it.0 * 2) + threadIdx.x)\n    let "
                  "cp.0 = lin.0\n    if ((0"))
      << t;
  // One trip: no loop, and the fragment's local index is the constant iteration 0.
  EXPECT_TRUE(
      has(t, "  let lin.1 = threadIdx.x\n  let t.0 = lin.1\n  max.1.part.0[0] = f32(-inf)\n"))
      << t;
  // 3 elements on 2 threads: a guard.
  EXPECT_TRUE(has(t, "    let lin.5 = ((it.1 * 2) + threadIdx.x)\n    if (lin.5 < 3) {\n")) << t;
}

TEST(Passes, FlattenBuffersMakesRowMajorIndices) {
  std::vector<std::pair<std::string, std::string>> trace;
  lower(testing::rmsnorm_kernel(), {.trace = &trace});
  std::map<std::string, std::string> t(trace.begin(), trace.end());
  std::string before = t["lower_parallel"], after = t["flatten_buffers"];
  ASSERT_EQ(trace[6].first, "flatten_buffers");
  EXPECT_TRUE(has(before, "x[blockIdx.x, r.0]")) << before;
  EXPECT_TRUE(has(after, "x[((blockIdx.x * D) + r.0)]")) << after;
}

TEST(Passes, LowerStorageTypesConvertsBf16AndCanonicalisesStoredNaN) {
  std::string t = trace_tiny()["lower_storage_types"];
  EXPECT_TRUE(has(t, "bitcast<f32>((i32(x[((blockIdx.x * 4) + cp.0)]) << i32(16)))")) << t;
  EXPECT_TRUE(has(t, "y[((blockIdx.x * 4) + i.2)] = (let nan.0.x = ")) << t;
}

TEST(Passes, ExpandStrictMathLeavesOnlyFmaAndSqrt) {
  std::string before = trace_tiny()["lower_storage_types"], t = trace_tiny()["expand_strict_math"];
  EXPECT_TRUE(has(before, "exp((sh[i.2] - max.1))")) << before;
  EXPECT_FALSE(has(t, "exp(")) << t;
  EXPECT_FALSE(has(t, " = max(")) << t;
  EXPECT_TRUE(has(t, "fma(")) << t;
  EXPECT_TRUE(has(t, "(let exp.0.x = (sh[i.2] - max.1) in")) << t;
}

}  // namespace
}  // namespace tilerun::compiler
