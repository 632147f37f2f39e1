// The lane order of kernels/reduce_kernel.h, used by the reduce family and by softmax's variants:
// the row kernel (a contiguous axis) and the column kernel (a strided axis) give the same bits; a
// row's result does not depend on how many rows there are; sums follow the lane order exactly
// (emulated in float); plain softmax keeps its original kernel; grouped (per-head) norms
// normalise each group alone; and attribute mistakes are ShapeErrors naming the operand and what
// was expected.
#include <sys/wait.h>
#include <cmath>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "kernels/reduce_kernel.h"
#include "tests/kernels/kernel_runner.h"
#include "tests/tools/cli_run.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

testing::KernelRunner& runner() {
  static testing::KernelRunner* r = new testing::KernelRunner;
  return *r;
}

const std::vector<std::string> kOps = {"reduce_sum", "reduce_mean",      "reduce_max",
                                       "reduce_min", "reduce_logsumexp", "reduce_l2",
                                       "reduce_l1"};

Attrs over(std::vector<int64_t> axes) { return {{"axes", std::move(axes)}}; }

// The names of the kernels an op expands to for f32 inputs of `shape`.
std::string kernels_of(const std::string& op, const std::vector<int64_t>& shape, const Attrs& a) {
  const OpSchema& s = testing::schema_of(op);
  Attrs attrs = testing::with_defaults(s, a);
  std::vector<TensorType> in = {{DType::F32, shape}};
  std::string names;
  for (const KernelCall& c : s.expand(in, s.infer(in, attrs), attrs).calls)
    names += c.kernel->sig.name + " ";
  return names;
}

RefTensor transposed(const RefTensor& x) {  // [P, K] -> [K, P]
  RefTensor t{.shape = {x.shape[1], x.shape[0]}, .data = x.data};
  for (int64_t p = 0; p < x.shape[0]; ++p)
    for (int64_t k = 0; k < x.shape[1]; ++k)
      t.data[k * x.shape[0] + p] = x.data[p * x.shape[1] + k];
  return t;
}

class ReduceOrder : public ::testing::Test {
 protected:
  void SetUp() override { RecordProperty("seed", std::to_string(testing::test_seed())); }
  RefTensor random(std::vector<int64_t> shape) {
    return testing::rounded(DType::F32, testing::random_tensor(rng_, std::move(shape)));
  }
  std::mt19937_64 rng_{testing::test_seed()};
};

// x [P, K] over axis 1 takes the row kernel; its transpose [K, P] over axis 0 the column kernel
// (K < 256) or the strided row kernel (few outputs, K >= 256); [K, P, 220] (each x[p, :] copied
// along the last axis) the column kernel with 1100 outputs, or the two lanes passes when K is long.
// All give the same bits.
TEST_F(ReduceOrder, RowAndColumnKernelsGiveTheSameBits) {
  const int64_t wide = 220;
  for (int64_t k : {64, 129, 300, 1000}) {
    RefTensor x = random({5, k}), xt = transposed(x);
    RefTensor x3{.shape = {k, 5, wide}};
    for (double v : xt.data) x3.data.insert(x3.data.end(), wide, v);
    for (const std::string& op : kOps) {
      SCOPED_TRACE(op + " K=" + std::to_string(k));
      ASSERT_NE(kernels_of(op, x.shape, over({1})).find("_row_"), std::string::npos);
      ASSERT_NE(kernels_of(op, xt.shape, over({0})).find(k >= 256 ? "_srow_" : "_col_"),
                std::string::npos);
      // A long axis (K >= 256) with 1100 outputs: sum, max and min fold their lanes on threads
      // of their own, then the lanes in lane order (reduce_kernel.cc build_lanes and
      // build_lanes_fold), the same bits again.
      const bool lanes =
          k >= 256 && (op == "reduce_sum" || op == "reduce_max" || op == "reduce_min");
      const std::string names = kernels_of(op, x3.shape, over({0}));
      ASSERT_NE(names.find(lanes ? "_lanes_fold_" : "_col_"), std::string::npos) << names;
      for (DType dt : {DType::F32, DType::BF16}) {
        Bytes row = runner().run(op, {x}, over({1}), dt, kNaN)[0];
        Bytes col = runner().run(op, {xt}, over({0}), dt, kNaN)[0];
        EXPECT_EQ(row.data, col.data) << dtype_name(dt);
        Bytes many = runner().run(op, {x3}, over({0}), dt, kNaN)[0];
        const size_t bytes = dt == DType::F32 ? 4 : 2;
        ASSERT_EQ(many.data.size(), 5 * wide * bytes);
        for (int64_t p = 0; p < 5; ++p)
          for (int64_t r = 0; r < wide; r += 73)
            EXPECT_EQ(0,
                      std::memcmp(&many.data[(p * wide + r) * bytes], &row.data[p * bytes], bytes))
                << dtype_name(dt) << " p=" << p << " r=" << r;
      }
    }
  }
}

