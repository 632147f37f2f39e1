// The whole tiny step on the GPU: standalone launches and CUDA-graph replay give outputs and
// gradients bit-identical to the CPU backend, step after step. Skips where there is no device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "graph/runtime/cuda_driver.h"
#include "kernels/op_catalog.h"
#include "tests/graph/runtime/bf16_round_case.h"
#include "tests/kernels/test_util.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

// The source tree: $TILERUN_SOURCE_DIR when set (test binaries staged on a GPU host), else the
// tree this binary was built from.
std::string source_dir() {
  const char* env = std::getenv("TILERUN_SOURCE_DIR");
  return env && *env ? env : TILERUN_SOURCE_DIR;
}

Model tiny() { return load_model(source_dir() + "/configs/tiny.yaml"); }

TensorMap step(Session& s) {
  s.forward();
  s.backward();
  TensorMap all = s.outputs();
  for (auto& [name, t] : s.gradients()) all["grad." + name] = std::move(t);
  return all;
}

void expect_bit_identical(const TensorMap& a, const TensorMap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    const HostTensor& u = b.at(name);
    ASSERT_EQ(t.data.size(), u.data.size()) << what << " " << name;
    size_t diff = 0;
    while (diff < t.data.size() && t.data[diff] == u.data[diff]) ++diff;
    EXPECT_EQ(diff, t.data.size()) << what << ": " << name << " differs first at byte " << diff;
  }
}

class GpuSession : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!graph::cuda_driver(&why)) GTEST_SKIP() << why;
  }
};

// One step of `m` (forward and backward, a random seed) on the GPU in launch and in graph mode
// gives the CPU's bits, and the graph step passes its check against the double reference.
void expect_step_bit_identical_to_the_cpu(const Model& m, bool fp4_weights = false) {
  uint64_t seed = std::random_device{}();
  std::printf("%s: seed %llu\n", m.name.c_str(), static_cast<unsigned long long>(seed));
  Session cpu(m, {.device = Device::Cpu, .seed = seed, .fp4_weights = fp4_weights});
  Session launch(m, {.device = Device::Cuda,
                     .mode = LaunchMode::Launch,
                     .seed = seed,
                     .fp4_weights = fp4_weights});
  Session graph(m, {.device = Device::Cuda,
                    .mode = LaunchMode::Graph,
                    .seed = seed,
                    .fp4_weights = fp4_weights});
  EXPECT_EQ(launch.device_name(), "cuda");
  TensorMap want = step(cpu);
  expect_bit_identical(want, step(launch), "launch vs cpu");
  expect_bit_identical(want, step(graph), "graph vs cpu");
  CheckResult c = graph.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " " << c.worst_error;
}

TEST_F(GpuSession, TinyStepBitIdenticalToTheCpuInBothModes) {
  expect_step_bit_identical_to_the_cpu(tiny());
}

// configs/tf32.yaml: the MLP with its products in tf32 on the tensor cores (the CPU runs the
// tensor core's tf32 model), within tf32's tolerance of the double reference.
TEST_F(GpuSession, Tf32StepBitIdenticalToTheCpuInBothModes) {
  expect_step_bit_identical_to_the_cpu(load_model(source_dir() + "/configs/tf32.yaml"));
}

// configs/fp8_train.yaml: the MLP trained in FP8 (linear_fp8: every forward and backward product
// on the FP8 tensor-core path, the CPU running its model), within the FP8 tolerance.
TEST_F(GpuSession, Fp8TrainStepBitIdenticalToTheCpuInBothModes) {
  expect_step_bit_identical_to_the_cpu(load_model(source_dir() + "/configs/fp8_train.yaml"));
}

// MoE experts trained through MXFP4 (configs/fp4_experts.yaml): the weights kept as FP4 codes
// and decoded in shared memory by the grouped GEMMs' TMA kernels (forward and dx), as the CPU's.
TEST_F(GpuSession, Fp4ExpertsStepBitIdenticalToTheCpuInBothModes) {
  expect_step_bit_identical_to_the_cpu(load_model(source_dir() + "/configs/fp4_experts.yaml"),
                                       /*fp4_weights=*/true);
}

