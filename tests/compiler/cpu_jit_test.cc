// End to end: tile programs built with the builder, lowered, JIT-compiled by the CPU backend
// and run on fresh random inputs against plain C++ references. Outputs are poisoned with NaN
// first and every element must have been written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/mma_model.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/simt_verifier.h"
#include "test_kernels.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

using testing::axpb_kernel;

// A fresh seed per run, printed so a failure can be replayed.
std::mt19937& rng() {
  static std::mt19937 gen = [] {
    unsigned seed = std::random_device{}();
    std::printf("[seed] %u\n", seed);
    return std::mt19937(seed);
  }();
  return gen;
}

std::vector<float> random_floats(size_t n, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

template <class T>
std::vector<T> poisoned(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0xff, n * sizeof(T));  // NaN for floats, -1 for ints
  return v;
}

bool all_written(const std::vector<float>& v) {
  for (float x : v)
    if (std::isnan(x)) return false;
  return true;
}

std::unique_ptr<CpuKernel> jit(const Kernel& k) {
  std::unique_ptr<CpuKernel> cpu = compile_cpu(k);
  std::printf("[jit] %-16s compiled in %7.1f ms\n", k.sig.name.c_str(), cpu->compile_ms());
  return cpu;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(CpuJit, ElementwiseRaggedSizesMatchFloatExactly) {
  auto k = jit(axpb_kernel());
  for (int64_t n : {1, 127, 128, 255, 256, 257, 1000, 4099}) {
    std::vector<float> x = random_floats(n), y = poisoned<float>(n);
    float a = 1.25f, b = -0.375f;
    k->launch({.buffers = {x.data(), y.data()}, .dims = {n}, .scalars = {a, b}});
    ASSERT_TRUE(all_written(y)) << "n=" << n;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bits(y[i]), bits(a * x[i] + b)) << "n=" << n << " i=" << i;
  }
}

TEST(CpuJit, PoisonCheckCatchesAKernelThatWritesNothing) {
  KernelBuilder kb("writes_half");
  Dim N = kb.dim("N");
  Buf in = kb.input("x", DType::F32, {N});
  Buf out = kb.output("y", DType::F32, {N});
  kb.body({1}, 32, [&](Scope& s) {
    s.parallel(N, [&](Idx i) { s.if_then(i % 2 == 0, [&] { out(i) = in(i); }); });
  });
  auto k = jit(kb.build());
  std::vector<float> x = random_floats(100), y = poisoned<float>(100);
  k->launch({.buffers = {x.data(), y.data()}, .dims = {100}, .scalars = {}});
  EXPECT_FALSE(all_written(y));
  EXPECT_EQ(y[0], x[0]);
}

TEST(CpuJit, SoftmaxRowsMatchDoubleReference) {
  auto k = jit(testing::softmax_kernel());
  for (int64_t D : {1, 33, 64, 100, 1000}) {
    const int64_t T = 7;
    std::vector<float> x = random_floats(T * D, -8, 8), y = poisoned<float>(T * D);
    k->launch({.buffers = {x.data(), y.data()}, .dims = {T, D}, .scalars = {}});
    ASSERT_TRUE(all_written(y));
    for (int64_t t = 0; t < T; ++t) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < D; ++j) m = std::max(m, double(x[t * D + j]));
      for (int64_t j = 0; j < D; ++j) sum += std::exp(x[t * D + j] - m);
      for (int64_t j = 0; j < D; ++j) {
        double ref = std::exp(x[t * D + j] - m) / sum;
        ASSERT_NEAR(y[t * D + j], ref, 1e-6 + 2e-6 * ref) << "D=" << D << " t=" << t << " j=" << j;
      }
    }
  }
}

