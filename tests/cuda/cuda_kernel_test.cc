// The CUDA backend on a GPU: every kernel's cubin, launched through the driver API on fresh
// random inputs, gives outputs BIT-IDENTICAL to the CPU backend's on the same inputs (strict
// numerics). Without a CUDA device every test skips, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "compiler/analysis/index_eval.h"
#include "compiler/analysis/launch_geometry.h"
#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/lower.h"
#include "compiler/test_kernels.h"
#include "cuda/cuda_test_kernels.h"
#include "graph/runtime/cuda_driver.h"

namespace tilerun::compiler {
namespace {

using graph::cuda_check;
using graph::CudaDriver;

struct Case {
  std::string label;
  Kernel kernel;
  std::vector<int64_t> dims;
  std::vector<double> scalars;
  bool specials = false;  // NaN, ±inf, ±0, subnormals and huge values among f32 inputs
};

using Bytes = std::vector<unsigned char>;

class Inputs {
 public:
  explicit Inputs(uint64_t seed) : rng_(seed) {}

  Bytes make(DType dtype, int64_t numel, bool specials) {
    Bytes out(static_cast<size_t>(dtype_bytes(dtype, numel)));
    for (int64_t i = 0; i < numel; ++i) {
      switch (dtype) {
        case DType::F32:
          put<float>(out, i, f32(specials));
          break;
        case DType::BF16: {
          float v = f32(specials);
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          put<uint16_t>(out, i, static_cast<uint16_t>(bits >> 16));
          break;
        }
        case DType::F16: {
          // Sign, a moderate exponent, any mantissa; now and then any bits at all.
          uint16_t bits =
              specials && pick(8) == 0
                  ? static_cast<uint16_t>(rng_())
                  : static_cast<uint16_t>((pick(2) << 15) | ((10 + pick(9)) << 10) | pick(1024));
          put<uint16_t>(out, i, bits);
          break;
        }
        case DType::I32:
          put<int32_t>(out, i,
                       specials && pick(2) == 0 ? static_cast<int32_t>(rng_())
                                                : static_cast<int32_t>(pick(2001)) - 1000);
          break;
        case DType::I64: {
          int64_t wide = static_cast<int64_t>((uint64_t{rng_()} << 32) ^ rng_());
          put<int64_t>(
              out, i,
              specials && pick(2) == 0 ? wide : static_cast<int64_t>(pick(200001)) - 100000);
          break;
        }
        case DType::U8:
        case DType::F8E4M3:
        case DType::F8E5M2:
        case DType::E8M0:
          put<uint8_t>(out, i, static_cast<uint8_t>(rng_()));
          break;
        default:
          ADD_FAILURE() << "no generator for " << dtype_name(dtype);
      }
    }
    return out;
  }

 private:
  uint32_t pick(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

  float f32(bool specials) {
    if (specials && pick(6) == 0) {
      static const float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(),
                                       -std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       0.0f,
                                       -0.0f,
                                       1e-40f,
                                       -3e-42f,
                                       1.17549435e-38f,
                                       3.4028235e38f,
                                       -3.4028235e38f,
                                       2147483520.0f,
                                       2147483648.0f,
                                       -2147483648.0f,
                                       -2147483904.0f,
                                       9.3e18f,
                                       -9.3e18f,
                                       0.5f,
                                       -0.5f,
                                       1.5f,
                                       -2.5f,
                                       127.5f,
                                       -128.7f,
                                       32767.9f,
                                       40000.0f,
                                       88.7f,
                                       -103.9f,
                                       1.0f};
      return kSpecial[pick(sizeof kSpecial / sizeof kSpecial[0])];
    }
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    if (specials && pick(4) == 0) return std::ldexp(u(rng_), static_cast<int>(pick(80)) - 40);
    return u(rng_);
  }

  template <class T>
  static void put(Bytes& b, int64_t i, T v) {
    std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
  }

  std::mt19937 rng_;
};

std::string element_hex(const Bytes& b, size_t elem, size_t size) {
  std::string out = "0x";
  for (size_t k = size; k-- > 0;) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b[elem * size + k]);
    out += buf;
  }
  return out;
}

