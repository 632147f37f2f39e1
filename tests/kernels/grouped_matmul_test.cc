// grouped_matmul's kernels are batch and load invariant: a row's output bits depend only on the
// row and its expert's weights (not on where it sits in a tile, which rows share the tile, or how
// the other segments lie), and grouped_matmul_wgrad's dw[e] only on expert e's rows. Rows in no
// segment, even NaN, reach no output but their own zeros. bf16/f16 run on the tensor cores:
// every output is the tensor core's model of its dot product (compiler/codegen/mma_model.h), bit
// for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "compiler/codegen/mma_model.h"
#include "kernels/grouped_matmul_tc.h"
#include "tests/kernels/kernel_runner.h"
#include "tilerun/tilerun.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;

testing::KernelRunner& runner() {
  static testing::KernelRunner* r = new testing::KernelRunner;
  return *r;
}

// E sorted segment starts drawn from [lo, hi], as counting_sort's offsets.
RefTensor random_offsets(std::mt19937_64& rng, int64_t experts, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> u(lo, hi);
  RefTensor t{.shape = {experts}, .data = {}};
  for (int64_t e = 0; e < experts; ++e) t.data.push_back(static_cast<double>(u(rng)));
  std::sort(t.data.begin(), t.data.end());
  return t;
}

// Row r's expert under offsets (the last segment ends at `rows`); -1: in none.
int64_t expert_of(const RefTensor& offsets, int64_t r, int64_t rows) {
  const int64_t experts = offsets.numel();
  for (int64_t e = 0; e < experts; ++e) {
    const double hi = e + 1 < experts ? offsets.data[e + 1] : static_cast<double>(rows);
    if (offsets.data[e] <= r && r < hi) return e;
  }
  return -1;
}

// x with `prefix` rows of NaN in front: rows no segment of offsets shifted by `prefix` names.
RefTensor with_nan_prefix(const RefTensor& x, int64_t prefix) {
  RefTensor out{.shape = {x.shape[0] + prefix, x.shape[1]}, .data = {}};
  out.data.assign(prefix * x.shape[1], std::nan(""));
  out.data.insert(out.data.end(), x.data.begin(), x.data.end());
  return out;
}

// Bytes of row r of a [rows, cols] output.
std::vector<uint8_t> row_bytes(const Bytes& b, int64_t cols, int64_t r) {
  const int64_t width = dtype_bytes(b.dtype, cols);
  return std::vector<uint8_t>(b.data.begin() + r * width, b.data.begin() + (r + 1) * width);
}

// Two independent layouts of the same rows, the second behind 7 NaN rows (another position in
// the row tiles, other neighbours): every row with the same expert in both has the same bits,
// and the NaN rows are zeros.
TEST(GroupedMatmul, ARowsBitsDependOnlyOnItsExpert) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t rows = 150, k = 70, n = 40, experts = 6, prefix = 7;
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (tb ? " transpose_b" : ""));
      RefTensor x = testing::rounded(dtype, testing::random_tensor(rng, {rows, k}));
      RefTensor w =
          testing::rounded(dtype, testing::random_tensor(rng, tb ? std::vector{experts, n, k}
                                                                 : std::vector{experts, k, n}));
      const Attrs attrs{{"transpose_b", tb}};
      RefTensor off_a = random_offsets(rng, experts, 0, rows);
      // Redrawn until some row has one expert under both (independent draws can share none).
      auto shares_a_row = [&](const RefTensor& off) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t e = expert_of(off_a, r, rows);
          if (e >= 0 && e == expert_of(off, r, rows)) return true;
        }
        return false;
      };
      RefTensor off_b = random_offsets(rng, experts, 0, rows);
      while (!shares_a_row(off_b)) off_b = random_offsets(rng, experts, 0, rows);
      std::vector<Bytes> a = runner().run("grouped_matmul", {x, w, off_a}, attrs, dtype, 7.0);
      RefTensor off_shifted = off_b;
      for (double& v : off_shifted.data) v += prefix;
      std::vector<Bytes> b = runner().run(
          "grouped_matmul", {with_nan_prefix(x, prefix), w, off_shifted}, attrs, dtype, 7.0);
      int compared = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t e = expert_of(off_a, r, rows);
        if (e < 0 || e != expert_of(off_b, r, rows)) continue;
        ++compared;
        EXPECT_EQ(row_bytes(a[0], n, r), row_bytes(b[0], n, r + prefix)) << "row " << r;
      }
      EXPECT_GT(compared, 0);
      const std::vector<double> got_b = testing::decode(b[0]);
      for (int64_t i = 0; i < prefix * n; ++i) ASSERT_EQ(got_b[i], 0.0) << "NaN row element " << i;
    }
}

