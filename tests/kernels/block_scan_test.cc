// block_scan_sum and block_segmented_scan_sum (kernels/block_scan.h) on the CPU backend:
// prefixes and totals of random blocks, against plain C++ — exact for integers, and for floats
// bit-exact against the documented order (a butterfly inside each warp, then the warps' totals
// left to right) and close to the double-precision sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/ir/builder.h"
#include "kernels/block_scan.h"
#include "kernels/test_util.h"

namespace tilerun::kernels {
namespace {

using namespace tilerun::compiler;  // NOLINT(build/namespaces): builder vocabulary

// y[b, t] = the exclusive prefix of block b's x at thread t, total[b, t] = the block's sum.
Kernel scan_kernel(DType dtype, int threads) {
  KernelBuilder kb("block_scan_" + std::string(dtype_name(dtype)) + "_" + std::to_string(threads));
  Dim blocks = kb.dim("B");
  Buf x = kb.input("x", dtype, {blocks, Val(int64_t{threads})});
  Buf y = kb.output("y", dtype, {blocks, Val(int64_t{threads})});
  Buf totals = kb.output("totals", dtype, {blocks, Val(int64_t{threads})});
  kb.body({blocks}, threads, [&](Scope& s) {
    Val b = s.let(s.block_idx(0), "b");
    Buf v = s.alloc_fragment("v", dtype, {threads});
    Buf exclusive = s.alloc_fragment("exclusive", dtype, {threads});
    Buf total = s.alloc_fragment("total", dtype, {threads});
    s.parallel(threads, [&](Idx t) { v(t) = x(b, t); });
    block_scan_sum(s, "scan", threads, v, exclusive, total);
    s.parallel(threads, [&](Idx t) {
      y(b, t) = exclusive(t);
      totals(b, t) = total(t);
    });
  });
  return kb.build();
}

// The documented order in plain C++: the exclusive prefixes of one block and its total.
template <class T>
std::vector<T> model_scan(const T* x, int threads, T* block_total) {
  const int lanes = std::min(threads, 32), warps = threads / lanes;
  std::vector<T> prefix(threads, T(0)), total(x, x + threads);
  for (int o = 1; o < lanes; o *= 2) {
    std::vector<T> partner(threads);
    for (int t = 0; t < threads; ++t) partner[t] = total[t ^ o];
    for (int t = 0; t < threads; ++t) {
      if ((t % lanes) / o % 2 == 1) prefix[t] = prefix[t] + partner[t];
      total[t] = total[t] + partner[t];
    }
  }
  std::vector<T> out(threads);
  for (int t = 0; t < threads; ++t) {
    T before = T(0), all = T(0);
    for (int w = 0; w < warps; ++w) {
      const T v = total[w * lanes];
      if (w < t / lanes) before = before + v;
      all = all + v;
    }
    out[t] = before + prefix[t];
    *block_total = all;
  }
  return out;
}

template <class T>
void check_scan(DType dtype, int threads, std::mt19937_64& rng) {
  std::unique_ptr<CpuKernel> k = compile_cpu(scan_kernel(dtype, threads));
  const int64_t blocks = 3, n = blocks * threads;
  std::vector<T> x(n), y(n, T(-7)), total(n, T(-7));
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::uniform_int_distribution<int64_t> ints(-1000, 1000);
  for (T& v : x) v = std::is_floating_point_v<T> ? T(u(rng)) : T(ints(rng));
  k->launch({.buffers = {x.data(), y.data(), total.data()}, .dims = {blocks}, .scalars = {}});
  for (int64_t b = 0; b < blocks; ++b) {
    T want_total;
    std::vector<T> want = model_scan(x.data() + b * threads, threads, &want_total);
    double exact = 0;
    for (int t = 0; t < threads; ++t) {
      const int64_t i = b * threads + t;
      // Bit-exact against the documented order; the integers also against the plain sum.
      ASSERT_EQ(std::memcmp(&y[i], &want[t], sizeof(T)), 0)
          << dtype_name(dtype) << " " << threads << " threads, block " << b << " thread " << t
          << ": " << y[i] << " vs " << want[t];
      ASSERT_EQ(std::memcmp(&total[i], &want_total, sizeof(T)), 0);
      if constexpr (std::is_floating_point_v<T>)
        EXPECT_NEAR(y[i], exact, 1e-5 * threads) << "thread " << t;
      else
        EXPECT_EQ(y[i], static_cast<T>(exact)) << "thread " << t;
      exact += static_cast<double>(x[i]);
    }
  }
}

TEST(BlockScan, ExclusivePrefixesAndTotalsInTheDocumentedOrder) {
  std::mt19937_64 rng(testing::test_seed());
  for (int threads : {256, 64, 32, 8}) {
    check_scan<float>(DType::F32, threads, rng);
    check_scan<int32_t>(DType::I32, threads, rng);
    check_scan<int64_t>(DType::I64, threads, rng);
  }
}

// y[b, t] = block b's segmented inclusive scan of x at thread t, with heads[b, t] (nonzero:
// a segment starts at t).
Kernel segmented_kernel(DType dtype, int threads) {
  KernelBuilder kb("block_segmented_scan_" + std::string(dtype_name(dtype)) + "_" +
                   std::to_string(threads));
  Dim blocks = kb.dim("B");
  Buf x = kb.input("x", dtype, {blocks, Val(int64_t{threads})});
  Buf heads = kb.input("heads", DType::I32, {blocks, Val(int64_t{threads})});
  Buf y = kb.output("y", dtype, {blocks, Val(int64_t{threads})});
  kb.body({blocks}, threads, [&](Scope& s) {
    Val b = s.let(s.block_idx(0), "b");
    Buf v = s.alloc_fragment("v", dtype, {threads});
    Buf h = s.alloc_fragment("h", DType::I32, {threads});
    Buf inclusive = s.alloc_fragment("inclusive", dtype, {threads});
    s.parallel(threads, [&](Idx t) {
      v(t) = x(b, t);
      h(t) = heads(b, t);
    });
    block_segmented_scan_sum(s, "seg", threads, v, h, inclusive);
    s.parallel(threads, [&](Idx t) { y(b, t) = inclusive(t); });
  });
  return kb.build();
}

// The documented order in plain C++ (block_scan.h): one block's segmented inclusive scan.
template <class T>
std::vector<T> model_segmented(const T* x, const int32_t* heads, int threads) {
  const int lanes = std::min(threads, 32), warps = threads / lanes;
  std::vector<T> incl(x, x + threads), total(x, x + threads);
  std::vector<bool> prefix_f(threads), total_f(threads);
  for (int t = 0; t < threads; ++t) prefix_f[t] = total_f[t] = heads[t] != 0;
  for (int o = 1; o < lanes; o *= 2) {
    std::vector<T> pv(threads);
    std::vector<bool> pf(threads);
    for (int t = 0; t < threads; ++t) pv[t] = total[t ^ o], pf[t] = total_f[t ^ o];
    for (int t = 0; t < threads; ++t) {
      const bool right = (t % lanes) / o % 2 == 1;
      if (right) {
        if (!prefix_f[t]) incl[t] = pv[t] + incl[t];
        prefix_f[t] = prefix_f[t] || pf[t];
      }
      const T lv = right ? pv[t] : total[t], rv = right ? total[t] : pv[t];
      const bool rf = right ? total_f[t] : pf[t];
      total[t] = rf ? rv : lv + rv;
      total_f[t] = total_f[t] || pf[t];
    }
  }
  std::vector<T> out(threads);
  for (int t = 0; t < threads; ++t) {
    T before = T(0);
    for (int w = 0; w < t / lanes; ++w)
      before = total_f[w * lanes] ? total[w * lanes] : before + total[w * lanes];
    out[t] = prefix_f[t] ? incl[t] : before + incl[t];
  }
  return out;
}

template <class T>
void check_segmented(DType dtype, int threads, double head_rate, std::mt19937_64& rng) {
  std::unique_ptr<CpuKernel> k = compile_cpu(segmented_kernel(dtype, threads));
  const int64_t blocks = 3, n = blocks * threads;
  std::vector<T> x(n), y(n, T(-7));
  std::vector<int32_t> heads(n);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::uniform_int_distribution<int64_t> ints(-1000, 1000);
  std::bernoulli_distribution head(head_rate);
  std::uniform_int_distribution<int32_t> flag(1, 9);  // any nonzero is a head
  for (T& v : x) v = std::is_floating_point_v<T> ? T(u(rng)) : T(ints(rng));
  for (int32_t& h : heads) h = head(rng) ? flag(rng) : 0;
  k->launch({.buffers = {x.data(), heads.data(), y.data()}, .dims = {blocks}, .scalars = {}});
  for (int64_t b = 0; b < blocks; ++b) {
    std::vector<T> want =
        model_segmented(x.data() + b * threads, heads.data() + b * threads, threads);
    double exact = 0;
    for (int t = 0; t < threads; ++t) {
      const int64_t i = b * threads + t;
      if (heads[i] != 0) exact = 0;
      exact += static_cast<double>(x[i]);
      ASSERT_EQ(std::memcmp(&y[i], &want[t], sizeof(T)), 0)
          << dtype_name(dtype) << " " << threads << " threads, heads " << head_rate << ", block "
          << b << " thread " << t << ": " << y[i] << " vs " << want[t];
      if constexpr (std::is_floating_point_v<T>)
        EXPECT_NEAR(y[i], exact, 1e-5 * threads) << "thread " << t;
      else
        EXPECT_EQ(y[i], static_cast<T>(exact)) << "thread " << t;
    }
  }
}

// Runs of every length: no head at all (one segment from thread 0), sparse and dense heads
// (runs inside a warp, across warps, a head on every thread).
TEST(BlockScan, SegmentedInclusiveScansRestartAtEveryHead) {
  std::mt19937_64 rng(testing::test_seed());
  for (int threads : {256, 64, 32, 8})
    for (double rate : {0.0, 0.02, 0.2, 1.0}) {
      check_segmented<float>(DType::F32, threads, rate, rng);
      check_segmented<int32_t>(DType::I32, threads, rate, rng);
      check_segmented<int64_t>(DType::I64, threads, rate, rng);
    }
}

// Every kernel above also compiles for the GPU (NVRTC to an sm_90a cubin, no device needed).
TEST(BlockScan, KernelsCompileToCubin) {
  for (DType dtype : {DType::F32, DType::I32, DType::I64}) {
    EXPECT_FALSE(compile_cuda(scan_kernel(dtype, 256), "").cubin.empty());
    EXPECT_FALSE(compile_cuda(segmented_kernel(dtype, 256), "").cubin.empty());
  }
}

// sums[b, c] = the sum over block b's threads of x[b, c, t], for kCounters counters at once.
constexpr int kCounters = 5;
Kernel sums_kernel(int threads) {
  KernelBuilder kb("block_sums_" + std::to_string(threads));
  Dim blocks = kb.dim("B");
  Buf x = kb.input("x", DType::I32, {blocks, Val(int64_t{kCounters}), Val(int64_t{threads})});
  Buf sums = kb.output("sums", DType::I32, {blocks, Val(int64_t{kCounters})});
  kb.body({blocks}, threads, [&](Scope& s) {
    Val b = s.let(s.block_idx(0), "b");
    std::vector<Buf> counters;
    for (int c = 0; c < kCounters; ++c)
      counters.push_back(s.alloc_fragment("counter" + std::to_string(c), DType::I32, {threads}));
    Buf totals = s.alloc_shared("totals", DType::I32, {kCounters});
    s.parallel(threads, [&](Idx t) {
      for (int c = 0; c < kCounters; ++c) counters[c](t) = x(b, c, t);
    });
    block_sums(s, "bins", threads, counters, totals);
    s.parallel(kCounters, [&](Idx c) { sums(b, c) = totals(c); });
  });
  return kb.build();
}

TEST(BlockScan, BlockSumsAddEachCounterOverTheBlock) {
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_int_distribution<int32_t> d(-50, 1000);
  for (int threads : {512, 32, 4}) {
    std::unique_ptr<CpuKernel> k = compile_cpu(sums_kernel(threads));
    const int64_t blocks = 3;
    std::vector<int32_t> x(blocks * kCounters * threads), sums(blocks * kCounters, -7);
    for (int32_t& v : x) v = d(rng);
    k->launch({.buffers = {x.data(), sums.data()}, .dims = {blocks}, .scalars = {}});
    for (int64_t b = 0; b < blocks; ++b)
      for (int c = 0; c < kCounters; ++c) {
        int64_t want = 0;
        for (int t = 0; t < threads; ++t) want += x[(b * kCounters + c) * threads + t];
        EXPECT_EQ(sums[b * kCounters + c], want)
            << threads << " threads, block " << b << " counter " << c;
      }
  }
}

}  // namespace
}  // namespace tilerun::kernels