class CudaKernelTest : public ::testing::Test {
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

  // Runs `c` on both backends with the same fresh inputs and compares every output bit for bit.
  void run_case(const Case& c) {
    SCOPED_TRACE(c.label);
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("input seed " + std::to_string(seed));
    const KernelSignature& sig = c.kernel.sig;
    SimtKernel simt = lower(c.kernel);

    std::map<std::string, int64_t> dim_values;
    for (size_t i = 0; i < sig.dims.size(); ++i) dim_values[sig.dims[i].name] = c.dims[i];
    Inputs gen(seed);
    std::vector<Bytes> host(sig.buffers.size());
    for (size_t i = 0; i < sig.buffers.size(); ++i) {
      const BufferParam& b = sig.buffers[i];
      int64_t numel = 1;
      for (const Expr& e : b.shape) numel *= eval_index(e, dim_values);
      if (b.is_output) {
        host[i].assign(static_cast<size_t>(dtype_bytes(b.dtype, numel)), 0xA5);  // poison
      } else {
        host[i] = gen.make(b.dtype, numel, c.specials);
      }
    }

    // CPU backend.
    std::vector<Bytes> cpu = host;
    std::vector<void*> cpu_ptrs;
    for (Bytes& b : cpu) cpu_ptrs.push_back(b.data());
    compile_cpu(simt)->launch({cpu_ptrs, c.dims, c.scalars});

    // CUDA backend.
    CudaBinary bin = compile_cuda(simt, "");
    const CudaDriver& d = *driver_;
    CUmodule module = nullptr;
    cuda_check(d.cuModuleLoadData(&module, bin.cubin.data()), "cuModuleLoadData", bin.name);
    CUfunction fn = nullptr;
    cuda_check(d.cuModuleGetFunction(&fn, module, bin.name.c_str()), "cuModuleGetFunction",
               bin.name);
    if (bin.dynamic_shared > 0)  // the tensor-core matmuls' 96 KB of shared tiles
      cuda_check(d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      static_cast<int>(bin.dynamic_shared)),
                 "cuFuncSetAttribute", bin.name);
    std::vector<CUdeviceptr> dev(host.size());
    std::vector<void*> dev_ptrs;
    for (size_t i = 0; i < host.size(); ++i) {
      cuda_check(d.cuMemAlloc(&dev[i], std::max<size_t>(host[i].size(), 16)), "cuMemAlloc",
                 bin.name);
      cuda_check(d.cuMemcpyHtoD(dev[i], host[i].data(), host[i].size()), "cuMemcpyHtoD", bin.name);
      dev_ptrs.push_back(reinterpret_cast<void*>(dev[i]));
    }
    CudaParams params = pack_cuda_params(sig, {dev_ptrs, c.dims, c.scalars});
    LaunchGeometry g = launch_geometry(sig, c.dims);
    if (!g.empty()) {
      cuda_check(
          d.cuLaunchKernel(fn, static_cast<unsigned>(g.grid[0]), static_cast<unsigned>(g.grid[1]),
                           static_cast<unsigned>(g.grid[2]), static_cast<unsigned>(g.threads), 1, 1,
                           static_cast<unsigned>(bin.dynamic_shared), nullptr,
                           params.kernel_params(), nullptr),
          "cuLaunchKernel", bin.name);
    }
    cuda_check(d.cuCtxSynchronize(), "cuCtxSynchronize", bin.name);
    std::vector<Bytes> gpu = host;
    for (size_t i = 0; i < host.size(); ++i) {
      cuda_check(d.cuMemcpyDtoH(gpu[i].data(), dev[i], gpu[i].size()), "cuMemcpyDtoH", bin.name);
      d.cuMemFree(dev[i]);
    }
    d.cuModuleUnload(module);

