// Tensor-core gemms (ir.h Gemm → wgmma on sm_90a) on the GPU against the CPU backend, which
// runs the tensor core's model (compiler/codegen/mma_model.h):
//   * the model against the H200 on >= 10^5 outputs per format (bf16, f16, FP8, tf32), random and
//   targeted
//     inputs (wide exponent spread, cancellation, subnormals and zeros, infinities and NaN),
//     read from the f32 accumulator before any rounding: bit for bit;
//   * the matmul op's tensor-core kernels: rows of an M = 4096 product equal the same rows at
//     M = 1, 7, 128, 1000 on the GPU (batch invariance), and the GPU's bits equal the CPU's.
// Without a CUDA device every test skips, saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/analysis/launch_geometry.h"
#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/launch_abi.h"
#include "compiler/codegen/mma_model.h"
#include "compiler/ir/builder.h"
#include "compiler/lower.h"
#include "compiler/test_kernels.h"
#include "graph/runtime/cuda_driver.h"
#include "kernels/op_registry.h"

namespace tilerun::compiler {
namespace {

using graph::cuda_check;
using graph::CudaDriver;
using Bytes = std::vector<unsigned char>;

// The probe: c[M, N] (f32, the accumulator itself) = a[M, K] · b[N, K]^T on the tensor cores
// (tests/compiler/test_kernels.h), so the GPU's accumulator bits can be read.
Kernel probe_kernel(DType dtype) { return testing::tensor_core_gemm_kernel(dtype, dtype); }

class TensorCoreGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    driver_ = graph::cuda_driver(&why_);
    if (!driver_) return;
    CUdevice dev;
    cuda_check(driver_->cuDeviceGet(&dev, 0), "cuDeviceGet", "device 0");
    device_ = dev;
    cuda_check(driver_->cuDevicePrimaryCtxRetain(&context_, dev), "cuDevicePrimaryCtxRetain",
               "device 0");
  }
  static void TearDownTestSuite() {
    if (driver_ && context_) driver_->cuDevicePrimaryCtxRelease(device_);
    context_ = nullptr;
  }
  void SetUp() override {
    if (!driver_) GTEST_SKIP() << why_;
    cuda_check(driver_->cuCtxSetCurrent(context_), "cuCtxSetCurrent", "the primary context");
  }

  // Runs `k` on the GPU over `bufs` (every parameter buffer in order; outputs come back).
  // Kernels with tensor-memory-accelerator copies need tensor maps, which this harness does not
  // encode (the executor does: session_gpu_test runs those kernels); such a kernel fails the test
  // here instead of launching with none (a crash).
  static void run_gpu(const Kernel& k, const std::vector<int64_t>& dims, std::vector<Bytes>& bufs) {
    SimtKernel simt = lower(k);
    if (!tensor_map_params(simt).empty()) {
      ADD_FAILURE() << k.sig.name << " needs tensor maps; run it through the executor";
      return;
    }
    CudaBinary bin = compile_cuda(simt, "");
    const CudaDriver& d = *driver_;
    CUmodule module = nullptr;
    cuda_check(d.cuModuleLoadData(&module, bin.cubin.data()), "cuModuleLoadData", bin.name);
    CUfunction fn = nullptr;
    cuda_check(d.cuModuleGetFunction(&fn, module, bin.name.c_str()), "cuModuleGetFunction",
               bin.name);
    if (bin.dynamic_shared > 0)
      cuda_check(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      static_cast<int>(bin.dynamic_shared)),
                 "cuFuncSetAttribute", bin.name);
    std::vector<CUdeviceptr> dev(bufs.size());
    std::vector<void*> ptrs;
    for (size_t i = 0; i < bufs.size(); ++i) {
      cuda_check(d.cuMemAlloc(&dev[i], std::max<size_t>(bufs[i].size(), 16)), "cuMemAlloc",
                 bin.name);
      cuda_check(d.cuMemcpyHtoD(dev[i], bufs[i].data(), bufs[i].size()), "cuMemcpyHtoD", bin.name);
      ptrs.push_back(reinterpret_cast<void*>(dev[i]));
    }
    CudaParams params = pack_cuda_params(k.sig, {ptrs, dims, {}});
    LaunchGeometry g = launch_geometry(k.sig, dims);
    cuda_check(
        d.cuLaunchKernel(fn, static_cast<unsigned>(g.grid[0]), static_cast<unsigned>(g.grid[1]),
                         static_cast<unsigned>(g.grid[2]), static_cast<unsigned>(g.threads), 1, 1,
                         static_cast<unsigned>(bin.dynamic_shared), nullptr, params.kernel_params(),
                         nullptr),
        "cuLaunchKernel", bin.name);
    cuda_check(d.cuCtxSynchronize(), "cuCtxSynchronize", bin.name);
    for (size_t i = 0; i < bufs.size(); ++i) {
      if (k.sig.buffers[i].is_output)
        cuda_check(d.cuMemcpyDtoH(bufs[i].data(), dev[i], bufs[i].size()), "cuMemcpyDtoH",
                   bin.name);
      d.cuMemFree(dev[i]);
    }
    d.cuModuleUnload(module);
  }

  static void run_cpu(const Kernel& k, const std::vector<int64_t>& dims, std::vector<Bytes>& bufs) {
    std::vector<void*> ptrs;
    for (Bytes& b : bufs) ptrs.push_back(b.data());
    compile_cpu(lower(k))->launch({ptrs, dims, {}});
  }

  static inline const CudaDriver* driver_ = nullptr;
  static inline std::string why_;
  static inline CUdevice device_ = 0;
  static inline CUcontext context_ = nullptr;
};