// The same segments behind NaN rows (shifted by 7) give the same dw bits: each expert's sum runs
// over its own rows, in row order, from its first row.
TEST(GroupedMatmul, WgradDependsOnlyOnTheSegmentsRows) {
  std::mt19937_64 rng(testing::test_seed() + 1);
  const int64_t rows = 150, k = 40, n = 70, experts = 5, prefix = 7;
  for (bool tb : {false, true}) {
    RefTensor x = testing::random_tensor(rng, {rows, k});
    RefTensor dy = testing::random_tensor(rng, {rows, n});
    RefTensor off = random_offsets(rng, experts, 0, rows);
    RefTensor shifted = off;
    for (double& v : shifted.data) v += prefix;
    const Attrs attrs{{"transpose_b", tb}};
    std::vector<Bytes> a =
        runner().run("grouped_matmul_wgrad", {x, dy, off}, attrs, DType::F32, 7.0);
    std::vector<Bytes> b = runner().run(
        "grouped_matmul_wgrad", {with_nan_prefix(x, prefix), with_nan_prefix(dy, prefix), shifted},
        attrs, DType::F32, -7.0);
    EXPECT_EQ(a[0].data, b[0].data) << (tb ? "transpose_b" : "");
  }
}

// Offsets that are not segment starts (decreasing, negative, past R) read nothing outside the
// tensors and give the reference's sums.
TEST(GroupedMatmul, AnyOffsetsAreWellDefined) {
  std::mt19937_64 rng(testing::test_seed() + 2);
  const int64_t rows = 45, k = 20, n = 9;
  RefTensor x = testing::random_tensor(rng, {rows, k});
  RefTensor w = testing::random_tensor(rng, {4, k, n});
  RefTensor dy = testing::random_tensor(rng, {rows, n});
  RefTensor off{.shape = {4}, .data = {30, -5, 60, 10}};
  std::vector<RefTensor> want = testing::run_reference("grouped_matmul", {x, w, off});
  std::vector<double> got =
      testing::decode(runner().run("grouped_matmul", {x, w, off}, {}, DType::F32, 7.0)[0]);
  EXPECT_TRUE(testing::all_close({want[0].shape, got}, want[0], 1e-5, 1e-5));
  want = testing::run_reference("grouped_matmul_wgrad", {x, dy, off});
  got = testing::decode(runner().run("grouped_matmul_wgrad", {x, dy, off}, {}, DType::F32, 7.0)[0]);
  EXPECT_TRUE(testing::all_close({want[0].shape, got}, want[0], 1e-5, 1e-5));
  // Segments, clamped to [0, R): expert 0 [30, -5) and 2 [60, 10) empty, so their dw are exact
  // zeros; expert 1 every row, expert 3 rows 10..44.
  for (int64_t e : {0, 2})
    for (int64_t i = 0; i < k * n; ++i) ASSERT_EQ(got[e * k * n + i], 0.0) << "expert " << e;
}