// Training loops (configs/classifier.yaml: cross-entropy on integer labels, AdamW updates in
// place; configs/transformer.yaml: the causal LM, RoPE tables from sin/cos) give the CPU's bits
// on the GPU in both launch modes: every step's loss values, and the trained weights and last
// gradients after 10 steps.
TEST_F(GpuSession, TrainingBitIdenticalToTheCpuInBothModes) {
  for (const char* config : {"classifier.yaml", "transformer.yaml"}) {
    SCOPED_TRACE(config);
    Model model = load_model(source_dir() + "/configs/" + config);
    uint64_t seed = std::random_device{}();
    std::printf("%s: seed %llu\n", config, static_cast<unsigned long long>(seed));
    auto train = [&](Device device, LaunchMode mode) {
      Session s(model, {.device = device, .mode = mode, .seed = seed});
      TensorMap all;
      for (int i = 0; i < 10; ++i) {
        s.forward();
        for (const LossValue& l : s.losses()) {
          HostTensor v{.dtype = DType::F32, .shape = {}, .data = std::vector<uint8_t>(4)};
          const float f = static_cast<float>(l.value);
          std::memcpy(v.data.data(), &f, 4);
          all["loss." + l.name + "." + std::to_string(i)] = v;
        }
        s.backward();
        for (auto& [name, t] : s.gradients()) all["grad." + name] = std::move(t);
        s.update();
      }
      for (const TensorDecl& t : model.tensors)
        if (t.role == TensorRole::Weight) all[t.name] = s.tensor(t.name);
      return all;
    };
    TensorMap want = train(Device::Cpu, LaunchMode::Graph);
    expect_bit_identical(want, train(Device::Cuda, LaunchMode::Launch), "launch vs cpu");
    expect_bit_identical(want, train(Device::Cuda, LaunchMode::Graph), "graph vs cpu");
  }
}

TEST_F(GpuSession, ElementwiseConfigBitIdenticalToTheCpu) {
  // configs/elementwise.yaml: broadcasting with sum_to gradients, the unary math, gelu, clamp,
  // pow, comparisons, where, a bf16 round trip, iota and fill; launch and graph modes.
  Model m = load_model(source_dir() + "/configs/elementwise.yaml");
  uint64_t seed = std::random_device{}();
  Session cpu(m, {.device = Device::Cpu, .seed = seed});
  Session launch(m, {.device = Device::Cuda, .mode = LaunchMode::Launch, .seed = seed});
  Session graph(m, {.device = Device::Cuda, .mode = LaunchMode::Graph, .seed = seed});
  TensorMap want = step(cpu);
  expect_bit_identical(want, step(launch), "elementwise.yaml launch vs cpu");
  expect_bit_identical(want, step(graph), "elementwise.yaml graph vs cpu");
  CheckResult c = graph.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " " << c.worst_error;
}

// Every bf16 store rounds as the CPU's does: on CUDA the hardware's cvt.rn.bf16.f32 and a NaN
// select (CallOp::Bf16Bits), on the CPU integer rounding of the bits; every exponent (subnormals
// too) with fractions at and around the halfway point, then random bit patterns, bit for bit
// against the CPU and the rounding worked out in the test.
TEST_F(GpuSession, Bf16StoresRoundLikeTheCpu) {
  const uint64_t seed = std::random_device{}();
  const std::vector<uint32_t> x = testing::bf16_rounding_patterns(seed, 1 << 20);
  const std::vector<uint16_t> gpu = testing::bf16_cast_in_session(Device::Cuda, x);
  const std::vector<uint16_t> cpu = testing::bf16_cast_in_session(Device::Cpu, x);
  size_t off = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (gpu[i] != cpu[i] || gpu[i] != testing::bf16_rounded(x[i])) {
      if (++off <= 8)
        ADD_FAILURE() << "f32 bits " << std::hex << x[i] << ": GPU " << gpu[i] << ", CPU " << cpu[i]
                      << ", want " << testing::bf16_rounded(x[i]);
    }
  }
  EXPECT_EQ(off, 0u) << "of " << x.size() << " (seed " << seed << ")";
}

TEST_F(GpuSession, EveryOpFamilyBitIdenticalToTheCpu) {
  // configs/ops.yaml: softmax, mul, scale, silu, rmsnorm, matmul (nt and the transposed
  // gradients), add, forward and backward, on odd sizes.
  Model ops = load_model(source_dir() + "/configs/ops.yaml");
  uint64_t seed = std::random_device{}();
  Session cpu(ops, {.device = Device::Cpu, .seed = seed});
  Session gpu(ops, {.device = Device::Cuda, .seed = seed});
  expect_bit_identical(step(cpu), step(gpu), "ops.yaml gpu vs cpu");
  CheckResult c = gpu.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " " << c.worst_error;
}