// Input classes for the model test, as raw 16-bit patterns.
enum class Inputs { Random, WideExponents, Cancellation, SubnormalsAndZeros, InfNaN };
const char* inputs_name(Inputs c) {
  switch (c) {
    case Inputs::Random:
      return "random";
    case Inputs::WideExponents:
      return "wide-exponents";
    case Inputs::Cancellation:
      return "cancellation";
    case Inputs::SubnormalsAndZeros:
      return "subnormals-zeros";
    case Inputs::InfNaN:
      return "inf-nan";
  }
  return "?";
}

uint16_t pattern(std::mt19937& rng, bool f16, Inputs c) {
  const int mbits = f16 ? 10 : 7, ebits = f16 ? 5 : 8, bias = f16 ? 15 : 127;
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto make = [&](uint32_t sign, uint32_t e, uint32_t man) {
    return static_cast<uint16_t>((sign << 15) | (e << mbits) | (man & ((1u << mbits) - 1)));
  };
  const uint32_t emax = (1u << ebits) - 1;
  switch (c) {
    case Inputs::Random:  // |x| in [2^-2, 2^2)
      return make(pick(2), bias - 2 + pick(4), pick(1u << mbits));
    case Inputs::WideExponents: {  // exponents over +-12 (f16: its whole normal range)
      int spread = f16 ? 14 : 12;
      return make(pick(2), bias - spread + pick(2 * spread), pick(1u << mbits));
    }
    case Inputs::Cancellation:  // few exponents, so large terms cancel (paired below)
      return make(pick(2), bias + pick(3), pick(1u << mbits));
    case Inputs::SubnormalsAndZeros: {
      uint32_t r = pick(4);
      if (r == 0) return make(pick(2), 0, 0);                          // +-0
      if (r == 1) return make(pick(2), 0, pick(1u << mbits));          // subnormal
      return make(pick(2), 1 + pick(f16 ? 4 : 8), pick(1u << mbits));  // just above
    }
    case Inputs::InfNaN: {
      uint32_t r = pick(64);
      if (r == 0) return make(pick(2), emax, 0);                            // +-inf
      if (r == 1) return make(pick(2), emax, 1 + pick((1u << mbits) - 1));  // NaN
      return make(pick(2), bias - 2 + pick(4), pick(1u << mbits));
    }
  }
  return 0;
}

std::string dname(DType d) { return std::string(dtype_name(d)); }

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Distance in units in the last place between two finite f32 (by their ordered bit patterns).
int64_t ulps(float x, float y) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(x) - ordered(y));
}