    for (size_t i = 0; i < sig.buffers.size(); ++i) {
      const BufferParam& b = sig.buffers[i];
      if (!b.is_output) continue;
      if (cpu[i] == gpu[i]) continue;
      size_t size = static_cast<size_t>(std::max<int64_t>(dtype_bytes(b.dtype, 1), 1));
      size_t n = gpu[i].size() / size, mismatches = 0, first = 0;
      for (size_t e = 0; e < n; ++e) {
        if (std::memcmp(cpu[i].data() + e * size, gpu[i].data() + e * size, size) != 0) {
          if (mismatches++ == 0) first = e;
        }
      }
      ADD_FAILURE() << "output '" << b.name << "': " << mismatches << " of " << n
                    << " elements differ between CPU and GPU; first at " << first << ": cpu "
                    << element_hex(cpu[i], first, size) << ", gpu "
                    << element_hex(gpu[i], first, size) << "\n--- CUDA source ---\n"
                    << bin.source;
    }
  }

  static inline const CudaDriver* driver_ = nullptr;
  static inline std::string why_;
  static inline CUdevice device_ = 0;
  static inline CUcontext context_ = nullptr;
};

TEST_F(CudaKernelTest, RaggedElementwise) {
  run_case({"N=1000", cudatest::ragged_elementwise_kernel(), {1000}, {0.75}, true});
  run_case({"N=1", cudatest::ragged_elementwise_kernel(), {1}, {-1.25}, true});
}

TEST_F(CudaKernelTest, BlockReduction) {
  run_case({"T=5 D=300", cudatest::row_reduction_kernel(), {5, 300}, {}, false});
  run_case({"T=3 D=77", cudatest::row_reduction_kernel(), {3, 77}, {}, true});
}

TEST_F(CudaKernelTest, TiledMatmulWithBarriers) {
  run_case({"M=70 N=45 K=37", cudatest::tiled_matmul_kernel(), {70, 45, 37}, {}, false});
  run_case({"M=64 N=96 K=64", cudatest::tiled_matmul_kernel(), {64, 96, 64}, {}, false});
}

TEST_F(CudaKernelTest, BitLevelSemantics) {
  run_case({"N=3000", cudatest::bit_ops_kernel(), {3000}, {}, true});
}

TEST_F(CudaKernelTest, SinCosBothReductions) {
  run_case({"N=2^20", cudatest::sin_cos_kernel(), {1 << 20}, {}, true});
}

// The compiler's shared test kernels (tests/compiler/test_kernels.h), one test each.
TEST_F(CudaKernelTest, Axpb) {
  run_case({"axpb", testing::axpb_kernel(), {1000}, {1.5, -0.25}, true});
}
TEST_F(CudaKernelTest, StrictMath) { run_case({"math", testing::math_kernel(), {777}, {}, true}); }
// NaN inputs reach f32_to_f16_bits through arithmetic, whose NaN sign differs by hardware.
TEST_F(CudaKernelTest, MixedDtypes) {
  run_case({"mixed_dtype", testing::mixed_dtype_kernel(), {1000}, {0.375}, true});
}
// Every code decoded, specials and random f32 rounded to f8e4m3, f8e5m2 and e8m0.
TEST_F(CudaKernelTest, NarrowFloats) {
  run_case({"narrow_float", testing::narrow_float_kernel(), {1 << 16}, {}, true});
}
TEST_F(CudaKernelTest, NarrowRoundTrip) {
  run_case({"narrow_round", testing::narrow_round_kernel(), {1 << 16}, {}, true});
}
TEST_F(CudaKernelTest, Fp4Codes) {
  run_case({"fp4_codes", testing::fp4_kernel(), {1 << 16}, {}, true});
}
TEST_F(CudaKernelTest, Softmax) {
  run_case({"softmax", testing::softmax_kernel(), {6, 500}, {}, false});
}
TEST_F(CudaKernelTest, Rmsnorm) {
  run_case({"rmsnorm", testing::rmsnorm_kernel(), {4, 1000}, {1e-6}, false});
}
TEST_F(CudaKernelTest, Dgamma) {
  run_case({"dgamma", testing::dgamma_kernel(), {33, 150}, {}, false});
}
TEST_F(CudaKernelTest, Matmul) {
  run_case({"matmul", testing::matmul_kernel(), {50, 37, 29}, {}, false});
}
TEST_F(CudaKernelTest, IntOps) {
  run_case({"int_ops", testing::int_kernel(), {4, 100}, {}, false});
}

}  // namespace
}  // namespace tilerun::compiler
