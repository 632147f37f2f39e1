// Every op's kernels, forward and backward, through the CPU JIT on fresh random inputs of the
// shapes its family lists (odd, non-tile-multiple sizes), in each of its dtypes, against the
// double-precision reference: outputs poisoned with NaN first, within a per-dtype tolerance
// (f32: relative L2 <= 1e-5), and bit-identical results from two launches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/mma_model.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/layout.h"
#include "compiler/lower.h"
#include "kernels/matmul_tc.h"
#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;
using testing::KernelRunner;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Relative L2 error over the tensor, and max |error| relative to max(1, max |ref|). f32 kernels
// compute in f32; bf16/f16 ones compute in f32 too and round once on store.
struct Tolerance {
  double rel_l2, max_abs;
};
Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return {1e-2, 2e-2};
    case DType::F16:
      return {2e-3, 4e-3};
    default:
      return {1e-5, 1e-5};
  }
}

// One runner for the binary: each distinct kernel is JIT-compiled once.
KernelRunner& runner() {
  static KernelRunner* r = new KernelRunner;
  return *r;
}

// Relative L2 error within tol.rel_l2, where the reference's size counts as at least 1% of
// `scale` (the typical magnitude of an output given its inputs): an output far smaller than the
// inputs that made it comes from cancellation (silu_grad near its zero, x ≈ -1.28; a sum of 1025
// random signs that lands near 0), and its relative error says more about that than about the
// kernel. Max abs error within tol.max_abs·max(1, largest reference value).
::testing::AssertionResult matches(const std::vector<double>& got, const RefTensor& want,
                                   Tolerance tol, double scale = 0) {
  if (got.size() != want.data.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", want " << want.numel();
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && !std::isnan(want.data[i]))
      return ::testing::AssertionFailure() << "element " << i << " is NaN (never written?)";
    double e = std::abs(got[i] - want.data[i]);
    err2 += e * e;
    ref2 += want.data[i] * want.data[i];
    if (e > max_err) max_err = e, worst = i;
    max_ref = std::max(max_ref, std::abs(want.data[i]));
  }
  const double n = static_cast<double>(std::max<size_t>(got.size(), 1));
  double rel_l2 = std::sqrt(err2) / std::max({std::sqrt(ref2), 1e-2 * scale * std::sqrt(n), 1e-30});
  if (!(rel_l2 <= tol.rel_l2) || !(max_err <= tol.max_abs * std::max(1.0, max_ref)))
    return ::testing::AssertionFailure()
           << "relative L2 " << rel_l2 << ", max |err| " << max_err << " at element " << worst
           << " (got " << got[worst] << ", want " << want.data[worst] << ")";
  return ::testing::AssertionSuccess();
}

// One kernel case of an op (its family's `tests.kernel`) in one of the op's dtypes.
struct KernelParam {
  testing::OpCase kase;
  DType dtype = DType::F32;
};

std::ostream& operator<<(std::ostream& os, const KernelParam& p) {
  return os << p.kase << " " << dtype_name(p.dtype);
}

std::vector<KernelParam> kernel_params() {
  std::vector<KernelParam> out;
  for (const testing::OpCase& c : testing::registry_cases(/*gradient=*/false)) {
    const OpSchema& s = testing::schema_of(c.op);
    for (DType dtype : s.dtypes) {
      // An op without inputs (fill) gets its dtype from its attribute.
      testing::OpCase k = c;
      k.c.attrs = testing::case_attrs(s, c.c, dtype);
      out.push_back({k, dtype});
    }
  }
  return out;
}

class KernelTest : public ::testing::TestWithParam<KernelParam> {
 protected:
  void SetUp() override { RecordProperty("seed", std::to_string(testing::test_seed())); }
  const std::string& op() const { return GetParam().kase.op; }
  const OpTestCase& kase() const { return GetParam().kase.c; }
  DType dtype() const { return GetParam().dtype; }

  // Random inputs, rounded to the dtype so the reference sees exactly what the kernel reads.
  std::vector<RefTensor> inputs() {
    const OpSchema& schema = testing::schema_of(op());
    std::vector<RefTensor> in = testing::random_inputs(rng_, schema, kase());
    for (size_t i = 0; i < in.size(); ++i)
      in[i] =
          testing::rounded(testing::input_dtype(schema, i, dtype(), kase().input_dtypes), in[i]);
    return in;
  }