// The model (hopper_mma_model) against the H200, every output bit for bit (bench/RESULTS.md,
// "Tensor-core model", tells how it was fitted). TILERUN_MMA_DUMP=FILE writes every input and
// GPU output for fitting a model offline: per launch five i32 (dtype 0 bf16 / 1 f16, input
// class, M, N, K), a (M·K u16), b (N·K u16), c (M·N f32).
TEST_F(TensorCoreGpu, MmaModelAgainstTheH200) {
  const int64_t M = 128, N = 128, K = 128, launches = 2;
  const char* dump_path = std::getenv("TILERUN_MMA_DUMP");
  std::FILE* dump = dump_path ? std::fopen(dump_path, "wb") : nullptr;
  for (DType dt : {DType::BF16, DType::F16}) {
    const bool f16 = dt == DType::F16;
    Kernel k = probe_kernel(dt);
    int64_t total = 0, mismatched = 0, worst_ulps = 0;
    const MmaModel shipped = hopper_mma_model();
    std::mt19937 rng(1234 + static_cast<int>(f16));
    for (Inputs cls : {Inputs::Random, Inputs::WideExponents, Inputs::Cancellation,
                       Inputs::SubnormalsAndZeros, Inputs::InfNaN}) {
      int64_t cls_total = 0, cls_mismatched = 0;
      for (int l = 0; l < launches; ++l) {
        std::vector<uint16_t> a(M * K), b(N * K);
        for (auto& x : a) x = pattern(rng, f16, cls);
        for (auto& x : b) x = pattern(rng, f16, cls);
        if (cls == Inputs::Cancellation)  // b's odd k repeat the even ones, a's negate them
          for (int64_t r = 0; r < M; ++r)
            for (int64_t p = 1; p < K; p += 2) {
              a[r * K + p] = static_cast<uint16_t>(a[r * K + p - 1] ^ 0x8000 ^ (rng() % 4));
              if (r < N) b[r * K + p] = b[r * K + p - 1];
            }
        std::vector<Bytes> bufs(3);
        bufs[0].resize(a.size() * 2), bufs[1].resize(b.size() * 2), bufs[2].assign(M * N * 4, 0xA5);
        std::memcpy(bufs[0].data(), a.data(), bufs[0].size());
        std::memcpy(bufs[1].data(), b.data(), bufs[1].size());
        run_gpu(k, {M, N, K}, bufs);
        const float* c = reinterpret_cast<const float*>(bufs[2].data());
        if (dump) {
          const int32_t head[5] = {f16, static_cast<int32_t>(cls), static_cast<int32_t>(M),
                                   static_cast<int32_t>(N), static_cast<int32_t>(K)};
          std::fwrite(head, sizeof head, 1, dump);
          for (const Bytes& b : bufs) std::fwrite(b.data(), 1, b.size(), dump);
        }
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const float gpu = c[i * N + j];
            const float want = mma_dot(shipped, 0.0f, &a[i * K], 1, &b[j * K], 1, K, f16);
            ++total, ++cls_total;
            const bool nan_both = std::isnan(gpu) && std::isnan(want);
            if (!nan_both && f32_bits(gpu) != f32_bits(want)) {
              ++mismatched, ++cls_mismatched;
              if (std::isfinite(gpu) && std::isfinite(want))
                worst_ulps = std::max(worst_ulps, ulps(gpu, want));
              if (cls_mismatched <= 2)
                std::printf("  %s %s c[%ld,%ld]: gpu %.9g (0x%08x) model %.9g (0x%08x)\n",
                            dname(dt).c_str(), inputs_name(cls), static_cast<long>(i),
                            static_cast<long>(j), gpu, f32_bits(gpu), want, f32_bits(want));
            }
          }
      }
      std::printf("[ mma %s ] %-17s %7ld outputs, %6ld differ from the model\n", dname(dt).c_str(),
                  inputs_name(cls), static_cast<long>(cls_total),
                  static_cast<long>(cls_mismatched));
    }
    std::printf("[ mma %s ] shipped model: %ld of %ld outputs differ, worst %ld ulps\n",
                dname(dt).c_str(), static_cast<long>(mismatched), static_cast<long>(total),
                static_cast<long>(worst_ulps));
    EXPECT_GE(total, 100000);
    EXPECT_EQ(mismatched, 0) << dname(dt) << ": the model differs from the H200";
  }
  if (dump) std::fclose(dump);
}