TEST(CpuJit, RmsnormForwardMatchesDoubleReference) {
  auto k = jit(testing::rmsnorm_kernel());
  const int64_t T = 5, D = 300;
  std::vector<float> x = random_floats(T * D), g = random_floats(D), y = poisoned<float>(T * D);
  const double eps = 1e-6;
  k->launch({.buffers = {x.data(), g.data(), y.data()}, .dims = {T, D}, .scalars = {eps}});
  ASSERT_TRUE(all_written(y));
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(x[t * D + j]) * x[t * D + j];
    double r = 1.0 / std::sqrt(ss / D + float(eps));
    for (int64_t j = 0; j < D; ++j)
      ASSERT_NEAR(y[t * D + j], x[t * D + j] * r * g[j], 1e-5) << t << "," << j;
  }
}

TEST(CpuJit, DgammaColumnReductionMatchesFmaChain) {
  auto k = jit(testing::dgamma_kernel());
  const int64_t T = 37, D = 100;
  std::vector<float> dy = random_floats(T * D), x = random_floats(T * D),
                     rstd = random_floats(T, 0.5f, 2.0f);
  std::vector<float> dg = poisoned<float>(D);
  k->launch(
      {.buffers = {dy.data(), x.data(), rstd.data(), dg.data()}, .dims = {T, D}, .scalars = {}});
  ASSERT_TRUE(all_written(dg));
  for (int64_t j = 0; j < D; ++j) {
    float acc = 0.0f;
    for (int64_t t = 0; t < T; ++t) acc = std::fmaf(dy[t * D + j] * x[t * D + j], rstd[t], acc);
    ASSERT_EQ(bits(dg[j]), bits(acc)) << "j=" << j;
  }
}

TEST(CpuJit, TiledMatmulWithBarriersMatchesFmaChainBitExactly) {
  auto k = jit(testing::matmul_kernel());
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape s : {Shape{16, 16, 8}, Shape{37, 45, 29}, Shape{1, 70, 3}, Shape{64, 32, 64}}) {
    std::vector<float> a = random_floats(s.m * s.k), b = random_floats(s.k * s.n);
    std::vector<float> c = poisoned<float>(s.m * s.n);
    k->launch({.buffers = {a.data(), b.data(), c.data()}, .dims = {s.m, s.n, s.k}, .scalars = {}});
    ASSERT_TRUE(all_written(c));
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        float acc = 0.0f;
        double ref = 0;
        for (int64_t kk = 0; kk < s.k; ++kk) {
          acc = std::fmaf(a[i * s.k + kk], b[kk * s.n + j], acc);
          ref += double(a[i * s.k + kk]) * b[kk * s.n + j];
        }
        ASSERT_EQ(bits(c[i * s.n + j]), bits(acc))
            << s.m << "x" << s.n << "x" << s.k << " at " << i << "," << j;
        ASSERT_NEAR(c[i * s.n + j], ref, 1e-4 * std::sqrt(double(s.k)));
      }
    }
  }
}