// Shape and dtype mistakes: a ShapeError naming the input and what was expected; in a model, a
// tilerun::Error that also names the op and its position.
TEST(GroupedMatmul, ShapeMistakesNameTheInput) {
  const OpSchema& gm = testing::schema_of("grouped_matmul");
  const OpSchema& wg = testing::schema_of("grouped_matmul_wgrad");
  const Attrs nn{{"transpose_b", false}}, nt{{"transpose_b", true}};
  auto message = [](const OpSchema& s, std::vector<TensorType> in, const Attrs& attrs) {
    try {
      s.infer(in, attrs);
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const TensorType x{DType::F32, {10, 8}}, offsets{DType::I32, {3}};
  EXPECT_EQ(gm.infer({x, {DType::F32, {3, 8, 5}}, offsets}, nn)[0],
            (TensorType{DType::F32, {10, 5}}));
  EXPECT_EQ(gm.infer({x, {DType::F32, {3, 5, 8}}, offsets}, nt)[0],
            (TensorType{DType::F32, {10, 5}}));
  const struct {
    const OpSchema* op;
    std::vector<TensorType> in;
    Attrs attrs;
    std::string names;
  } cases[] = {
      {&gm, {x, {DType::F32, {3, 7, 5}}, offsets}, nn, "input 'w'"},        // K mismatch
      {&gm, {x, {DType::F32, {3, 8, 5}}, offsets}, nt, "input 'w'"},        // not [E, N, K]
      {&gm, {x, {DType::BF16, {3, 8, 5}}, offsets}, nn, "input 'w'"},       // dtype
      {&gm, {x, {DType::F32, {8, 5}}, offsets}, nn, "input 'w'"},           // rank
      {&gm, {x, {DType::F32, {4, 8, 5}}, offsets}, nn, "input 'offsets'"},  // E mismatch
      {&gm, {x, {DType::F32, {3, 8, 5}}, {DType::F32, {3}}}, nn, "input 'offsets'"},
      {&gm, {{DType::F32, {10}}, {DType::F32, {3, 8, 5}}, offsets}, nn, "input 'x'"},
      {&wg, {x, {DType::F32, {9, 5}}, offsets}, nn, "input 'dy'"},  // rows mismatch
      {&wg, {x, {DType::F32, {10, 5}}, {DType::I32, {3, 1}}}, nn, "input 'offsets'"},
  };
  for (const auto& c : cases)
    EXPECT_NE(message(*c.op, c.in, c.attrs).find(c.names), std::string::npos)
        << c.op->name << ": " << message(*c.op, c.in, c.attrs);

  const std::string yaml = R"(model: m
dtype: f32
inputs:
  x: {shape: [10, 8]}
  w: {shape: [3, 7, 5]}
  ids: {shape: [10], dtype: i32, init: zeros}
layers:
  - name: l
    ops:
      - {op: counting_sort, in: ids, out: [p, o, r, offsets], bins: 3}
      - {op: grouped_matmul, in: [x, w, offsets], out: y}
outputs: [l.y]
)";
  try {
    parse_model(yaml, "m.yaml");
    ADD_FAILURE() << "a K mismatch parsed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("m.yaml:11:"), std::string::npos) << what;
    EXPECT_NE(what.find("grouped_matmul"), std::string::npos) << what;
    EXPECT_NE(what.find("input 'w'"), std::string::npos) << what;
  }
}

// Raw 16-bit elements of a bf16/f16 tensor.
std::vector<uint16_t> bits16(DType dtype, const RefTensor& t) {
  Bytes b = testing::encode(dtype, t.data);
  std::vector<uint16_t> out(t.data.size());
  std::memcpy(out.data(), b.data.data(), 2 * out.size());
  return out;
}

uint16_t bits_of(const Bytes& b, int64_t i) {
  uint16_t h;
  std::memcpy(&h, b.data.data() + 2 * i, 2);
  return h;
}

uint16_t rounded_bits(DType dtype, float v) { return bits_of(testing::encode(dtype, {v}), 0); }

// The status of the offsets' contract as the graph appends it (check_index's, or
// index_established's): [-1, 0] when the offsets are good.
RefTensor good_status() { return RefTensor{.shape = {2}, .data = {-1, 0}}; }

// Runs grouped_matmul, with the offsets' contract status after them when `sorted` (the kernel a
// model runs: one expert a row tile), else without (any offsets).
Bytes run_grouped(DType dtype, bool tb, const RefTensor& x, const RefTensor& w,
                  const RefTensor& off, bool sorted, const RefTensor& status = good_status()) {
  std::vector<RefTensor> in = {x, w, off};
  if (sorted) in.push_back(status);
  return runner().run("grouped_matmul", in, {{"transpose_b", tb}}, dtype, 7.0,
                      {{3, DType::I32}})[0];
}

// y[r, j] = +0 + the model's dot product of row r and column j of its expert's matrix, 0 for
// rows in no segment; segment starts drawn from [lo, rows].
void expect_experts_model_dots(DType dtype, bool tb, int64_t rows, int64_t k, int64_t n,
                               int64_t experts, int64_t lo, uint64_t seed, bool sorted = false) {
  std::mt19937_64 rng(seed);
  const compiler::MmaModel model = compiler::hopper_mma_model();
  RefTensor x = testing::rounded(dtype, testing::random_tensor(rng, {rows, k}));
  RefTensor w = testing::rounded(
      dtype,
      testing::random_tensor(rng, tb ? std::vector{experts, n, k} : std::vector{experts, k, n}));
  RefTensor off = random_offsets(rng, experts, lo, rows);
  Bytes y = run_grouped(dtype, tb, x, w, off, sorted);
  const std::vector<uint16_t> xb = bits16(dtype, x), wb = bits16(dtype, w);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t e = expert_of(off, r, rows);
      float want = 0.0f;
      if (e >= 0 && k > 0) {
        const uint16_t* col = tb ? &wb[(e * n + j) * k] : &wb[e * k * n + j];
        want +=
            compiler::mma_dot(model, 0.0f, &xb[r * k], 1, col, tb ? 1 : n, k, dtype == DType::F16);
      }
      if (bits_of(y, r * n + j) != rounded_bits(dtype, want) && mismatches++ < 3)
        ADD_FAILURE() << dtype_name(dtype) << " tb=" << tb << " K=" << k << ": y[" << r << ", " << j
                      << "] (expert " << e << ") differs from the model's " << want;
    }
  EXPECT_EQ(mismatches, 0) << dtype_name(dtype) << " tb=" << tb << " K=" << k;
}