// The matmul op's tensor-core kernel: GPU rows of an M = 4096 product equal the rows of products
// with M = 1, 7, 128, 1000 (placed off the 128-row tiles), and the GPU's bits equal the CPU's.
TEST_F(TensorCoreGpu, MatmulRowsDoNotDependOnMAndMatchTheCpu) {
  const kernels::OpSchema* schema = kernels::op_registry().find("matmul");
  ASSERT_NE(schema, nullptr);
  // K = 300: the register-staged kernel (K not a multiple of 8). A K of 16-byte rows picks the
  // kernels staged by the tensor memory accelerator, whose tensor maps only the executor encodes:
  // their rows and CPU identity are session_gpu_test's matmul cases. (Until the thirty-sixth
  // session this test still ran K = 296, which had become a TMA kernel launched without maps: a
  // crash.)
  struct Case {
    DType dt;
    int64_t kdim;
    bool tb;
  };
  for (const Case cs : {Case{DType::BF16, 300, false}, Case{DType::F16, 300, false}}) {
    const DType dt = cs.dt;
    const int64_t big = 4096, n = 520, kdim = cs.kdim;
    std::mt19937 rng(99);
    std::vector<uint16_t> a(big * kdim), b(kdim * n);
    for (auto& x : a) x = pattern(rng, dt == DType::F16, Inputs::Random);
    for (auto& x : b) x = pattern(rng, dt == DType::F16, Inputs::Random);
    auto product = [&](int64_t first, int64_t m, bool cpu) {
      std::vector<kernels::TensorType> in = {
          {dt, {m, kdim}},
          {dt, cs.tb ? std::vector<int64_t>{n, kdim} : std::vector<int64_t>{kdim, n}}};
      Attrs attrs{{"transpose_a", false}, {"transpose_b", cs.tb}};
      kernels::OpExpansion ex = schema->expand(in, schema->infer(in, attrs), attrs);
      EXPECT_EQ(ex.calls.size(), 1u);
      std::vector<Bytes> bufs(3);
      bufs[0].resize(m * kdim * 2), bufs[1].resize(b.size() * 2), bufs[2].assign(m * n * 2, 0xA5);
      std::memcpy(bufs[0].data(), a.data() + first * kdim, bufs[0].size());
      std::memcpy(bufs[1].data(), b.data(), bufs[1].size());
      (cpu ? run_cpu : run_gpu)(*ex.calls[0].kernel, {m, n, kdim}, bufs);
      return bufs[2];
    };
    const Bytes all = product(0, big, false);
    for (int64_t m : {1, 7, 128, 1000}) {
      const int64_t first = big - m - 3;
      Bytes part = product(first, m, false);
      EXPECT_EQ(0, std::memcmp(part.data(), all.data() + first * n * 2, part.size()))
          << dtype_name(dt) << " M=" << m << ": GPU rows differ from the M=4096 product's";
    }
    const int64_t m = 200;  // CPU vs GPU on a ragged product
    Bytes gpu = product(0, m, false), cpu = product(0, m, true);
    size_t differ = 0;
    for (size_t e = 0; e < gpu.size() / 2; ++e)
      differ += std::memcmp(gpu.data() + 2 * e, cpu.data() + 2 * e, 2) != 0;
    std::printf("[ matmul %s ] %dx%ldx%ld tb=%d: %zu of %zu outputs differ between CPU and GPU\n",
                dname(dt).c_str(), static_cast<int>(m), static_cast<long>(n),
                static_cast<long>(kdim), cs.tb ? 1 : 0, differ, gpu.size() / 2);
    EXPECT_EQ(differ, 0u) << dname(dt);
  }
}