  std::mt19937_64 rng_{testing::test_seed()};
};

TEST_P(KernelTest, MatchesReference) {
  const std::vector<DType>& only = kase().reference_dtypes;
  if (!only.empty() && std::find(only.begin(), only.end(), dtype()) == only.end())
    GTEST_SKIP() << "compared with the unfused ops in this dtype (OpTestCase::reference_dtypes)";
  std::vector<RefTensor> in = inputs();
  std::vector<RefTensor> want = testing::run_reference(op(), in, kase().attrs);
  std::vector<Bytes> got = runner().run(op(), in, kase().attrs, dtype(), kNaN, kase().input_dtypes);
  ASSERT_EQ(got.size(), want.size());
  // An output reduced from f inputs of random sign has a typical size of sqrt(f) times theirs,
  // and f32 summation errors grow with it; f is estimated as the largest input over the output.
  double scale = 0;
  int64_t largest_input = 1;
  for (const RefTensor& t : in) {
    largest_input = std::max(largest_input, t.numel());
    for (double v : t.data) scale = std::max(scale, std::abs(v));
  }
  // An integer output (an index, a count) is exact in every dtype.
  for (size_t i = 0; i < got.size(); ++i) {
    const double fan_in =
        std::max(1.0, static_cast<double>(largest_input) / std::max<int64_t>(1, want[i].numel()));
    // A tf32 product (matmul's precision: tf32) reads its f32 inputs with 10 fraction bits.
    const auto p = kase().attrs.find("precision");
    const bool tf32 = dtype() == DType::F32 && p != kase().attrs.end() &&
                      std::get<std::string>(p->second) == "tf32";
    const Tolerance tol = tf32 ? Tolerance{4e-3, 8e-3} : tolerance(dtype());
    EXPECT_TRUE(matches(testing::decode(got[i]), want[i],
                        dtype_is_float(got[i].dtype) ? tol : Tolerance{0, 0},
                        scale * std::sqrt(fan_in)))
        << "output " << i;
  }
}

// Two launches (with different poison) give the same bits.
TEST_P(KernelTest, Deterministic) {
  std::vector<RefTensor> in = inputs();
  std::vector<Bytes> a = runner().run(op(), in, kase().attrs, dtype(), kNaN, kase().input_dtypes);
  std::vector<Bytes> b = runner().run(op(), in, kase().attrs, dtype(), 1234.5, kase().input_dtypes);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a[i].data == b[i].data) << "output " << i << " differs between launches";
}

INSTANTIATE_TEST_SUITE_P(Ops, KernelTest, ::testing::ValuesIn(kernel_params()),
                         [](const ::testing::TestParamInfo<KernelParam>& info) {
                           return info.param.kase.name() + "_" +
                                  std::string(dtype_name(info.param.dtype));
                         });

// Every op's worked examples (its family's `tests.examples`: NaN, ±0, ±inf where they matter)
// through the f32 kernels on the CPU: the written outputs to 4e-7 relative (a few f32 roundings),
// NaN where NaN is written, infinities and the sign of zeros exact.
struct ExampleParam {
  std::string op;
  int index = 0;
};

std::ostream& operator<<(std::ostream& os, const ExampleParam& p) {
  return os << p.op << " example " << p.index;
}

std::vector<ExampleParam> example_params() {
  std::vector<ExampleParam> out;
  for (const std::string& op : op_registry().names())
    for (size_t i = 0; i < op_registry().find(op)->tests.examples.size(); ++i)
      out.push_back({op, static_cast<int>(i)});
  return out;
}

class KernelExample : public ::testing::TestWithParam<ExampleParam> {};