// The register-staged kernel (K = 100: two K steps, the second ragged; rows not 16-byte aligned).
TEST(GroupedMatmulTensorCore, EveryOutputIsItsExpertsModelDotProduct) {
  for (DType dtype : {DType::BF16, DType::F16})
    for (bool tb : {false, true})
      expect_experts_model_dots(dtype, tb, 150, 100, 40, 5, 3, testing::test_seed() + 3);
}

// The copy_async kernel (K, and N when w is not transposed, multiples of 8): K from one short
// step to six (the five buffers' prologue and reuse, restarted for each expert of a tile), odd
// segments and empty experts (starts drawn from the whole range), R, N and K ragged in their
// tiles, x's boxes past the segment's end and past R: every output is its expert's model dot
// product.
TEST(GroupedMatmulTensorCore, AsyncCopyKernelGivesEachExpertsModelDotProduct) {
  uint64_t seed = testing::test_seed() + 5;
  for (int64_t k : {8, 136, 376})
    for (bool tb : {false, true})
      expect_experts_model_dots(DType::BF16, tb, 150, k, tb ? 36 : 40, 7, 0, ++seed);
  expect_experts_model_dots(DType::F16, false, 300, 72, 136, 4, 0, ++seed);
}

// The aligned kernel (sorted offsets, the contract's status given): one expert a 128-row tile,
// found by a binary search over the tile slots. Segments of 0 to several tiles, starting
// anywhere in a tile, the first one after rows in no segment (zeros), rows past R in the last
// tile, K from one short step to several, one expert and many (most of them empty): every output
// is its expert's model dot product, the same bits as the kernel that walks every expert.
TEST(GroupedMatmulTensorCore, AlignedKernelGivesEachExpertsModelDotProduct) {
  uint64_t seed = testing::test_seed() + 8;
  for (int64_t k : {8, 136})
    for (bool tb : {false, true})
      expect_experts_model_dots(DType::BF16, tb, 300, k, tb ? 36 : 40, 5, 0, ++seed, true);
  expect_experts_model_dots(DType::BF16, true, 700, 64, 24, 3, 100, ++seed, true);
  expect_experts_model_dots(DType::F16, false, 260, 72, 136, 1, 0, ++seed, true);
  expect_experts_model_dots(DType::BF16, true, 90, 16, 16, 40, 0, ++seed, true);
}

// The aligned kernel and the one that walks every expert give the same bits for one input.
TEST(GroupedMatmulTensorCore, AlignedKernelHasTheWalkingKernelsBits) {
  std::mt19937_64 rng(testing::test_seed() + 9);
  const int64_t rows = 517, k = 48, n = 24, experts = 9;
  for (bool tb : {false, true}) {
    RefTensor x = testing::rounded(DType::BF16, testing::random_tensor(rng, {rows, k}));
    RefTensor w = testing::rounded(
        DType::BF16,
        testing::random_tensor(rng, tb ? std::vector{experts, n, k} : std::vector{experts, k, n}));
    RefTensor off = random_offsets(rng, experts, 0, rows);
    EXPECT_EQ(run_grouped(DType::BF16, tb, x, w, off, true).data,
              run_grouped(DType::BF16, tb, x, w, off, false).data)
        << (tb ? "transpose_b" : "");
  }
}