// The ten candidate models that came closest on a sample, best first (ties in the order they were
// listed), every field of each: what to change where the shipped model misses.
void print_best_candidates(const char* label, const std::vector<MmaModel>& candidates,
                           const std::vector<int64_t>& misses, int64_t sampled) {
  std::vector<size_t> order(candidates.size());
  for (size_t q = 0; q < order.size(); ++q) order[q] = q;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return misses[x] < misses[y]; });
  for (size_t r = 0; r < std::min<size_t>(10, order.size()); ++r) {
    const MmaModel& mm = candidates[order[r]];
    std::printf(
        "[ %s candidate ] group %d frac_bits %d floor_terms %d nearest_final %d "
        "lead_from_exponents %d flush_subnormal_inputs %d sum_bits %d round_tf32_inputs %d: %ld of "
        "%ld differ\n",
        label, mm.group, mm.frac_bits, mm.floor_terms, mm.nearest_final, mm.lead_from_exponents,
        mm.flush_subnormal_inputs, mm.sum_bits, mm.round_tf32_inputs,
        static_cast<long>(misses[order[r]]), static_cast<long>(sampled));
  }
}

// ---- FP8 (wgmma m64nNk32 .e4m3 / .e5m2) ------------------------------------------------------

MmaInput input_of(DType d) { return d == DType::F8E4M3 ? MmaInput::E4M3 : MmaInput::E5M2; }

// An FP8 code of class c: e4m3 (bias 7, S.1111.111 NaN) or e5m2 (bias 15, IEEE specials).
uint8_t pattern8(std::mt19937& rng, DType d, Inputs c) {
  const bool e4 = d == DType::F8E4M3;
  const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto make = [&](uint32_t sign, uint32_t e, uint32_t man) {
    return static_cast<uint8_t>((sign << 7) | (e << mbits) | (man & ((1u << mbits) - 1)));
  };
  switch (c) {
    case Inputs::Random:  // |x| in [2^-2, 2^2)
      return make(pick(2), bias - 2 + pick(4), pick(1u << mbits));
    case Inputs::WideExponents:  // every normal exponent (e4m3's top one less its NaN)
      return make(pick(2), 1 + pick(e4 ? 14 : 30), pick(1u << mbits));
    case Inputs::Cancellation:
      return make(pick(2), bias + pick(3), pick(1u << mbits));
    case Inputs::SubnormalsAndZeros: {
      uint32_t r = pick(4);
      if (r == 0) return make(pick(2), 0, 0);
      if (r == 1) return make(pick(2), 0, pick(1u << mbits));
      return make(pick(2), 1 + pick(4), pick(1u << mbits));
    }
    case Inputs::InfNaN: {
      uint32_t r = pick(64);
      if (r == 0) return e4 ? make(pick(2), 15, 7) : make(pick(2), 31, 0);  // NaN / +-inf
      if (r == 1) return e4 ? make(pick(2), 15, 7) : make(pick(2), 31, 1 + pick(3));
      return make(pick(2), bias - 2 + pick(4), pick(1u << mbits));
    }
  }
  return 0;
}