// FP8 tiles on the tensor-core model: every output of a ragged product (two k steps and a part,
// edges past M and N) is the model's dot product of its row and column, in k order from +0, bit
// for bit, whatever the swizzle did to the tiles; and close to the exact product.
TEST(CpuJit, Fp8TensorCoreGemmIsTheModelsDotProduct) {
  for (auto [da, db] :
       {std::pair{DType::F8E4M3, DType::F8E4M3}, std::pair{DType::F8E4M3, DType::F8E5M2}}) {
    auto k = jit(testing::tensor_core_gemm_kernel(da, db));
    const int64_t m = 150, n = 131, kd = 300;
    const MmaInput fa = da == DType::F8E4M3 ? MmaInput::E4M3 : MmaInput::E5M2,
                   fb = db == DType::F8E4M3 ? MmaInput::E4M3 : MmaInput::E5M2;
    // Finite codes of magnitude 2^-3 .. 2^3 (exponent fields around each format's bias).
    auto code = [&](DType d) {
      const bool e4 = d == DType::F8E4M3;
      const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
      const uint32_t r = rng()();
      return static_cast<uint8_t>(((r & 1) << 7) | ((bias - 3 + (r >> 1) % 7) << mbits) |
                                  ((r >> 8) & ((1u << mbits) - 1)));
    };
    std::vector<uint8_t> a(m * kd), b(n * kd);
    for (auto& x : a) x = code(da);
    for (auto& x : b) x = code(db);
    std::vector<float> c = poisoned<float>(m * n);
    k->launch({.buffers = {a.data(), b.data(), c.data()}, .dims = {m, n, kd}, .scalars = {}});
    ASSERT_TRUE(all_written(c));
    auto value = [](uint8_t h, MmaInput f) {  // exact, for the double reference
      const bool e4 = f == MmaInput::E4M3;
      const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15, e = (h & 0x7f) >> mbits;
      const double man = h & ((1 << mbits) - 1);
      const double v = e == 0 ? std::ldexp(man, 1 - bias - mbits)
                              : std::ldexp(1.0 + man / (1 << mbits), e - bias);
      return (h & 0x80) ? -v : v;
    };
    // The kernel's chain runs over whole steps of 128, zeros past K: a group of zero products
    // still aligns the accumulator (the model keeps frac_bits of it), so the reference runs over
    // the same padded K.
    const int64_t padded = (kd + 127) / 128 * 128;
    std::vector<uint8_t> row(padded, 0), col(padded, 0);
    const MmaModel model = hopper_mma_model_fp8();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        std::copy(&a[i * kd], &a[i * kd] + kd, row.begin());
        std::copy(&b[j * kd], &b[j * kd] + kd, col.begin());
        const float want = mma_dot8(model, 0.0f, row.data(), 1, fa, col.data(), 1, fb, padded);
        ASSERT_EQ(bits(c[i * n + j]), bits(want)) << i << "," << j;
        double exact = 0, scale = 0;
        for (int64_t p = 0; p < kd; ++p) {
          const double t = value(a[i * kd + p], fa) * value(b[j * kd + p], fb);
          exact += t, scale += std::fabs(t);
        }
        // Each group keeps frac_bits below its largest term: an error of a few units there.
        ASSERT_NEAR(c[i * n + j], exact, scale * std::ldexp(1.0, 4 - model.frac_bits));
      }
  }
}

// f32 tiles on the tensor-core model (tf32): every output of a ragged product (two 32-wide k
// steps and a part, edges past M and N) is the model's tf32 dot product of its row and column in
// k order from +0, bit for bit through the 128B swizzle of 4-byte elements; and within tf32's
// error of the exact product of the f32 inputs.
TEST(CpuJit, Tf32TensorCoreGemmIsTheModelsDotProduct) {
  auto k = jit(testing::tensor_core_gemm_kernel(DType::F32, DType::F32));
  const int64_t m = 150, n = 131, kd = 75;
  std::vector<float> a = random_floats(m * kd), b = random_floats(n * kd);
  std::vector<float> c = poisoned<float>(m * n);
  k->launch({.buffers = {a.data(), b.data(), c.data()}, .dims = {m, n, kd}, .scalars = {}});
  ASSERT_TRUE(all_written(c));
  const int64_t padded = (kd + 31) / 32 * 32;  // the chain's zero products past K, as the kernel
  std::vector<float> row(padded, 0.0f), col(padded, 0.0f);
  const MmaModel model = hopper_mma_model_tf32();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      std::copy(&a[i * kd], &a[i * kd] + kd, row.begin());
      std::copy(&b[j * kd], &b[j * kd] + kd, col.begin());
      const float want = mma_dot_tf32(model, 0.0f, row.data(), 1, col.data(), 1, padded);
      ASSERT_EQ(bits(c[i * n + j]), bits(want)) << i << "," << j;
      double exact = 0, scale = 0;
      for (int64_t p = 0; p < kd; ++p) {
        const double t = double(a[i * kd + p]) * b[j * kd + p];
        exact += t, scale += std::fabs(t);
      }
      // Each input loses up to 2^-10 of itself (truncated to tf32): a product up to 2^-9.
      ASSERT_NEAR(c[i * n + j], exact, scale * std::ldexp(1.0, -9));
    }
}