// A status reporting a bad offset (the check failed, the step will too): the aligned kernel
// writes nothing, every output keeps its poison.
TEST(GroupedMatmulTensorCore, AlignedKernelWritesNothingOnABadStatus) {
  std::mt19937_64 rng(testing::test_seed() + 10);
  RefTensor x = testing::rounded(DType::BF16, testing::random_tensor(rng, {200, 16}));
  RefTensor w = testing::rounded(DType::BF16, testing::random_tensor(rng, {3, 16, 16}));
  RefTensor off{.shape = {3}, .data = {0, 90, 40}};  // not sorted: what the check reports
  Bytes y = run_grouped(DType::BF16, false, x, w, off, true, RefTensor{{2}, {2, 40}});
  for (double v : testing::decode(y)) ASSERT_EQ(v, 7.0);
}

OpExpansion expand_grouped(DType dtype, bool tb, int64_t rows, int64_t k, int64_t n,
                           int64_t experts, bool sorted = false) {
  const OpSchema& schema = testing::schema_of("grouped_matmul");
  const Attrs attrs{{"transpose_b", tb}};
  std::vector<TensorType> in = {
      {dtype, {rows, k}},
      {dtype, tb ? std::vector{experts, n, k} : std::vector{experts, k, n}},
      {DType::I32, {experts}}};
  if (sorted) in.push_back({DType::I32, {2}});
  return schema.expand(in, schema.infer(in, attrs), attrs);
}

// grouped_matmul_fp4: FP4 codes over all of e2m1 and e8m0 scales over 40 binades (a weight times
// its scale is exact in bf16), segments of 0 to several tiles. With the sorted contract (bf16, K a
// multiple of 64) the kernel that decodes each step's codes in shared memory runs; it, and the
// dequantize-then-grouped_matmul expansion without the contract, give grouped_matmul's bits on
// the dequantized weights, for both transposes and scale blocks of 16 and 32.
TEST(GroupedMatmulFp4, DecodedWeightsGiveGroupedMatmulsBits) {
  std::mt19937_64 rng(testing::test_seed() + 11);
  const struct {
    bool tb;
    int64_t rows, k, n, experts, block;
  } cases[] = {{true, 300, 128, 72, 5, 32},
               {false, 300, 64, 96, 5, 32},
               {true, 90, 192, 16, 40, 16},
               {false, 260, 128, 160, 3, 32}};
  const std::map<int, DType> fp4 = {
      {1, DType::FP4E2M1}, {2, DType::E8M0}, {3, DType::I32}, {4, DType::I32}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << (c.tb ? "transpose_b " : "") << c.rows << "x" << c.k << "x"
                                      << c.n << " E " << c.experts << " B " << c.block);
    const std::vector<int64_t> ws =
        c.tb ? std::vector{c.experts, c.n, c.k} : std::vector{c.experts, c.k, c.n};
    RefTensor x = testing::rounded(DType::BF16, testing::random_tensor(rng, {c.rows, c.k}));
    RefTensor w = testing::random_tensor(rng, ws);
    for (double& v : w.data) v *= 3.5;
    w = testing::rounded(DType::FP4E2M1, w);
    RefTensor scale{.shape = {ws[0], ws[1], ws[2] / c.block}, .data = {}};
    std::uniform_int_distribution<int> binade(-20, 20);
    for (int64_t i = 0; i < scale.shape[0] * scale.shape[1] * scale.shape[2]; ++i)
      scale.data.push_back(std::ldexp(1.0, binade(rng)));
    RefTensor wd = w;  // the dequantized weights, exact
    for (int64_t i = 0; i < wd.numel(); ++i) wd.data[i] *= scale.data[i / c.block];
    RefTensor off = random_offsets(rng, c.experts, 0, c.rows);
    const Bytes want = run_grouped(DType::BF16, c.tb, x, wd, off, true);
    const Attrs attrs{{"transpose_b", c.tb}};
    const Bytes decoded = runner().run("grouped_matmul_fp4", {x, w, scale, off, good_status()},
                                       attrs, DType::BF16, 7.0, fp4)[0];
    const Bytes dequantized =
        runner().run("grouped_matmul_fp4", {x, w, scale, off}, attrs, DType::BF16, 7.0, fp4)[0];
    EXPECT_EQ(decoded.data, want.data);
    EXPECT_EQ(dequantized.data, want.data);
    // The sorted case ran the decoding kernel, the other dequantize's and grouped_matmul's.
    const OpSchema& schema = testing::schema_of("grouped_matmul_fp4");
    std::vector<TensorType> in = {{DType::BF16, x.shape},
                                  {DType::FP4E2M1, ws},
                                  {DType::E8M0, scale.shape},
                                  {DType::I32, {c.experts}},
                                  {DType::I32, {2}}};
    OpExpansion ex = schema.expand(in, schema.infer(in, attrs), attrs);
    ASSERT_EQ(ex.calls.size(), 1u);
    EXPECT_EQ(ex.calls[0].kernel->sig.name, grouped_fp4_aligned_name(c.tb, c.block) + "_bf16");
    in.pop_back();
    EXPECT_EQ(schema.expand(in, schema.infer(in, attrs), attrs).calls.size(), 2u);
  }
}