// The FP8 model (hopper_mma_model_fp8) against the GPU, bit for bit, and how nearby candidates
// of the model's scheme fare on the same outputs (printed: what to change if the shipped one
// misses; the shipped one was fitted this way, bench/RESULTS.md, thirty-sixth session).
// TILERUN_MMA8_DUMP=FILE writes every launch for fitting offline: per launch five i32 (a's and b's
// dtype 0 e4m3 / 1 e5m2, input class, M·N, K), a (M·K u8), b (N·K u8), c (M·N f32). The CPU
// backend's run of the same kernel must equal the GPU's too.
TEST_F(TensorCoreGpu, Fp8ModelMatchesTheGpu) {
  const int64_t M = 128, N = 128, K = 256, launches = 2;
  const char* dump_path = std::getenv("TILERUN_MMA8_DUMP");
  std::FILE* dump = dump_path ? std::fopen(dump_path, "wb") : nullptr;
  std::vector<MmaModel> candidates;
  for (int group : {16, 32})
    for (int frac = 10; frac <= 27; ++frac)
      for (bool floor_terms : {false, true})
        for (bool nearest : {false, true})
          for (bool lead : {true, false})
            for (int sum_bits : {14, 24})
              candidates.push_back({group, frac, floor_terms, nearest, lead, false, sum_bits});
  const MmaModel shipped = hopper_mma_model_fp8();
  std::vector<int64_t> misses(candidates.size(), 0);
  int64_t total = 0, sampled = 0, mismatched = 0, cpu_differ = 0;
  for (auto [da, db] :
       {std::pair{DType::F8E4M3, DType::F8E4M3}, std::pair{DType::F8E5M2, DType::F8E5M2},
        std::pair{DType::F8E4M3, DType::F8E5M2}}) {
    Kernel k = testing::tensor_core_gemm_kernel(da, db);
    std::mt19937 rng(77 + static_cast<int>(da) * 3 + static_cast<int>(db));
    for (Inputs cls : {Inputs::Random, Inputs::WideExponents, Inputs::Cancellation,
                       Inputs::SubnormalsAndZeros, Inputs::InfNaN}) {
      int64_t cls_mismatched = 0;
      for (int l = 0; l < launches; ++l) {
        std::vector<uint8_t> a(M * K), b(N * K);
        for (auto& x : a) x = pattern8(rng, da, cls);
        for (auto& x : b) x = pattern8(rng, db, cls);
        if (cls == Inputs::Cancellation && da == db)  // b's odd k repeat the even ones, a's negate
          for (int64_t r = 0; r < M; ++r)
            for (int64_t p = 1; p < K; p += 2) {
              a[r * K + p] = static_cast<uint8_t>(a[r * K + p - 1] ^ 0x80 ^ (rng() % 2));
              if (r < N) b[r * K + p] = b[r * K + p - 1];
            }
        std::vector<Bytes> bufs(3);
        bufs[0].assign(a.begin(), a.end()), bufs[1].assign(b.begin(), b.end());
        bufs[2].assign(M * N * 4, 0xA5);
        std::vector<Bytes> cpu = bufs;
        run_gpu(k, {M, N, K}, bufs);
        run_cpu(k, {M, N, K}, cpu);
        cpu_differ += std::memcmp(cpu[2].data(), bufs[2].data(), bufs[2].size()) != 0;
        const float* c = reinterpret_cast<const float*>(bufs[2].data());
        if (dump) {
          const int32_t head[5] = {da == DType::F8E5M2, db == DType::F8E5M2,
                                   static_cast<int32_t>(cls), static_cast<int32_t>(M * N),
                                   static_cast<int32_t>(K)};
          std::fwrite(head, sizeof head, 1, dump);
          for (const Bytes& x : bufs) std::fwrite(x.data(), 1, x.size(), dump);
        }
        auto same = [](float x, float y) {
          return (std::isnan(x) && std::isnan(y)) || f32_bits(x) == f32_bits(y);
        };
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const float gpu = c[i * N + j];
            auto model = [&](const MmaModel& mm) {
              return mma_dot8(mm, 0.0f, &a[i * K], 1, input_of(da), &b[j * K], 1, input_of(db), K);
            };
            ++total;
            // The candidates on a sample (the first launch's first 16 rows): enough to rank them.
            if (l == 0 && i < 16) {
              ++sampled;
              for (size_t q = 0; q < candidates.size(); ++q)
                misses[q] += !same(gpu, model(candidates[q]));
            }
            const float want = model(shipped);
            if (!same(gpu, want)) {
              ++mismatched, ++cls_mismatched;
              if (cls_mismatched <= 2)
                std::printf("  %s x %s %s c[%ld,%ld]: gpu %.9g (0x%08x) model %.9g (0x%08x)\n",
                            dname(da).c_str(), dname(db).c_str(), inputs_name(cls),
                            static_cast<long>(i), static_cast<long>(j), gpu, f32_bits(gpu), want,
                            f32_bits(want));
            }
          }
      }
      std::printf("[ mma8 %s x %s ] %-17s %6ld of %ld outputs differ from the shipped model\n",
                  dname(da).c_str(), dname(db).c_str(), inputs_name(cls),
                  static_cast<long>(cls_mismatched), static_cast<long>(M * N * launches));
    }
  }
  if (dump) std::fclose(dump);
  print_best_candidates("mma8", candidates, misses, sampled);
  EXPECT_EQ(cpu_differ, 0) << "launches where the CPU backend's bits differ from the GPU's";
  EXPECT_EQ(mismatched, 0) << "the FP8 model differs from the GPU on " << mismatched << " of "
                           << total << " outputs";
}