// The first row's result is the same alone and among 300 rows, for either kernel.
TEST_F(ReduceOrder, ARowDoesNotDependOnTheNumberOfRows) {
  for (int64_t k : {7, 300}) {
    RefTensor many = random({300, k});
    RefTensor one{.shape = {1, k}, .data = {many.data.begin(), many.data.begin() + k}};
    for (const std::string& op : kOps) {
      SCOPED_TRACE(op + " K=" + std::to_string(k));
      Bytes a = runner().run(op, {one}, over({1}), DType::F32, kNaN)[0];
      Bytes b = runner().run(op, {many}, over({1}), DType::F32, kNaN)[0];
      ASSERT_GE(b.data.size(), 4u);
      EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), 4));
      Bytes c = runner().run(op, {transposed(one)}, over({0}), DType::F32, kNaN)[0];
      Bytes d = runner().run(op, {transposed(many)}, over({0}), DType::F32, kNaN)[0];
      EXPECT_EQ(0, std::memcmp(c.data.data(), d.data.data(), 4));
      EXPECT_EQ(0, std::memcmp(a.data.data(), c.data.data(), 4));
    }
  }
}

// reduce_sum is the lane order in float: lane g folds k = g, g + 128, ... from its first element,
// then the lanes are added in lane order.
TEST_F(ReduceOrder, SumFollowsTheLaneOrder) {
  for (int64_t k : {1, 5, 128, 129, 1000, 4099}) {
    RefTensor x = random({3, k});
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}}) {
      RefTensor in = axes[0] == 1 ? x : transposed(x);
      Bytes got = runner().run("reduce_sum", {in}, over(axes), DType::F32, kNaN)[0];
      const float* y = reinterpret_cast<const float*>(got.data.data());
      for (int64_t p = 0; p < 3; ++p) {
        float total = 0;
        for (int64_t g = 0; g < std::min<int64_t>(k, kLanes); ++g) {
          float lane = static_cast<float>(x.data[p * k + g]);
          for (int64_t j = g + kLanes; j < k; j += kLanes)
            lane += static_cast<float>(x.data[p * k + j]);
          total = g == 0 ? lane : total + lane;
        }
        uint32_t want, have;
        std::memcpy(&want, &total, 4);
        std::memcpy(&have, &y[p], 4);
        EXPECT_EQ(want, have) << "K=" << k << " axis " << axes[0] << " row " << p << ": " << y[p]
                              << ", the lane order gives " << total;
      }
    }
  }
}

// softmax / log_softmax with a scale and a sink, and the lane-order softmax_grad: over axis 1 of
// [5, K] (a block per row, or a thread per row when K is short) and axis 0 of the transpose (the
// strided kernel), the same bits.
TEST_F(ReduceOrder, SoftmaxKernelsGiveTheSameBits) {
  for (int64_t k : {7, 300}) {
    RefTensor x = random({5, k}), sink = random({5}), dy = random({5, k});
    for (const std::string& op : {"softmax", "log_softmax"}) {
      SCOPED_TRACE(op + " K=" + std::to_string(k));
      Attrs a = {{"has_sink", true}, {"scale", 0.75}};
      Bytes row = runner().run(op, {x, sink}, a, DType::F32, kNaN)[0];
      a["axis"] = int64_t{0};
      Bytes col = runner().run(op, {transposed(x), sink}, a, DType::F32, kNaN)[0];
      RefTensor col_t = transposed({.shape = {k, 5}, .data = testing::decode(col)});
      EXPECT_EQ(row.data, testing::encode(DType::F32, col_t.data).data);
      EXPECT_NE(kernels_of(op, {k, 5}, {{"axis", int64_t{0}}}).find("_col_"), std::string::npos);
    }
    RefTensor y = testing::run_reference("softmax", {x})[0];
    y = testing::rounded(DType::F32, y);
    for (const std::string& op : {"softmax_grad", "log_softmax_grad"}) {
      Bytes row = runner().run(op, {y, dy}, {{"scale", 0.5}}, DType::F32, kNaN)[0];
      Bytes col = runner().run(op, {transposed(y), transposed(dy)},
                               {{"scale", 0.5}, {"axis", int64_t{0}}}, DType::F32, kNaN)[0];
      RefTensor col_t = transposed({.shape = {k, 5}, .data = testing::decode(col)});
      EXPECT_EQ(row.data, testing::encode(DType::F32, col_t.data).data) << op << " K=" << k;
    }
  }
  // Plain softmax over the last axis keeps its original kernel (and so its bits).
  EXPECT_EQ(kernels_of("softmax", {7, 300}, {}), "softmax_f32 ");
  EXPECT_EQ(kernels_of("softmax", {7, 300}, {{"scale", 2.0}}), "softmax_lane_row_f32 ");
}