// copy_async where x's and w's rows are 16-byte aligned (K, and N unless transposed, multiples
// of 8: a choice by K and N, never by R), the register-staged kernel otherwise; f32 the SIMT one.
TEST(GroupedMatmulTensorCore, AsyncKernelChosenForAlignedRows) {
  const struct {
    DType dtype;
    bool tb;
    int64_t rows, k, n;
    std::string kernel;
  } cases[] = {
      {DType::BF16, true, 6144, 1024, 1024, "grouped_matmul_tc_nt_128x128x64_tma_bf16"},
      {DType::BF16, false, 7, 1024, 1024, "grouped_matmul_tc_nn_128x128x64_tma_bf16"},
      {DType::F16, true, 100, 64, 40, "grouped_matmul_tc_nt_128x128x64_tma_f16"},
      // N not a multiple of 8: y's rows are not 16-byte aligned for the async epilogue.
      {DType::F16, true, 100, 64, 30, "grouped_matmul_tc_nt_128x128x64_f16"},
      {DType::BF16, false, 100, 64, 30, "grouped_matmul_tc_nn_128x128x64_bf16"},
      {DType::BF16, true, 100, 100, 32, "grouped_matmul_tc_nt_128x128x64_bf16"},
      {DType::F32, true, 100, 64, 64, "grouped_matmul_nt_f32"},
  };
  for (const auto& c : cases) {
    OpExpansion ex = expand_grouped(c.dtype, c.tb, c.rows, c.k, c.n, 64);
    ASSERT_EQ(ex.calls.size(), 1u);
    EXPECT_EQ(ex.calls[0].kernel->sig.name, c.kernel) << c.rows << "x" << c.k << "x" << c.n;
  }
  // With the sorted contract's status (a model's offsets): the aligned kernel where the TMA one
  // runs, the others unchanged (they take any offsets).
  for (const auto& c : cases) {
    OpExpansion ex = expand_grouped(c.dtype, c.tb, c.rows, c.k, c.n, 64, true);
    ASSERT_EQ(ex.calls.size(), 1u);
    std::string want = c.kernel;
    if (want.find("_tma_") != std::string::npos)
      want.replace(want.find("_tma_"), 5, "_tma_aligned_");
    EXPECT_EQ(ex.calls[0].kernel->sig.name, want) << c.rows << "x" << c.k << "x" << c.n;
  }
}

// dw[e][k, n] = the model's dot product of x[lo..hi, k] and dy[lo..hi, n], from the segment's
// first row in row order; `off` the segment starts (random from [0, rows] when empty).
void expect_wgrad_model_dots(DType dtype, bool tb, const RefTensor& x, const RefTensor& dy,
                             const RefTensor& off, int64_t only_expert = -1) {
  const int64_t rows = x.shape[0], k = x.shape[1], n = dy.shape[1], experts = off.numel();
  const compiler::MmaModel model = compiler::hopper_mma_model();
  Bytes dw =
      runner().run("grouped_matmul_wgrad", {x, dy, off}, {{"transpose_b", tb}}, dtype, 7.0)[0];
  const std::vector<uint16_t> xb = bits16(dtype, x), db = bits16(dtype, dy);
  int64_t mismatches = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (only_expert >= 0 && e != only_expert) continue;
    const auto lo = static_cast<int64_t>(off.data[e]);
    const int64_t hi = e + 1 < experts ? static_cast<int64_t>(off.data[e + 1]) : rows;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) {
        const float want = compiler::mma_dot(model, 0.0f, &xb[lo * k + p], k, &db[lo * n + j], n,
                                             hi - lo, dtype == DType::F16);
        const int64_t at = tb ? (e * n + j) * k + p : (e * k + p) * n + j;
        if (bits_of(dw, at) != rounded_bits(dtype, want) && mismatches++ < 3)
          ADD_FAILURE() << dtype_name(dtype) << " tb=" << tb << " K=" << k << " N=" << n << ": dw["
                        << e << "][" << p << ", " << j << "] differs from the model's " << want;
      }
  }
  EXPECT_EQ(mismatches, 0) << dtype_name(dtype) << " tb=" << tb << " K=" << k << " N=" << n;
}