// ---- tf32 (wgmma m64nNk8 .tf32: f32 tiles) ----------------------------------------------------

// An f32 of class c, its 23 fraction bits random (so that how the unit reads them as tf32's 10
// matters): f32's exponents, subnormals (some with bits only below tf32's 10), infinities and
// NaNs (some with payload bits only below tf32's 10).
uint32_t pattern32(std::mt19937& rng, Inputs c) {
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto make = [&](uint32_t sign, uint32_t e, uint32_t man) {
    return (sign << 31) | (e << 23) | (man & 0x7fffffu);
  };
  const uint32_t man = (static_cast<uint32_t>(rng()) << 7) ^ static_cast<uint32_t>(rng());
  switch (c) {
    case Inputs::Random:  // |x| in [2^-2, 2^2)
      return make(pick(2), 125 + pick(4), man);
    case Inputs::WideExponents:  // exponents over +-40
      return make(pick(2), 127 - 40 + pick(80), man);
    case Inputs::Cancellation:
      return make(pick(2), 127 + pick(3), man);
    case Inputs::SubnormalsAndZeros: {
      uint32_t r = pick(5);
      if (r == 0) return make(pick(2), 0, 0);
      if (r == 1) return make(pick(2), 0, man);            // subnormal
      if (r == 2) return make(pick(2), 0, man & 0x1fffu);  // bits below tf32's only
      return make(pick(2), 1 + pick(8), man);              // just above
    }
    case Inputs::InfNaN: {
      uint32_t r = pick(64);
      if (r == 0) return make(pick(2), 255, 0);                  // +-inf
      if (r == 1) return make(pick(2), 255, 0x2000u | man);      // NaN
      if (r == 2) return make(pick(2), 255, 1 + pick(0x1fffu));  // NaN, low payload only
      return make(pick(2), 125 + pick(4), man);
    }
  }
  return 0;
}