TEST(SoftmaxErrors, AxisBiasAndSinkShapes) {
  const OpSchema& s = testing::schema_of("softmax");
  TensorType x{DType::F32, {2, 3, 4}};
  auto message = [&](std::vector<TensorType> in, const Attrs& a) -> std::string {
    try {
      s.infer(in, testing::with_defaults(s, a));
    } catch (const ShapeError& e) {
      return e.what();
    }
    return "no error";
  };
  std::string m = message({x}, {{"axis", int64_t{3}}});
  EXPECT_NE(m.find("'axis' is 3, out of range for input 'x' of rank 3"), std::string::npos) << m;
  EXPECT_NE(m.find("[-3, 2]"), std::string::npos) << m;
  m = message({x, {DType::F32, {3, 5}}}, {});
  EXPECT_NE(m.find("input 'bias' is f32[3,5]"), std::string::npos) << m;
  // A bias of the trailing dims must include the axis.
  m = message({x, {DType::F32, {4}}}, {{"axis", int64_t{1}}});
  EXPECT_NE(m.find("includes axis 1"), std::string::npos) << m;
  EXPECT_EQ(message({x, {DType::F32, {3, 4}}}, {{"axis", int64_t{1}}}), "no error");
  m = message({x, {DType::F32, {2, 4}}}, {{"has_sink", true}});
  EXPECT_NE(m.find("input 'sink' is f32[2,4], expected f32[2,3]"), std::string::npos) << m;
  EXPECT_EQ(message({x, {DType::F32, {2, 4}}}, {{"has_sink", true}, {"axis", int64_t{1}}}),
            "no error");
  m = message({x}, {{"has_sink", true}});
  EXPECT_NE(m.find("no input 'sink'"), std::string::npos) << m;
  m = message({x, x, {DType::F32, {2, 3}}}, {});
  EXPECT_NE(m.find("has_sink: true"), std::string::npos) << m;
}

// Attribute mistakes: a ShapeError whose message names the operand and what was expected.
TEST(ReduceErrors, AxesOutOfRangeRepeatedOrEmpty) {
  const OpSchema& s = testing::schema_of("reduce_sum");
  TensorType x{DType::F32, {4, 5}};
  auto message = [&](const Attrs& a) -> std::string {
    try {
      s.infer({x}, testing::with_defaults(s, a));
    } catch (const ShapeError& e) {
      return e.what();
    }
    return "no error";
  };
  std::string m = message(over({2}));
  EXPECT_NE(m.find("'axes' is 2"), std::string::npos) << m;
  EXPECT_NE(m.find("input 'x'"), std::string::npos) << m;
  EXPECT_NE(m.find("[-2, 1]"), std::string::npos) << m;
  m = message(over({-3}));
  EXPECT_NE(m.find("'axes' is -3"), std::string::npos) << m;
  m = message(over({1, -1}));
  EXPECT_NE(m.find("names axis 1 of input 'x' f32[4,5] twice"), std::string::npos) << m;
  m = message(over({}));
  EXPECT_NE(m.find("'axes' is empty"), std::string::npos) << m;
  EXPECT_EQ(message(over({-2, 1})), "no error");
}

TEST(ReduceErrors, ReduceGradTakesOneRunOfAxes) {
  const OpSchema& s = testing::schema_of("reduce_grad");
  TensorType x{DType::F32, {2, 3, 4}}, y{DType::F32, {3}};
  Attrs a = testing::with_defaults(
      s, {{"kind", std::string("sum")}, {"axes", std::vector<int64_t>{0, 2}}});
  EXPECT_THROW(s.infer({x, y, y}, a), ShapeError);
  a["kind"] = std::string("median");
  EXPECT_THROW(s.infer({x, y, y}, a), ShapeError);
  // A size-1 axis reduces nothing: axes 0 and 2 of [1, 3, 4] are one run in effect.
  TensorType x1{DType::F32, {1, 3, 4}};
  a["kind"] = std::string("sum");
  EXPECT_EQ(s.infer({x1, y, y}, a), (std::vector<TensorType>{x1}));
}