void expect_wgrad_model_dots(DType dtype, bool tb, int64_t rows, int64_t k, int64_t n,
                             int64_t experts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RefTensor x = testing::rounded(dtype, testing::random_tensor(rng, {rows, k}));
  RefTensor dy = testing::rounded(dtype, testing::random_tensor(rng, {rows, n}));
  expect_wgrad_model_dots(dtype, tb, x, dy, random_offsets(rng, experts, 0, rows));
}

// The register-staged wgrad (N = 30: dy's rows not 16-byte aligned); segments of 0 to 70 rows:
// zero to two K steps.
TEST(GroupedMatmulTensorCore, WgradIsEachSegmentsModelDotProduct) {
  uint64_t seed = testing::test_seed() + 4;
  for (DType dtype : {DType::BF16, DType::F16})
    for (bool tb : {false, true}) expect_wgrad_model_dots(dtype, tb, 150, 40, 30, 4, ++seed);
}

// The copy_async wgrad (K and N multiples of 8): segments of 0 to a few hundred rows (one to
// several steps, the last ragged and zeroed past the segment's end), K and N over two tiles.
TEST(GroupedMatmulTensorCore, AsyncWgradIsEachSegmentsModelDotProduct) {
  uint64_t seed = testing::test_seed() + 6;
  for (bool tb : {false, true}) expect_wgrad_model_dots(DType::BF16, tb, 300, 136, 40, 4, ++seed);
  expect_wgrad_model_dots(DType::F16, false, 400, 16, 136, 2, ++seed);
  expect_wgrad_model_dots(DType::BF16, true, 45, 8, 8, 5, ++seed);
}

// The rows right after a segment land in its last step's tiles: they must not reach its dw,
// even as infinities (expert 0: rows [0, 10), followed by rows of inf in x and dy).
TEST(GroupedMatmulTensorCore, AsyncWgradIgnoresTheRowsAfterTheSegment) {
  std::mt19937_64 rng(testing::test_seed() + 7);
  const int64_t rows = 90, k = 16, n = 24;
  for (bool tb : {false, true}) {
    RefTensor x = testing::rounded(DType::BF16, testing::random_tensor(rng, {rows, k}));
    RefTensor dy = testing::rounded(DType::BF16, testing::random_tensor(rng, {rows, n}));
    for (int64_t i = 10 * k; i < rows * k; ++i) x.data[i] = INFINITY;
    for (int64_t i = 10 * n; i < rows * n; ++i) dy.data[i] = -INFINITY;
    expect_wgrad_model_dots(DType::BF16, tb, x, dy, RefTensor{.shape = {2}, .data = {0, 10}}, 0);
  }
}

// The kernels chosen for the wgrad: copy_async where K and N are multiples of 8.
TEST(GroupedMatmulTensorCore, AsyncWgradChosenForAlignedRows) {
  const OpSchema& schema = testing::schema_of("grouped_matmul_wgrad");
  for (const auto& [k, n, name] : std::vector<std::tuple<int64_t, int64_t, std::string>>{
           {1024, 1024, "grouped_matmul_wgrad_tc_t_64x128x64_tma3_bf16"},
           {1024, 1020, "grouped_matmul_wgrad_tc_t_128x128x64_bf16"},
           {1020, 1024, "grouped_matmul_wgrad_tc_t_128x128x64_bf16"}}) {
    const Attrs attrs{{"transpose_b", true}};
    std::vector<TensorType> in = {
        {DType::BF16, {6144, k}}, {DType::BF16, {6144, n}}, {DType::I32, {64}}};
    OpExpansion ex = schema.expand(in, schema.infer(in, attrs), attrs);
    ASSERT_EQ(ex.calls.size(), 1u);
    EXPECT_EQ(ex.calls[0].kernel->sig.name, name) << k << "x" << n;
  }
}

}  // namespace
}  // namespace tilerun::kernels