TEST(CpuJit, TransposeThroughSharedTileAndFragment) {
  auto k = jit(testing::transpose_kernel());
  for (auto [r, c] : {std::pair<int64_t, int64_t>{32, 32}, {45, 70}, {1, 33}, {100, 3}}) {
    std::vector<float> x = random_floats(r * c), y = poisoned<float>(r * c);
    k->launch({.buffers = {x.data(), y.data()}, .dims = {r, c}, .scalars = {}});
    ASSERT_TRUE(all_written(y));
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) ASSERT_EQ(y[j * r + i], x[i * c + j]) << r << "x" << c;
  }
}

TEST(CpuJit, StrictMathKernelMatchesDoubleReference) {
  auto k = jit(testing::math_kernel());
  const int64_t n = 5000;
  std::vector<float> x = random_floats(n, -20, 20), y = poisoned<float>(n);
  k->launch({.buffers = {x.data(), y.data()}, .dims = {n}, .scalars = {}});
  ASSERT_TRUE(all_written(y));
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    double ref = (1 / (1 + std::exp(-v))) * std::tanh(v) + std::exp(-std::fabs(v)) +
                 std::log(std::fabs(v) + 1) + 1 / std::sqrt(std::fabs(v) + 1) + std::max(v, 0.0) -
                 std::min(v, 0.5);
    ASSERT_NEAR(y[i], ref, 1e-5 * (1 + std::fabs(ref))) << "x=" << v;
  }
}

// Reference conversions: bf16 by hand (round to nearest even), f16 through _Float16.
float bf16_to_f32(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint16_t f32_to_bf16(float f) {
  uint32_t b = bits(f);
  if (std::isnan(f)) return 0x7fc0;
  return uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}
float f16_to_f32(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return float(v);
}
uint16_t f32_to_f16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

TEST(CpuJit, Bf16AndF16LoadsAndRoundToNearestEvenStores) {
  auto k = jit(testing::mixed_dtype_kernel());
  const int64_t n = 4000;
  std::vector<uint16_t> x(n), h(n), y(n, 0xffff), z(n, 0xffff);
  std::vector<float> src = random_floats(n, -300, 300);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = f32_to_bf16(src[i]);
    h[i] = f32_to_f16(src[(i * 7) % n] * 0.37f);
  }
  // Subnormal f16 inputs and values that overflow f16 too.
  h[0] = 0x0001;
  h[1] = 0x83ff;
  x[2] = f32_to_bf16(1e6f);
  const float scale = 3.3f;
  k->launch({.buffers = {x.data(), h.data(), y.data(), z.data()}, .dims = {n}, .scalars = {scale}});
  for (int64_t i = 0; i < n; ++i) {
    float xv = bf16_to_f32(x[i]), hv = f16_to_f32(h[i]);
    ASSERT_EQ(y[i], f32_to_bf16(xv * scale + hv)) << i;
    ASSERT_EQ(z[i], f32_to_f16(xv - hv * scale)) << i;
  }
}

TEST(CpuJit, IntegerReductionsAndFloorDivision) {
  auto k = jit(testing::int_kernel());
  const int64_t T = 3, D = 77;
  std::vector<int32_t> x(T * D), y = poisoned<int32_t>(T * D);
  std::vector<int64_t> q = poisoned<int64_t>(T * D);
  std::uniform_int_distribution<int32_t> d(-1000, 1000);
  for (int32_t& v : x) v = d(rng());
  k->launch({.buffers = {x.data(), y.data(), q.data()}, .dims = {T, D}, .scalars = {}});
  auto floordiv = [](int64_t a, int64_t b) {
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
  };
  for (int64_t t = 0; t < T; ++t) {
    int32_t total = 0, lo = INT32_MAX;
    for (int64_t j = 0; j < D; ++j) {
      total += x[t * D + j];
      lo = std::min(lo, x[t * D + j]);
    }
    for (int64_t j = 0; j < D; ++j) {
      int64_t v = x[t * D + j];
      ASSERT_EQ(y[t * D + j], int32_t(v * 3 + total - lo));
      ASSERT_EQ(q[t * D + j], floordiv(v, 7) + (v - floordiv(v, 5) * 5) * 1000) << v;
    }
  }
}