TEST_P(KernelExample, GivesTheWrittenOutputs) {
  const OpExample& ex = testing::schema_of(GetParam().op).tests.examples[GetParam().index];
  std::vector<Bytes> got =
      runner().run(GetParam().op, ex.inputs, ex.attrs, DType::F32, 1234.5, ex.input_dtypes);
  ASSERT_EQ(got.size(), ex.outputs.size());
  for (size_t o = 0; o < got.size(); ++o) {
    std::vector<double> g = testing::decode(got[o]);
    const std::vector<double>& w = ex.outputs[o].data;
    ASSERT_EQ(g.size(), w.size()) << "output " << o;
    // f32 kernels against values written to double precision: a few f32 roundings of the
    // element (1e-6 relative), and of the output's scale for values computed by cancellation.
    double scale = 0;
    for (double v : w)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < g.size(); ++i) {
      bool ok =
          std::isnan(w[i])
              ? std::isnan(g[i])
              : (g[i] == w[i] || std::abs(g[i] - w[i]) <= 1e-6 * std::abs(w[i]) + 1e-7 * scale) &&
                    (w[i] != 0 || std::signbit(g[i]) == std::signbit(w[i]));
      EXPECT_TRUE(ok) << "output " << o << " element " << i << ": " << g[i] << ", want " << w[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, KernelExample, ::testing::ValuesIn(example_params()),
                         [](const ::testing::TestParamInfo<ExampleParam>& info) {
                           return info.param.op + "_example" + std::to_string(info.param.index);
                         });

// Every registered op has kernels and at least one kernel case in its family file.
TEST(KernelCoverage, EveryOpHasKernelsAndACase) {
  for (const std::string& name : op_registry().names()) {
    EXPECT_TRUE(op_registry().find(name)->expand) << name << " has no kernels";
    EXPECT_FALSE(op_registry().find(name)->tests.kernel.empty()) << name << " has no kernel case";
  }
}

// Every kernel of every case and dtype also compiles for the GPU (CUDA C++ through NVRTC to an
// sm_90a cubin; no device needed), so a kernel the CPU runs is never one the GPU path rejects.
TEST(CudaCompile, EveryKernelCompilesToCubin) {
  std::set<const compiler::Kernel*> seen;
  for (const KernelParam& p : kernel_params()) {
    const OpSchema& schema = testing::schema_of(p.kase.op);
    Attrs attrs = testing::with_defaults(schema, p.kase.c.attrs);
    std::vector<TensorType> in =
        testing::input_types(schema, p.kase.c.shapes, p.dtype, p.kase.c.input_dtypes);
    OpExpansion ex = schema.expand(in, schema.infer(in, attrs), attrs);
    for (const KernelCall& call : ex.calls) {
      if (!seen.insert(call.kernel.get()).second) continue;
      compiler::CudaBinary bin = compiler::compile_cuda(*call.kernel, "");
      EXPECT_FALSE(bin.cubin.empty()) << call.kernel->sig.name;
      std::printf("[ nvrtc    ] %-28s %8.1f ms\n", call.kernel->sig.name.c_str(), bin.compile_ms);
    }
  }
}

// A matmul's summation order depends only on the shape (never the grid): the kernel the
// expansion picks ("matmul_nn_16x16g4_f32") splits K over G groups, group g taking every k with
// (k / 16) % G == g, each group one fma chain in k order from +0, and the groups' chains added
// in group order; a long K over few outputs ("_splitk") first cuts K into slices of L (the
// expansion's dims), each slice such chains from +0, the slices added in slice order. A skinny
// product (N <= 32, a long K: "matmul_skinny_*") is the same with 8 groups of 4 (warp w of a
// slice's 32-k step takes its k in [4 w, 4 w + 4)). Emulated here in float, bit for bit.
TEST(MatmulOrder, FmaChainsAddedInGroupOrder) {
  struct Shape {
    int64_t m, n, k;
    bool ta, tb;
  };
  int split_shapes = 0;
  for (Shape sh : {Shape{33, 40, 700, false, false}, Shape{20, 18, 1100, false, true},
                   Shape{130, 1000, 300, true, false}, Shape{7, 33, 130, true, true},
                   Shape{40, 24, 4100, false, false}, Shape{9, 24, 2300, false, true},
                   Shape{40, 24, 2144, true, false}, Shape{33, 20, 1030, true, true}}) {
    std::mt19937_64 rng(testing::test_seed());
    RefTensor a =
        testing::random_tensor(rng, sh.ta ? std::vector{sh.k, sh.m} : std::vector{sh.m, sh.k});
    RefTensor b =
        testing::random_tensor(rng, sh.tb ? std::vector{sh.n, sh.k} : std::vector{sh.k, sh.n});
    a = testing::rounded(DType::F32, a);
    b = testing::rounded(DType::F32, b);
    Attrs attrs{{"transpose_a", sh.ta}, {"transpose_b", sh.tb}};
    const OpSchema& schema = testing::schema_of("matmul");
    Attrs full = testing::with_defaults(schema, attrs);
    std::vector<TensorType> in = {{DType::F32, a.shape}, {DType::F32, b.shape}};
    OpExpansion ex = schema.expand(in, schema.infer(in, full), full);
    const std::string& name = ex.calls[0].kernel->sig.name;
    const bool skinny = name.rfind("matmul_skinny_", 0) == 0;
    const bool split = skinny || name.find("_splitk") != std::string::npos;
    ASSERT_EQ(ex.calls.size(), split ? 2u : 1u) << name;
    split_shapes += split;
    const int64_t slice = split ? ex.calls[0].dims[3] : sh.k;  // (M, N, K, L, S)
    ASSERT_TRUE(!split || (slice > 0 && slice < sh.k)) << name;
    size_t gpos = name.rfind('g');
    ASSERT_TRUE(skinny || gpos != std::string::npos) << name;
    const int64_t groups = skinny ? 8 : std::stoll(name.substr(gpos + 1)), bk = skinny ? 4 : 16;
    ASSERT_GE(groups, 1) << name;
    std::vector<Bytes> got = runner().run("matmul", {a, b}, attrs, DType::F32, kNaN);
    ASSERT_EQ(got.size(), 1u);
    const float* c = reinterpret_cast<const float*>(got[0].data.data());
    auto av = [&](int64_t i, int64_t p) {
      return static_cast<float>(sh.ta ? a.data[p * sh.m + i] : a.data[i * sh.k + p]);
    };
    auto bv = [&](int64_t p, int64_t j) {
      return static_cast<float>(sh.tb ? b.data[j * sh.k + p] : b.data[p * sh.n + j]);
    };
    int64_t mismatches = 0;
    for (int64_t i = 0; i < sh.m; ++i)
      for (int64_t j = 0; j < sh.n; ++j) {
        float total = 0;
        for (int64_t lo = 0; lo < sh.k; lo += slice) {
          float part = 0;
          for (int64_t g = 0; g < groups; ++g) {
            float chain = 0.0f;
            for (int64_t p = lo; p < std::min(sh.k, lo + slice); ++p)
              if (p / bk % groups == g) chain = std::fmaf(av(i, p), bv(p, j), chain);
            part = g == 0 ? chain : part + chain;
          }
          total = lo == 0 ? part : total + part;
        }
        uint32_t want, have;
        std::memcpy(&want, &total, 4);
        std::memcpy(&have, &c[i * sh.n + j], 4);
        if (want != have && mismatches++ < 3)
          ADD_FAILURE() << name << " " << sh.m << "x" << sh.n << "x" << sh.k << ": c[" << i << ", "
                        << j << "] = " << c[i * sh.n + j] << ", the ordered chains give " << total;
      }
    EXPECT_EQ(mismatches, 0) << name << " " << sh.m << "x" << sh.n << "x" << sh.k;
  }
  EXPECT_EQ(split_shapes, 5) << "the long-K shapes split K over the grid";
}

// bf16/f16 matmuls run on the tensor cores (kernels/matmul.cc, ir.h Gemm): every output is the
// tensor core's model (compiler/codegen/mma_model.h) of its dot product, from +0, in k order,
// rounded to the dtype once at the end, whatever the transposes; emulated here element by
// element through the model's own entry point, bit for bit.
void expect_models_dot_products(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  std::mt19937_64 rng(testing::test_seed());
  RefTensor a =
      testing::rounded(dt, testing::random_tensor(rng, ta ? std::vector{k, m} : std::vector{m, k}));
  RefTensor b =
      testing::rounded(dt, testing::random_tensor(rng, tb ? std::vector{n, k} : std::vector{k, n}));
  std::vector<Bytes> got =
      runner().run("matmul", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}, dt, kNaN);
  ASSERT_EQ(got.size(), 1u);
  auto bits = [&](double v) {
    Bytes e = testing::encode(dt, {v});
    uint16_t h;
    std::memcpy(&h, e.data.data(), 2);
    return h;
  };
  int64_t mismatches = 0;
  const compiler::MmaModel model = compiler::hopper_mma_model();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      std::vector<uint16_t> row(k), col(k);
      for (int64_t p = 0; p < k; ++p) {
        row[p] = bits(ta ? a.data[p * m + i] : a.data[i * k + p]);
        col[p] = bits(tb ? b.data[j * k + p] : b.data[p * n + j]);
      }
      const float want =
          compiler::mma_dot(model, 0.0f, row.data(), 1, col.data(), 1, k, dt == DType::F16);
      uint16_t have;
      std::memcpy(&have, got[0].data.data() + 2 * (i * n + j), 2);
      if (have != bits(want) && mismatches++ < 3)
        ADD_FAILURE() << dtype_name(dt) << " ta=" << ta << " tb=" << tb << ": c[" << i << ", " << j
                      << "] bits " << have << ", the model gives " << bits(want);
    }
  EXPECT_EQ(mismatches, 0) << dtype_name(dt) << " ta=" << ta << " tb=" << tb << " k=" << k;
}