// layernorm with group 4 over [3, 8] against mean and variance computed per group here; rmsnorm
// likewise.
TEST_F(ReduceOrder, GroupedNormsNormaliseEachGroupAlone) {
  RefTensor x = random({3, 8}), w = random({4}), b = random({4});
  const double eps = 0.01;
  Attrs a = {{"group", int64_t{4}}, {"eps", eps}};
  RefTensor ln = testing::run_reference("layernorm", {x, w, b}, a)[0];
  RefTensor rms = testing::run_reference("rmsnorm", {x, w}, a)[0];
  for (int64_t grp = 0; grp < 6; ++grp) {
    const double* v = &x.data[grp * 4];
    double mean = (v[0] + v[1] + v[2] + v[3]) / 4, var = 0, ms = 0;
    for (int i = 0; i < 4; ++i) var += (v[i] - mean) * (v[i] - mean) / 4, ms += v[i] * v[i] / 4;
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(ln.data[grp * 4 + i],
                  (v[i] - mean) / std::sqrt(var + eps) * w.data[i] + b.data[i], 1e-12);
      EXPECT_NEAR(rms.data[grp * 4 + i], v[i] / std::sqrt(ms + eps) * w.data[i], 1e-12);
    }
  }
}

TEST(NormErrors, GroupMustDivideTheLastAxis) {
  for (const std::string& op : {"rmsnorm", "layernorm"}) {
    const OpSchema& s = testing::schema_of(op);
    TensorType x{DType::F32, {3, 12}}, w{DType::F32, {5}};
    std::string m;
    try {
      s.infer({x, w}, testing::with_defaults(s, {{"group", int64_t{5}}}));
    } catch (const ShapeError& e) {
      m = e.what();
    }
    EXPECT_NE(m.find("attribute 'group' is 5, which does not divide the last axis (12) of input "
                     "'x' f32[3,12]; expected a divisor of 12"),
              std::string::npos)
        << op << ": " << m;
    m.clear();
    try {
      s.infer({x, {DType::F32, {12}}}, testing::with_defaults(s, {{"group", int64_t{4}}}));
    } catch (const ShapeError& e) {
      m = e.what();
    }
    EXPECT_NE(m.find("expected f32[4] like 'the group size'"), std::string::npos)
        << op << ": " << m;
    EXPECT_EQ(s.infer({x, {DType::F32, {4}}}, testing::with_defaults(s, {{"group", int64_t{4}}})),
              (std::vector<TensorType>{x}));
  }
}

// The CLI (tests/tools/cli_run.h), with stderr folded into stdout; returns the exit code.
int run_cli(const std::string& args, std::string* out) {
  tilerun::testing::CliResult r = tilerun::testing::run_cli(args);
  *out += r.out;
  return r.exit_code;
}

// configs/reductions.yaml (every op of these families) forward and backward on the CPU against
// the double-precision references.
TEST(ReductionsConfig, ChecksOnTheCpu) {
  TILERUN_REQUIRE_CLI();
  std::string out;
  int code = run_cli(
      std::string(TILERUN_SOURCE_DIR) + "/configs/reductions.yaml --device cpu --check", &out);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("check: ok"), std::string::npos) << out;
}

// An attribute mistake is reported at the op's position in the YAML, naming the op and operand.
TEST(ReductionsConfig, AxisOutOfRangeIsReportedAtTheOp) {
  TILERUN_REQUIRE_CLI();
  std::string path =
      ::testing::TempDir() + "reduction_axis_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << "model: m\n"
                         "inputs:\n"
                         "  x: {shape: [4, 5]}\n"
                         "layers:\n"
                         "  - name: l\n"
                         "    ops:\n"
                         "      - {op: reduce_sum, in: x, out: y, axes: [2]}\n"
                         "outputs: [l.y]\n";
  std::string out;
  EXPECT_EQ(run_cli("'" + path + "' --validate", &out), 2) << out;
  EXPECT_NE(out.find(":7:9: error: op 0 (reduce_sum) of layer 'l': attribute 'axes' is 2, out of "
                     "range for input 'x' of rank 2; expected an axis in [-2, 1]"),
            std::string::npos)
      << out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tilerun::kernels