// The tf32 model (hopper_mma_model_tf32) against the GPU, bit for bit, and how the candidates of
// the model's scheme fare on the same outputs (printed, best first: how the shipped one was
// fitted). TILERUN_MMA32_DUMP=FILE writes every launch for fitting offline: per launch three i32
// (input class, M·N, K), a (M·K f32), b (N·K f32), c (M·N f32). The CPU backend's run of the same
// kernel must equal the GPU's too.
TEST_F(TensorCoreGpu, Tf32ModelMatchesTheGpu) {
  const int64_t M = 128, N = 128, K = 128, launches = 4;
  const char* dump_path = std::getenv("TILERUN_MMA32_DUMP");
  std::FILE* dump = dump_path ? std::fopen(dump_path, "wb") : nullptr;
  std::vector<MmaModel> candidates;
  for (int group : {4, 8})
    for (int frac = 10; frac <= 27; ++frac)
      for (bool floor_terms : {false, true})
        for (bool nearest : {false, true})
          for (bool lead : {true, false})
            for (bool flush : {false, true})
              for (bool round_inputs : {false, true}) {
                MmaModel mm{group, frac, floor_terms, nearest, lead, flush, 24};
                mm.round_tf32_inputs = round_inputs;
                candidates.push_back(mm);
              }
  const MmaModel shipped = hopper_mma_model_tf32();
  std::vector<int64_t> misses(candidates.size(), 0);
  int64_t total = 0, sampled = 0, mismatched = 0, cpu_differ = 0;
  Kernel k = testing::tensor_core_gemm_kernel(DType::F32, DType::F32);
  std::mt19937 rng(2032);
  auto same = [](float x, float y) {
    return (std::isnan(x) && std::isnan(y)) || f32_bits(x) == f32_bits(y);
  };
  for (Inputs cls : {Inputs::Random, Inputs::WideExponents, Inputs::Cancellation,
                     Inputs::SubnormalsAndZeros, Inputs::InfNaN}) {
    int64_t cls_mismatched = 0;
    for (int l = 0; l < launches; ++l) {
      std::vector<uint32_t> a(M * K), b(N * K);
      for (auto& x : a) x = pattern32(rng, cls);
      for (auto& x : b) x = pattern32(rng, cls);
      if (cls == Inputs::Cancellation)  // b's odd k repeat the even ones, a's negate them
        for (int64_t r = 0; r < M; ++r)
          for (int64_t p = 1; p < K; p += 2) {
            a[r * K + p] =
                a[r * K + p - 1] ^ 0x80000000u ^ (static_cast<uint32_t>(rng()) & 0x3fffu);
            if (r < N) b[r * K + p] = b[r * K + p - 1];
          }
      std::vector<Bytes> bufs(3);
      bufs[0].resize(a.size() * 4), bufs[1].resize(b.size() * 4), bufs[2].assign(M * N * 4, 0xA5);
      std::memcpy(bufs[0].data(), a.data(), bufs[0].size());
      std::memcpy(bufs[1].data(), b.data(), bufs[1].size());
      std::vector<Bytes> cpu = bufs;
      run_gpu(k, {M, N, K}, bufs);
      run_cpu(k, {M, N, K}, cpu);
      cpu_differ += std::memcmp(cpu[2].data(), bufs[2].data(), bufs[2].size()) != 0;
      if (dump) {
        const int32_t head[3] = {static_cast<int32_t>(cls), static_cast<int32_t>(M * N),
                                 static_cast<int32_t>(K)};
        std::fwrite(head, sizeof head, 1, dump);
        for (const Bytes& x : bufs) std::fwrite(x.data(), 1, x.size(), dump);
      }
      const float* c = reinterpret_cast<const float*>(bufs[2].data());
      const float* af = reinterpret_cast<const float*>(bufs[0].data());
      const float* bf = reinterpret_cast<const float*>(bufs[1].data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const float gpu = c[i * N + j];
          auto model = [&](const MmaModel& mm) {
            return mma_dot_tf32(mm, 0.0f, &af[i * K], 1, &bf[j * K], 1, K);
          };
          ++total;
          // The candidates on a sample (the first launch's first 8 rows): enough to rank them.
          if (l == 0 && i < 8) {
            ++sampled;
            for (size_t q = 0; q < candidates.size(); ++q)
              misses[q] += !same(gpu, model(candidates[q]));
          }
          const float want = model(shipped);
          if (!same(gpu, want)) {
            ++mismatched, ++cls_mismatched;
            if (cls_mismatched <= 2)
              std::printf("  tf32 %s c[%ld,%ld]: gpu %.9g (0x%08x) model %.9g (0x%08x)\n",
                          inputs_name(cls), static_cast<long>(i), static_cast<long>(j), gpu,
                          f32_bits(gpu), want, f32_bits(want));
          }
        }
    }
    std::printf("[ mma tf32 ] %-17s %6ld of %ld outputs differ from the shipped model\n",
                inputs_name(cls), static_cast<long>(cls_mismatched),
                static_cast<long>(M * N * launches));
  }
  if (dump) std::fclose(dump);
  print_best_candidates("mma tf32", candidates, misses, sampled);
  EXPECT_GE(total, 100000);
  EXPECT_EQ(cpu_differ, 0) << "launches where the CPU backend's bits differ from the GPU's";
  EXPECT_EQ(mismatched, 0) << "the tf32 model differs from the GPU on " << mismatched << " of "
                           << total << " outputs";
}

}  // namespace
}  // namespace tilerun::compiler