TEST(MatmulTensorCore, EveryOutputIsTheModelsDotProduct) {
  for (DType dt : {DType::BF16, DType::F16})
    for (int flags = 0; flags < 4; ++flags)
      expect_models_dot_products(dt, flags & 1, flags & 2, 70, 40, 150);
}

// The K loop rotates shared buffers counted from the last step, which is peeled off
// (kernels/matmul_tc.cc): every step count from one (a ragged K below one step, no loop at all) to
// seven gives the model's dot products (K = 1, 100, 300: the register-staged kernel's three
// buffers; the others, 16-byte rows, the asynchronous kernel's five).
TEST(MatmulTensorCore, EveryStepCountOfThePipelineIsTheModelsDotProduct) {
  for (int64_t k : {1, 64, 100, 192, 256, 300, 448})
    expect_models_dot_products(DType::BF16, false, k % 2 == 0, 9, 24, k);
}

// The asynchronous-copy kernel (a not transposed, K and N or b^T rows 16-byte aligned;
// kernels/matmul.cc build_tc_matmul_async): b N-major (two 64-column gemms) and K-major, step
// counts from one to nine (the five buffers' prologue, each buffer reused), ragged M, N and K
// edges zero-filled, and K = 8 (one short step): every output is the model's dot product.
TEST(MatmulTensorCore, AsyncCopyPipelineGivesTheModelsDotProducts) {
  for (int64_t k : {8, 64, 136, 320, 520})
    for (bool tb : {false, true}) expect_models_dot_products(DType::BF16, false, tb, 9, 24, k);
  expect_models_dot_products(DType::F16, false, false, 130, 136, 200);
  expect_models_dot_products(DType::F16, false, true, 70, 40, 152);
}