// Every op of every family, on each of its kernel cases (its family's `tests.kernel`) and dtypes:
// a one-op model run forward (and backward, where the op has a gradient rule) on the CPU and the
// GPU gives the same bits. The model is parsed before the skip, so CI checks it is well formed.
struct OpParam {
  kernels::testing::OpCase kase;
  DType dtype = DType::F32;
};

std::ostream& operator<<(std::ostream& os, const OpParam& p) {
  return os << p.kase << " " << dtype_name(p.dtype);
}

std::vector<OpParam> op_params() {
  std::vector<OpParam> out;
  for (const kernels::testing::OpCase& c : kernels::testing::registry_cases(/*gradient=*/false))
    for (DType dtype : kernels::testing::schema_of(c.op).dtypes) {
      kernels::testing::OpCase k = c;
      k.c.attrs = kernels::testing::case_attrs(kernels::testing::schema_of(c.op), c.c, dtype);
      out.push_back({k, dtype});
    }
  return out;
}

bool running_sum(const kernels::OpTestCase& c, size_t i) {
  return std::find(c.running_sums.begin(), c.running_sums.end(), static_cast<int>(i)) !=
         c.running_sums.end();
}

bool permutation(const kernels::OpTestCase& c, size_t i) {
  return std::find(c.permutations.begin(), c.permutations.end(), static_cast<int>(i)) !=
         c.permutations.end();
}

// inputs x0, x1, ... uniform in the case's range; one layer `l` with the op; outputs l.y0, ...
// An input of running sums (OpTestCase::running_sums) is the cumsum of its drawn steps xi_steps,
// a permutation (OpTestCase::permutations) the argsort of its drawn keys xi_keys.
std::string one_op_model(const OpParam& p) {
  const kernels::OpSchema& schema = kernels::testing::schema_of(p.kase.op);
  std::ostringstream y;
  y << "model: " << p.kase.name() << "\ndtype: " << dtype_name(p.dtype) << "\ninputs:\n";
  std::string ins, outs, names, sums;
  for (size_t i = 0; i < p.kase.c.shapes.size(); ++i) {
    const std::string x = "x" + std::to_string(i);
    if (running_sum(p.kase.c, i))
      sums += "      - {op: cumsum, in: " + x + "_steps, out: " + x + "}\n";
    if (permutation(p.kase.c, i))
      sums += "      - {op: argsort, in: " + x + "_keys, out: " + x +
              ", bins: " + std::to_string(p.kase.c.int_hi) + "}\n";
    y << "  " << x
      << (running_sum(p.kase.c, i)   ? "_steps"
          : permutation(p.kase.c, i) ? "_keys"
                                     : "")
      << ": {shape: [";
    for (size_t d = 0; d < p.kase.c.shapes[i].size(); ++d)
      y << (d ? ", " : "") << p.kase.c.shapes[i][d];
    if (kernels::testing::integer_input(schema, i))  // rounds to int_lo .. int_hi - 1
      y << "], dtype: " << dtype_name(schema.input_dtypes.at(static_cast<int>(i)))
        << ", init: {uniform: {low: " << p.kase.c.int_lo - 0.5
        << ", high: " << p.kase.c.int_hi - 0.5 << "}}}\n";
    else if (schema.input_dtypes.count(static_cast<int>(i)) ||
             p.kase.c.input_dtypes.count(static_cast<int>(i)))
      y << "], dtype: "
        << dtype_name(kernels::testing::input_dtype(schema, i, p.dtype, p.kase.c.input_dtypes))
        << ", init: {uniform: {low: " << p.kase.c.lo << ", high: " << p.kase.c.hi << "}}}\n";
    else
      y << "], init: {uniform: {low: " << p.kase.c.lo << ", high: " << p.kase.c.hi << "}}}\n";
    ins += (i ? ", x" : "x") + std::to_string(i);
  }
  // As many outputs as inference gives (split's depend on its attributes).
  const std::vector<kernels::TensorType> in_types =
      kernels::testing::input_types(schema, p.kase.c.shapes, p.dtype, p.kase.c.input_dtypes);
  const size_t n_out =
      schema.infer(in_types, kernels::testing::with_defaults(schema, p.kase.c.attrs)).size();
  for (size_t i = 0; i < n_out; ++i) {
    outs += (i ? ", y" : "y") + std::to_string(i);
    names += (i ? ", l.y" : "l.y") + std::to_string(i);
  }
  y << "layers:\n  - name: l\n    ops:\n"
    << sums << "      - {op: " << p.kase.op << ", in: [" << ins << "], out: [" << outs << "]";
  for (const auto& [name, value] : p.kase.c.attrs)
    y << ", " << name << ": " << kernels::attr_value_text(value);
  y << "}\noutputs: [" << names << "]\n";
  return y.str();
}