// SIMT IR written by hand: a per-thread local assigned before a barrier and read after it
// (the CPU backend keeps it in a per-thread slot), and threads exchanging values through
// shared memory in reverse order across the barrier.
TEST(CpuJit, LocalsLiveAcrossBarriersAndSharedMemoryCrossesThreads) {
  SimtKernel k;
  k.sig.name = "reverse";
  k.sig.threads = 32;
  k.sig.grid = {make_i64(2)};
  k.sig.buffers = {{"x", DType::F32, {make_i64(64)}, false},
                   {"y", DType::F32, {make_i64(64)}, true}};
  k.shared = {{"s", DType::F32, {32}}};
  k.locals = {{"mine", Type::F32}};
  Expr tid = Var::make(Type::I64, kThreadIdx);
  Expr global = add(mul(Var::make(Type::I64, kBlockIdx[0]), make_i64(32)), tid);
  Expr mine = Var::make(Type::F32, "mine");
  k.body = Seq::make({
      Assign::make("mine", Load::make(Type::F32, "x", {global})),
      Store::make("s", {tid}, mine),
      Barrier::make(),
      Store::make("y", {global},
                  Binary::make(BinaryOp::Add, Load::make(Type::F32, "s", {sub(make_i64(31), tid)}),
                               Binary::make(BinaryOp::Mul, mine, make_f32(1000.0f)))),
  });
  ASSERT_EQ(simt_problem(k, SimtForm::Complete), "");
  std::unique_ptr<CpuKernel> cpu = compile_cpu(k);
  std::vector<float> x(64), y = poisoned<float>(64);
  for (int i = 0; i < 64; ++i) x[i] = float(i);
  cpu->launch({.buffers = {x.data(), y.data()}, .dims = {}, .scalars = {}});
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 32; ++t)
      EXPECT_EQ(y[b * 32 + t], x[b * 32 + 31 - t] + x[b * 32 + t] * 1000.0f) << b << "," << t;
}

// The executor compiles kernels on several threads and may launch one kernel from several
// threads at once: each compile owns its LLVM context and JIT, each launch its scratch.
TEST(CpuJit, CompilesAndLaunchesConcurrently) {
  std::vector<std::unique_ptr<CpuKernel>> kernels(8);
  std::vector<std::thread> workers;
  for (int i = 0; i < 8; ++i)
    workers.emplace_back(
        [&, i] { kernels[i] = compile_cpu(i % 2 ? testing::softmax_kernel() : axpb_kernel()); });
  for (std::thread& w : workers) w.join();
  workers.clear();
  std::vector<float> x = random_floats(1000);
  std::vector<std::vector<float>> ys(8, poisoned<float>(1000));
  for (int i = 0; i < 8; i += 2)
    workers.emplace_back([&, i] {
      kernels[0]->launch(
          {.buffers = {x.data(), ys[i].data()}, .dims = {1000}, .scalars = {2.0, 1.0}});
    });
  for (std::thread& w : workers) w.join();
  for (int i = 0; i < 8; i += 2)
    for (int j = 0; j < 1000; ++j) ASSERT_EQ(ys[i][j], 2.0f * x[j] + 1.0f);
  for (int i = 1; i < 8; i += 2) EXPECT_EQ(kernels[i]->llvm_ir(), kernels[1]->llvm_ir());
}