// The asynchronous-copy kernel with a transposed a ([k, m], M a multiple of 8: a lands as m's
// two MN-major [64 (k), 64 (m)] panels and the gemm reads it transposed): b N-major and K-major,
// one step to nine, M, N and K ragged in their tiles, a second row tile, K = 8 (one short
// step): every output is the model's dot product, as the register-staged kernel's.
TEST(MatmulTensorCore, TransposedAAsyncCopyGivesTheModelsDotProducts) {
  for (int64_t k : {8, 136, 520})
    for (bool tb : {false, true}) expect_models_dot_products(DType::BF16, true, tb, 136, 40, k);
  expect_models_dot_products(DType::F16, true, false, 24, 136, 200);
  expect_models_dot_products(DType::F16, true, true, 8, 24, 64);
}

// Random operands of a TMA matmul test, rounded to dt: a [m, k] (or [k, m] with ta), b [k, n]
// (or [n, k] with tb) and an addend [m, n].
struct TcOperands {
  Bytes a, b, add;
};
TcOperands tc_operands(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(testing::test_seed() + seed);
  auto operand = [&](std::vector<int64_t> shape) {
    return testing::encode(dt, testing::rounded(dt, testing::random_tensor(rng, shape)).data);
  };
  TcOperands in;
  in.a = operand(ta ? std::vector{k, m} : std::vector{m, k});
  in.b = operand(tb ? std::vector{n, k} : std::vector{k, n});
  in.add = operand({m, n});
  return in;
}