class GpuOpIdentity : public ::testing::TestWithParam<OpParam> {};

TEST_P(GpuOpIdentity, BitIdenticalToTheCpu) {
  const OpParam& p = GetParam();
  std::string yaml = one_op_model(p);
  SCOPED_TRACE(yaml);
  Model model = parse_model(yaml, p.kase.name() + ".yaml");
  std::string why;
  if (!graph::cuda_driver(&why)) GTEST_SKIP() << why;
  bool backward = static_cast<bool>(kernels::testing::schema_of(p.kase.op).gradient);
  uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Session cpu(model, {.device = Device::Cpu, .seed = seed, .forward_only = !backward});
  Session gpu(model, {.device = Device::Cuda, .seed = seed, .forward_only = !backward});
  auto run = [&](Session& s) {
    if (!backward) {
      s.forward();
      return s.outputs();
    }
    return step(s);
  };
  // A case drawn outside an index contract (bincount's ids past its bins) fails the step: the
  // GPU must fail it the same way, naming the same element and value.
  std::string cpu_error;
  TensorMap want;
  try {
    want = run(cpu);
  } catch (const Error& e) {
    cpu_error = e.what();
  }
  if (!cpu_error.empty()) {
    try {
      run(gpu);
      ADD_FAILURE() << "the CPU failed the step (" << cpu_error << "), the GPU did not";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), cpu_error);
    }
    return;
  }
  expect_bit_identical(want, run(gpu), "gpu vs cpu");
}

INSTANTIATE_TEST_SUITE_P(Ops, GpuOpIdentity, ::testing::ValuesIn(op_params()),
                         [](const ::testing::TestParamInfo<OpParam>& info) {
                           return info.param.kase.name() + "_" +
                                  std::string(dtype_name(info.param.dtype));
                         });

// The matmul's 256-row tile (kernels/matmul.cc tc_tile_rows picks it at M = 4096, N = 1024,
// K = 4096, as MatmulSplitK.TheBigTileGpuTestsProductsRunTheBigTile checks on the CPU; its CPU
// bits equal the 128-row kernel's, kernels_kernel_test BigTile*): on the GPU, rows of the M = 4096
// products (a [K, N] and a transposed [N, K] b) equal the same rows of an M = 1000 product (64-row
// tiles, whose GPU bits the op cases check against the CPU). (Its first version had K = 520, where
// the cost model keeps 128-row tiles: it passed without running the large tile.)
TEST_F(GpuSession, BigTileMatmulRowsEqualTheSmallTilesRows) {
  auto model = [](int64_t m) {
    return parse_model("model: bigtile\ndtype: bf16\ndims: {M: " + std::to_string(m) +
                           ", N: 1024, K: 4096}\ninputs:\n  x: {shape: [M, K]}\nlayers:\n"
                           "  - name: mm\n    weights:\n"
                           "      w: {shape: [K, N], init: {normal: {mean: 0, std: 0.5}}}\n"
                           "      v: {shape: [N, K], init: {normal: {mean: 0, std: 0.5}}}\n"
                           "    ops:\n      - {op: matmul, in: [x, w], out: y}\n"
                           "      - {op: matmul, in: [x, v], out: z, transpose_b: true}\n"
                           "outputs: [mm.y, mm.z]\n",
                       "bigtile.yaml");
  };
  const uint64_t seed = std::random_device{}();
  Session big(model(4096), {.device = Device::Cuda, .seed = seed, .forward_only = true});
  big.forward();
  const HostTensor x = big.tensor("x");
  const int64_t m = 1000, first = 4096 - m - 3, k = 4096, n = 1024;
  Session small(model(m), {.device = Device::Cuda, .seed = seed, .forward_only = true});
  HostTensor part{.dtype = x.dtype, .shape = {m, k}, .data = {}};
  part.data.assign(x.data.begin() + first * k * 2, x.data.begin() + (first + m) * k * 2);
  small.set_tensor("x", part);
  small.set_tensor("mm.w", big.tensor("mm.w"));
  small.set_tensor("mm.v", big.tensor("mm.v"));
  small.forward();
  for (const char* out : {"mm.y", "mm.z"}) {
    const HostTensor all = big.tensor(out), rows = small.tensor(out);
    ASSERT_EQ(rows.data.size(), static_cast<size_t>(m * n * 2)) << out;
    EXPECT_EQ(0, std::memcmp(rows.data.data(), all.data.data() + first * n * 2, rows.data.size()))
        << out << ": rows of the 256-row tiles differ from the small product's";
  }
}