TEST(CpuJit, RefusesBlockStorageBeyondTheLimit) {
  KernelBuilder kb("huge");
  Dim N = kb.dim("N");
  Buf y = kb.output("y", DType::F32, {N});
  kb.body({1}, 1024, [&](Scope& s) {
    Buf big = s.alloc_fragment("big", DType::F32, {1024, 1024});
    s.parallel(1024, 1024, [&](Idx i, Idx j) { big(i, j) = 1.0f; });
    s.parallel(1024, 1024,
               [&](Idx i, Idx j) { s.if_then(i == 0 && j < N, [&] { y(j) = big(i, j); }); });
  });
  try {
    compile_cpu(kb.build());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'huge' needs"), std::string::npos) << e.what();
  }
}

TEST(CpuJit, LaunchRejectsDimsOutsideBoundsNamingKernelAndDim) {
  auto k = jit(testing::mixed_dtype_kernel());
  std::vector<uint16_t> buf(8);
  try {
    k->launch({.buffers = {buf.data(), buf.data(), buf.data(), buf.data()},
               .dims = {6},
               .scalars = {1.0}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'mixed_dtype': dim 'N' = 6 is not divisible by 4"),
              std::string::npos)
        << e.what();
  }
  try {
    k->launch({.buffers = {buf.data(), buf.data(), buf.data(), buf.data()},
               .dims = {0},
               .scalars = {1.0}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 'N' = 0 is outside its bounds [1, 1048576]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(k->launch({.buffers = {buf.data()}, .dims = {8}, .scalars = {1.0}}), Error);
}

// copy_async (ir.h Copy::async) on the CPU is a copy of the same bits: a bf16 box of 16 rows and
// 64 columns into a 128B-swizzled shared tile, read back through the swizzle. Rows past M and
// columns past K are zero-filled (K a multiple of 8, from one 16-byte piece to the whole row).
// Warp primitives for authors: ballot of a flag, a lane's rank among the flagged lanes of its
// warp (popcount of the ballot below it), and shuffle_xor, for blocks of two warps and of less
// than one, against plain C++ lane arithmetic.
TEST(CpuJit, BallotRanksFlaggedLanesAndShuffleXorSwapsPartners) {
  for (int threads : {64, 16}) {
    KernelBuilder kb("ballot_" + std::to_string(threads));
    Dim n = kb.dim("N");
    Buf x = kb.input("x", DType::I32, {n});
    Buf mask_out = kb.output("mask", DType::I32, {n});
    Buf rank_out = kb.output("rank", DType::I64, {n});
    Buf swapped = kb.output("swapped", DType::I32, {n});
    kb.body({ceildiv(n, Val(int64_t{threads}))}, threads, [&](Scope& s) {
      Buf flag = s.alloc_fragment("flag", DType::I32, {threads});
      Buf value = s.alloc_fragment("value", DType::I32, {threads});
      Buf mask = s.alloc_fragment("lanes", DType::I32, {threads});
      Buf partner = s.alloc_fragment("partner", DType::I32, {threads});
      Val base = s.let(s.block_idx(0) * threads, "base");
      s.parallel(threads, [&](Idx t) {
        value(t) = x(base + t);
        flag(t) = select(x(base + t) > 0, to_i32(Val(1)), to_i32(Val(0)));
      });
      s.ballot(mask, flag);
      s.shuffle_xor(partner, value, 3);
      s.parallel(threads, [&](Idx t) {
        mask_out(base + t) = mask(t);
        rank_out(base + t) = popcount(to_i64(mask(t)) & lane_mask_below(t % 32));
        swapped(base + t) = partner(t);
      });
    });
    auto k = jit(kb.build());
    const int64_t N = 4 * threads;
    std::vector<int32_t> xs(N), masks = poisoned<int32_t>(N), swaps = poisoned<int32_t>(N);
    std::vector<int64_t> ranks = poisoned<int64_t>(N);
    std::uniform_int_distribution<int32_t> d(-3, 3);
    for (int32_t& v : xs) v = d(rng());
    xs[0] = 1;  // lane 31's bit makes the mask negative as an i32 in the 64-thread block
    if (threads == 64) xs[31] = 5;
    k->launch({.buffers = {xs.data(), masks.data(), ranks.data(), swaps.data()},
               .dims = {N},
               .scalars = {}});
    const int lanes = std::min(threads, 32);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t warp_base = i / lanes * lanes;
      uint32_t want = 0;
      int64_t rank = 0;
      for (int l = 0; l < lanes; ++l)
        if (xs[warp_base + l] > 0) {
          want |= 1u << l;
          if (warp_base + l < i) ++rank;
        }
      ASSERT_EQ(static_cast<uint32_t>(masks[i]), want) << threads << " threads, element " << i;
      ASSERT_EQ(ranks[i], rank) << threads << " threads, element " << i;
      ASSERT_EQ(swaps[i], xs[i ^ 3]) << threads << " threads, element " << i;
    }
  }
}

// A ballot is block-wide: under a parallel it is refused, naming the ballot.
TEST(CpuJit, BallotInsideParallelIsRefused) {
  KernelBuilder kb("ballot_in_parallel");
  Dim n = kb.dim("N");
  Buf x = kb.input("x", DType::I32, {n});
  Buf y = kb.output("y", DType::I32, {n});
  kb.body({n}, 32, [&](Scope& s) {
    Buf flag = s.alloc_fragment("flag", DType::I32, {32});
    Buf mask = s.alloc_fragment("mask", DType::I32, {32});
    s.parallel(32, [&](Idx t) {
      flag(t) = x(t);
      s.ballot(mask, flag);
      y(t) = mask(t);
    });
  });
  try {
    kb.build();
    FAIL() << "expected the ballot to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ballot inside parallel"), std::string::npos) << e.what();
  }
}

TEST(CpuJit, CopyAsyncMovesTheBitsAndZeroFillsTheEdges) {
  KernelBuilder kb("copy_async_tile");
  Dim M = kb.dim("M"), K = kb.dim("K", {.min = 0, .max = 64, .divisible_by = 8});
  Dim R = kb.dim("R");  // c's rows: M rounded up to the 16-row tiles
  Buf a = kb.input("a", DType::BF16, {M, K});
  Buf c = kb.output("c", DType::BF16, {R, 64});
  kb.body({ceildiv(M, 16)}, 64, [&](Scope& s) {
    Buf t = s.alloc_shared("t", DType::BF16, {16, 64}, tensor_core_swizzle(128, 2));
    Idx r0 = s.block_idx(0) * 16;
    s.copy_async(t, a.region({r0, Val(int64_t{0})}, {16, 64}));
    s.async_commit();
    s.async_wait(0);
    s.barrier();
    s.parallel(16, 64, [&](Idx i, Idx j) { c(r0 + i, j) = t(i, j); });
  });
  auto k = jit(kb.build());
  std::mt19937 gen(7);
  for (int64_t m : {1, 16, 37})
    for (int64_t kd : {0, 8, 40, 64}) {
      const int64_t rows = (m + 15) / 16 * 16;
      std::vector<uint16_t> x(static_cast<size_t>(std::max<int64_t>(m * kd, 1))),
          y(static_cast<size_t>(rows * 64), 0xffff);
      for (uint16_t& v : x) v = static_cast<uint16_t>(gen() | 1);  // never +0
      k->launch({.buffers = {x.data(), y.data()}, .dims = {m, kd, rows}, .scalars = {}});
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < 64; ++j)
          ASSERT_EQ(y[i * 64 + j], i < m && j < kd ? x[i * kd + j] : 0)
              << "M=" << m << " K=" << kd << " at (" << i << ", " << j << ")";
    }
}

}  // namespace
}  // namespace tilerun::compiler