// c [m, n] (poisoned with NaN first) of a TMA matmul kernel on `in` (its addend with `addend`).
Bytes run_tc_async(const compiler::Kernel& kernel, DType dt, TcOperands& in, bool addend, int64_t m,
                   int64_t n, int64_t k) {
  Bytes c = testing::encode(dt, std::vector<double>(m * n, kNaN));
  std::vector<void*> buffers = {in.a.data.data(), in.b.data.data()};
  if (addend) buffers.push_back(in.add.data.data());
  buffers.push_back(c.data.data());
  runner()
      .compiled(std::make_shared<const compiler::Kernel>(kernel))
      .launch({.buffers = buffers, .dims = {m, n, k}});
  return c;
}

// The 256-row tile (two 64-row wgmma blocks a warpgroup, four stages, the epilogue's tile in the
// stages; kernels/matmul.cc's cost model picks it for long K over several waves, products too
// large to run here) against the 128-row kernel on the same operands: both transposes of a and b,
// the addend epilogue (bf16; f16 plain), ragged M, N and K (nine steps: every stage reused twice; a
// second row tile and a second column tile, both partial), every output bit for bit; and it
// compiles to a cubin.
TEST(MatmulTensorCore, BigTileGivesTheSmallTilesBits) {
  for (DType dt : {DType::BF16, DType::F16})
    for (int flags = 0; flags < 8; ++flags) {
      const bool ta = flags & 1, tb = flags & 2, addend = flags & 4;
      if (addend && flags != 4) continue;            // the addend with plain operands only
      if (dt == DType::F16 && flags != 0) continue;  // f16: the plain form
      const int64_t m = ta ? 304 : 300, n = 136, k = 520;
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dt) << " ta=" << ta << " tb=" << tb << " addend=" << addend);
      TcOperands in = tc_operands(dt, ta, tb, m, n, k, flags);
      std::vector<Bytes> c;
      for (int64_t rows : {kTcM, kTcBigRows}) {
        const compiler::Kernel kernel = build_tc_matmul_async(dt, ta, tb, rows, true, addend);
        c.push_back(run_tc_async(kernel, dt, in, addend, m, n, k));
        if (rows == kTcBigRows && dt == DType::BF16)
          EXPECT_FALSE(compiler::compile_cuda(kernel, "").cubin.empty()) << kernel.sig.name;
      }
      EXPECT_EQ(c[0].data, c[1].data);
      // Every output written (the NaN poison gone).
      const std::vector<double> got = testing::decode(c[1]);
      EXPECT_TRUE(std::none_of(got.begin(), got.end(), [](double v) { return std::isnan(v); }));
    }
}

// The short-K kernel (three stages, the epilogue's tile in a's stages, kernels/matmul.cc's
// choice for K of at most kTcShortKSteps steps on a 128-row tile) against the five-stage kernel on
// the same operands: both transposes of a and b, the addend epilogue, one to three steps (K = 8 one
// short step, 136 a ragged third), ragged M and N (a second row and column tile, both partial),
// every output bit for bit and written; and it compiles to a cubin.
TEST(MatmulTensorCore, ShortKKernelGivesTheFiveStageBits) {
  for (int flags = 0; flags < 5; ++flags) {
    const bool ta = flags & 1, tb = flags & 2, addend = flags == 4;
    for (int64_t k : {8, 136, 192}) {
      if (addend && k != 136) continue;
      const int64_t m = ta ? 136 : 130, n = 136;
      SCOPED_TRACE(::testing::Message()
                   << "ta=" << ta << " tb=" << tb << " addend=" << addend << " k=" << k);
      TcOperands in =
          tc_operands(DType::BF16, ta, tb, m, n, k, static_cast<uint64_t>(flags * 1000 + k));
      std::vector<Bytes> c;
      for (bool short_k : {false, true}) {
        const compiler::Kernel kernel =
            build_tc_matmul_async(DType::BF16, ta, tb, kTcM, true, addend, false, short_k);
        c.push_back(run_tc_async(kernel, DType::BF16, in, addend, m, n, k));
        if (short_k && k == 136 && !addend)
          EXPECT_FALSE(compiler::compile_cuda(kernel, "").cubin.empty()) << kernel.sig.name;
      }
      EXPECT_EQ(c[0].data, c[1].data);
      const std::vector<double> got = testing::decode(c[1]);
      EXPECT_TRUE(std::none_of(got.begin(), got.end(), [](double v) { return std::isnan(v); }));
    }
  }
  // The choice: three stages up to kTcShortKSteps steps of 16-bit operands on a 128-row tile
  // only.
  const int64_t short_k = kTcShortKSteps * kTcK;
  if (short_k > 0) EXPECT_TRUE(tc_short_k(DType::BF16, kTcM, short_k));
  EXPECT_FALSE(tc_short_k(DType::BF16, kTcM, short_k + 8));
  EXPECT_FALSE(tc_short_k(DType::BF16, 64, std::max<int64_t>(short_k, 8)));
  EXPECT_FALSE(tc_short_k(DType::F32, kTcM, 64));
  // Its name says its three stages.
  EXPECT_NE(tc_async_name(false, true, kTcM, true, false, false, true).find("_tma3"),
            std::string::npos);
}