TEST_F(GpuSession, PdlOnAndOffBitIdentical) {
  uint64_t seed = std::random_device{}();
  for (LaunchMode mode : {LaunchMode::Graph, LaunchMode::Launch}) {
    Session on(tiny(), {.device = Device::Cuda, .mode = mode, .pdl = true, .seed = seed});
    Session off(tiny(), {.device = Device::Cuda, .mode = mode, .pdl = false, .seed = seed});
    expect_bit_identical(step(on), step(off), "pdl on vs off");
  }
}

TEST_F(GpuSession, ProfileGivesEveryKernelItsDuration) {
  Session s(tiny(), {.device = Device::Cuda, .seed = 3});
  step(s);
  std::vector<KernelTiming> k = s.profile();
  EXPECT_EQ(static_cast<int>(k.size()), s.compile_stats().kernels_total);
  for (const KernelTiming& t : k) {
    EXPECT_GT(t.us, 0) << t.kernel;
    EXPECT_FALSE(t.source.empty()) << t.kernel;
  }
  // Where libcupti is present the durations are the GPU's own; say which was used.
  std::printf("kernel durations from: %s\n", k.front().source.c_str());
  // A second pass works the same way (CUPTI detaches after each), and steps still run after it.
  std::vector<KernelTiming> again = s.profile();
  ASSERT_EQ(again.size(), k.size());
  EXPECT_EQ(again.front().source, k.front().source);
  for (const KernelTiming& t : again) EXPECT_GT(t.us, 0) << t.kernel;
  step(s);
  for (const LayerTiming& l : s.timings()) {
    EXPECT_GT(l.kernels_us, 0) << l.layer;
    EXPECT_LE(l.kernels_us, l.device_us * 4) << l.layer;  // the same work, give or take gaps
  }
}

TEST_F(GpuSession, HundredStepsBitIdentical) {
  Session s(tiny(),
            {.device = Device::Cuda, .mode = LaunchMode::Graph, .seed = std::random_device{}()});
  TensorMap first = step(s);
  for (int i = 1; i < 100; ++i) {
    TensorMap again = step(s);
    expect_bit_identical(first, again, "step " + std::to_string(i));
    if (HasFailure()) break;
  }
}

TEST_F(GpuSession, DevicePointerTimingsAreReported) {
  Session s(tiny(), {.device = Device::Cuda, .seed = 1});
  step(s);
  std::vector<LayerTiming> t = s.timings();
  ASSERT_EQ(t.size(), 4u);
  for (const LayerTiming& l : t) {
    EXPECT_GT(l.device_us, 0) << l.layer << " " << l.direction;
    EXPECT_GT(l.host_us, 0) << l.layer << " " << l.direction;
  }
}

}  // namespace
}  // namespace tilerun

namespace tilerun {
namespace {

TEST_F(GpuSession, BindsInputsFromDeviceMemory) {
  const graph::CudaDriver* d = graph::cuda_driver();
  uint64_t seed = std::random_device{}();
  Session host(tiny(), {.device = Device::Cuda, .seed = seed});
  Session dev(tiny(), {.device = Device::Cuda, .seed = seed + 1});
  // The same x as `host`, handed over in device memory.
  HostTensor x = host.tensor("x");
  CUdeviceptr p = 0;
  ASSERT_EQ(d->cuMemAlloc(&p, x.data.size() + 16), CUDA_SUCCESS);
  ASSERT_EQ(d->cuMemcpyHtoD(p, x.data.data(), x.data.size()), CUDA_SUCCESS);
  ASSERT_EQ(d->cuCtxSynchronize(), CUDA_SUCCESS);  // the copy may still be in flight
  TensorMap weights = initialize_tensors(tiny(), seed);
  weights.erase("x");  // x stays seed+1's unless the device copy lands
  dev.set_tensors(weights);
  dev.set_tensor_from_device("x", reinterpret_cast<const void*>(p));
  expect_bit_identical(step(host), step(dev), "device-bound vs host-bound");
  try {
    dev.set_tensor_from_device("x", reinterpret_cast<const void*>(p + 4));
    ADD_FAILURE() << "a misaligned device pointer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
  d->cuMemFree(p);
}

}  // namespace
}  // namespace tilerun