// The row tiles first (the grid's x axis over row tiles, kernels/matmul.cc's choice for N > M):
// the same chains in another block order, so the plain order's bits. Both transposes, 64-, 128-
// and 256-row tiles, the addend epilogue; M, N and K ragged (three row and three column tiles of
// 64 rows, the last of each partial); every output written.
TEST(MatmulTensorCore, RowsFirstGivesThePlainOrdersBits) {
  struct Case {
    bool ta, tb, addend;
    int64_t rows;
  };
  for (const Case& cs : {Case{false, false, false, 64}, Case{true, true, false, 128},
                         Case{false, true, true, 128}, Case{true, false, false, 256}}) {
    const int64_t m = cs.ta ? 136 : 130, n = 264, k = 200;
    SCOPED_TRACE(::testing::Message() << "ta=" << cs.ta << " tb=" << cs.tb
                                      << " addend=" << cs.addend << " rows=" << cs.rows);
    TcOperands in = tc_operands(DType::BF16, cs.ta, cs.tb, m, n, k, static_cast<uint64_t>(cs.rows));
    std::vector<Bytes> c;
    for (bool rows_first : {false, true})
      c.push_back(run_tc_async(
          build_tc_matmul_async(DType::BF16, cs.ta, cs.tb, cs.rows, true, cs.addend, rows_first),
          DType::BF16, in, cs.addend, m, n, k));
    EXPECT_EQ(c[0].data, c[1].data);
    const std::vector<double> got = testing::decode(c[1]);
    EXPECT_TRUE(std::none_of(got.begin(), got.end(), [](double v) { return std::isnan(v); }));
  }
}

// Two row blocks a warpgroup: the wgmma lowering must give register block r of warpgroup wg the
// rows wgmma_accumulator_layout deals it, 64 (r·W + wg), or rows land in other rows' registers
// (the CPU runs the gemm by its meaning and cannot see it; the H100 did: the first 256-row tile
// swapped rows 64-127 with 128-191). The layout's rows, then the lowering's a descriptors.
TEST(MatmulTensorCore, BigTilesRowBlocksFollowTheAccumulatorLayout) {
  const compiler::Layout acc = compiler::wgmma_accumulator_layout(256, 128, 256);
  // Thread t's value v is element acc(t + 256 v) (thread modes first): rows of value 0 of
  // warpgroup 1's first thread, and of value 64 (row block 1) of thread 0.
  EXPECT_EQ(acc(128) / 128, 64);
  EXPECT_EQ(acc(256 * 64) / 128, 128);
  const std::string src =
      compiler::emit_cuda(compiler::lower(build_tc_matmul_async(DType::BF16, false, true, 256)));
  EXPECT_NE(src.find("tr_a0 + (0u * 2u + tr_wg) * 8192u"), std::string::npos);
  EXPECT_NE(src.find("tr_a0 + (1u * 2u + tr_wg) * 8192u"), std::string::npos);
}

// Batch invariance: the tensor-core K chain is a constant (the tile's rows may follow M, but
// they set no output's chain), so a row's bits do not depend on how many rows the product has
// or where the row sits in it. Rows of an M = 4096 product against the
// same rows computed in products of M = 1, 7, 128 and 1000 rows (placed off the 128-row tiles).
TEST(MatmulTensorCore, RowsDoNotDependOnM) {
  // f32 with precision tf32 too (k = 40: b copied transposed, then the TMA kernel).
  const Attrs tf32 = {{"precision", std::string("tf32")}};
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    const Attrs attrs = dt == DType::F32 ? tf32 : Attrs{};
    // k = 40: the asynchronous-copy kernel (rows 16-byte aligned), k = 44 the register one.
    // n = 296 at M = 4096 runs 128-row tiles, and 64-row ones at M <= 1000 (tc_tile_rows).
    for (const auto& [k, n] :
         std::vector<std::pair<int64_t, int64_t>>{{40, 24}, {44, 24}, {40, 296}}) {
      const int64_t big = 4096;
      std::mt19937_64 rng(testing::test_seed());
      RefTensor a = testing::rounded(dt, testing::random_tensor(rng, {big, k}));
      RefTensor b = testing::rounded(dt, testing::random_tensor(rng, {k, n}));
      std::vector<Bytes> all = runner().run("matmul", {a, b}, attrs, dt, kNaN);
      ASSERT_EQ(all.size(), 1u);
      for (int64_t m : {1, 7, 128, 1000}) {
        const int64_t first = big - m - 3;  // rows [first, first + m) of the big product
        RefTensor part{
            {m, k},
            std::vector<double>(a.data.begin() + first * k, a.data.begin() + (first + m) * k)};
        std::vector<Bytes> got = runner().run("matmul", {part, b}, attrs, dt, kNaN);
        ASSERT_EQ(got.size(), 1u);
        const size_t row_bytes = static_cast<size_t>(dtype_bytes(dt, n));
        EXPECT_EQ(0, std::memcmp(got[0].data.data(), all[0].data.data() + first * row_bytes,
                                 m * row_bytes))
            << dtype_name(dt) << " M=" << m << " K=" << k
            << ": rows differ from the M=4096 product's";
      }
    }
  }
}

// The same for f32's SIMT kernels: their K groups set each output's chains, and the plan used to
// follow M (a long K split into more groups for a short product), so these rows differed.
TEST(MatmulSimt, RowsDoNotDependOnM) {
  for (const int64_t k : {300, 2048}) {
    const int64_t big = 4096, n = 24;
    std::mt19937_64 rng(testing::test_seed());
    RefTensor a = testing::random_tensor(rng, {big, k});
    RefTensor b = testing::random_tensor(rng, {k, n});
    std::vector<Bytes> all = runner().run("matmul", {a, b}, {}, DType::F32, kNaN);
    ASSERT_EQ(all.size(), 1u);
    for (int64_t m : {1, 7, 128, 1000}) {
      const int64_t first = big - m - 3;
      RefTensor part{
          {m, k},
          std::vector<double>(a.data.begin() + first * k, a.data.begin() + (first + m) * k)};
      std::vector<Bytes> got = runner().run("matmul", {part, b}, {}, DType::F32, kNaN);
      ASSERT_EQ(got.size(), 1u);
      const size_t row_bytes = static_cast<size_t>(4 * n);
      EXPECT_EQ(
          0, std::memcmp(got[0].data.data(), all[0].data.data() + first * row_bytes, m * row_bytes))
          << "f32 M=" << m << " K=" << k << ": rows differ from the M=4096 product's";
    }
  }
}

// The comparison must catch outputs a kernel never wrote: a copy kernel whose guard drops the
// last element (an off-by-one), and one that writes nothing.
TEST(PoisonDetection, UnwrittenElementsFail) {
  for (int64_t missing : {1, 1000}) {
    compiler::KernelBuilder kb("copy_drops_" + std::to_string(missing));
    compiler::Dim n = kb.dim("N");
    compiler::Buf x = kb.input("x", DType::F32, {n});
    compiler::Buf y = kb.output("y", DType::F32, {n});
    kb.body({compiler::ceildiv(n, 128)}, 128, [&](compiler::Scope& s) {
      s.parallel(128, [&](compiler::Idx i) {
        compiler::Idx e = s.block_idx(0) * 128 + i;
        s.if_then(e < n - missing, [&] { y(e) = x(e); });
      });
    });
    auto k = std::make_shared<const compiler::Kernel>(kb.build());
    std::vector<float> in(300, 1.5f), out(300, std::nanf(""));
    runner().compiled(k).launch({.buffers = {in.data(), out.data()}, .dims = {300}});
    RefTensor want{.shape = {300}, .data = std::vector<double>(300, 1.5)};
    EXPECT_FALSE(matches(std::vector<double>(out.begin(), out.end()), want, tolerance(DType::F32)))
        << "missing " << missing;
  }
}

}  // namespace
}  // namespace tilerun::kernels
