// Each op's double-precision reference against an independent computation (Eigen matrices or
// Jacobians written out) on fresh random inputs of odd sizes, plus the new ops' inference; and,
// for every registered op, its family's worked examples, reference against inference on every
// kernel case, and inference accepting exactly the dtypes the op lists.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "kernels/op_registry.h"
#include "tests/kernels/test_util.h"

namespace tilerun::kernels {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::run_reference;
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;

constexpr double kRtol = 1e-12, kAtol = 1e-12;

class ReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override { RecordProperty("seed", std::to_string(testing::test_seed())); }
  std::mt19937_64 rng_{testing::test_seed()};
};

Eigen::Map<const Mat> as_mat(const RefTensor& t, int64_t rows, int64_t cols) {
  return Eigen::Map<const Mat>(t.data.data(), rows, cols);
}

RefTensor from_mat(const Mat& m, std::vector<int64_t> shape) {
  return RefTensor{.shape = std::move(shape),
                   .data = std::vector<double>(m.data(), m.data() + m.size())};
}

TEST_F(ReferenceTest, AddMulScale) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1}, {7}, {3, 5, 7}, {33, 2}}) {
    RefTensor a = random_tensor(rng_, shape), b = random_tensor(rng_, shape);
    RefTensor sum = a, prod = a, scaled = a;
    for (size_t i = 0; i < a.data.size(); ++i) {
      sum.data[i] = a.data[i] + b.data[i];
      prod.data[i] = a.data[i] * b.data[i];
      scaled.data[i] = -1.25 * a.data[i];
    }
    EXPECT_TRUE(all_close(run_reference("add", {a, b})[0], sum, 0, 0));
    EXPECT_TRUE(all_close(run_reference("mul", {a, b})[0], prod, 0, 0));
    EXPECT_TRUE(all_close(run_reference("scale", {a}, {{"alpha", -1.25}})[0], scaled, 0, 0));
  }
}

TEST_F(ReferenceTest, ScaleTakesAnIntegerAlpha) {
  RefTensor a = random_tensor(rng_, {5});
  RefTensor out = run_reference("scale", {a}, {{"alpha", int64_t{3}}})[0];
  for (size_t i = 0; i < a.data.size(); ++i) EXPECT_DOUBLE_EQ(out.data[i], 3 * a.data[i]);
}

TEST_F(ReferenceTest, SiluAndSiluGrad) {
  RefTensor x = random_tensor(rng_, {7, 13}, -8, 8), dy = random_tensor(rng_, {7, 13});
  RefTensor y = x, dx = x;
  for (size_t i = 0; i < x.data.size(); ++i) {
    double v = x.data[i], e = std::exp(-v);
    y.data[i] = v / (1 + e);
    // d/dv v / (1 + e^-v) = (1 + e^-v + v e^-v) / (1 + e^-v)^2.
    dx.data[i] = dy.data[i] * (1 + e + v * e) / ((1 + e) * (1 + e));
  }
  EXPECT_TRUE(all_close(run_reference("silu", {x})[0], y, kRtol, kAtol));
  EXPECT_TRUE(all_close(run_reference("silu_grad", {x, dy})[0], dx, kRtol, kAtol));
}

TEST_F(ReferenceTest, RmsNorm) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1}, {5, 7}, {2, 3, 33}}) {
    int64_t cols = shape.back(), rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    RefTensor x = random_tensor(rng_, shape), g = random_tensor(rng_, {cols});
    double eps = 1e-3;
    Mat xm = as_mat(x, rows, cols);
    Vec rms = ((xm.array().square().rowwise().sum() / cols) + eps).sqrt();
    Eigen::RowVectorXd gr = as_mat(g, 1, cols);
    Mat y = (xm.array().colwise() / rms.array()).rowwise() * gr.array();
    EXPECT_TRUE(all_close(run_reference("rmsnorm", {x, g}, {{"eps", eps}})[0], from_mat(y, shape),
                          kRtol, kAtol));
  }
}

// rmsnorm_grad against the explicit Jacobian of each row: J[c][k] = dy_c/dx_k.
TEST_F(ReferenceTest, RmsNormGradMatchesJacobian) {
  const int64_t rows = 6, cols = 9;
  const double eps = 1e-2;
  RefTensor x = random_tensor(rng_, {rows, cols}), g = random_tensor(rng_, {cols});
  RefTensor dy = random_tensor(rng_, {rows, cols});
  Mat dx(rows, cols);
  Vec dg = Vec::Zero(cols);
  Vec gv = as_mat(g, 1, cols).transpose();
  for (int64_t r = 0; r < rows; ++r) {
    Vec xr = as_mat(x, rows, cols).row(r).transpose();
    Vec dyr = as_mat(dy, rows, cols).row(r).transpose();
    double inv = 1 / std::sqrt(xr.squaredNorm() / cols + eps);
    // y = diag(g) * x * inv;  d inv/dx = -inv^3 x / n.
    Mat jac = gv.asDiagonal() *
              (inv * Mat::Identity(cols, cols) - std::pow(inv, 3) / cols * xr * xr.transpose());
    dx.row(r) = (jac.transpose() * dyr).transpose();
    dg += (xr * inv).cwiseProduct(dyr);
  }
  std::vector<RefTensor> got = run_reference("rmsnorm_grad", {x, g, dy}, {{"eps", eps}});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(all_close(got[0], from_mat(dx, {rows, cols}), 1e-10, 1e-12));
  EXPECT_TRUE(all_close(got[1], from_mat(Mat(dg.transpose()), {cols}), 1e-10, 1e-12));
}

TEST_F(ReferenceTest, SoftmaxIsStableAndMatchesLogSumExp) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 1}, {7}, {3, 33}, {2, 2, 130}}) {
    RefTensor x = random_tensor(rng_, shape, -30, 30);
    x.data[0] += 1000;  // exp(1000) overflows unless the max is subtracted
    int64_t cols = shape.back(), rows = x.numel() / cols;
    Mat xm = as_mat(x, rows, cols), y(rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      double lse =
          xm.row(r).maxCoeff() + std::log((xm.row(r).array() - xm.row(r).maxCoeff()).exp().sum());
      y.row(r) = (xm.row(r).array() - lse).exp().matrix();
    }
    RefTensor got = run_reference("softmax", {x})[0];
    EXPECT_TRUE(all_close(got, from_mat(y, shape), 1e-12, 1e-300));
    for (double v : got.data) EXPECT_TRUE(std::isfinite(v));
  }
}

// softmax_grad against the Jacobian diag(y) - y y^T.
TEST_F(ReferenceTest, SoftmaxGradMatchesJacobian) {
  const int64_t rows = 5, cols = 7;
  RefTensor y = run_reference("softmax", {random_tensor(rng_, {rows, cols})})[0];
  RefTensor dy = random_tensor(rng_, {rows, cols});
  Mat dx(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    Vec yr = as_mat(y, rows, cols).row(r).transpose();
    Mat jac = Mat(yr.asDiagonal()) - yr * yr.transpose();
    dx.row(r) = (jac * as_mat(dy, rows, cols).row(r).transpose()).transpose();
  }
  EXPECT_TRUE(all_close(run_reference("softmax_grad", {y, dy})[0], from_mat(dx, {rows, cols}),
                        1e-12, 1e-14));
}

TEST_F(ReferenceTest, MatmulAllTransposes) {
  const int64_t m = 7, k = 33, n = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      RefTensor a = random_tensor(rng_, ta ? std::vector<int64_t>{k, m} : std::vector{m, k});
      RefTensor b = random_tensor(rng_, tb ? std::vector<int64_t>{n, k} : std::vector{k, n});
      Mat am = as_mat(a, a.shape[0], a.shape[1]), bm = as_mat(b, b.shape[0], b.shape[1]);
      Mat c = (ta ? Mat(am.transpose()) : am) * (tb ? Mat(bm.transpose()) : bm);
      EXPECT_TRUE(
          all_close(run_reference("matmul", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}})[0],
                    from_mat(c, {m, n}), 1e-12, 1e-12));
    }
}

TEST(BackwardOpInference, ShapesAndErrors) {
  const OpRegistry& r = op_registry();
  TensorType x{DType::F32, {4, 7}}, g{DType::F32, {7}};
  EXPECT_EQ(r.find("silu_grad")->infer({x, x}, {}), (std::vector<TensorType>{x}));
  EXPECT_EQ(r.find("softmax_grad")->infer({x, x}, {}), (std::vector<TensorType>{x}));
  EXPECT_EQ(r.find("rmsnorm_grad")->infer({x, g, x}, {{"eps", 1e-6}}),
            (std::vector<TensorType>{x, g}));
  TensorType bad{DType::F32, {4, 8}};
  EXPECT_THROW(r.find("silu_grad")->infer({x, bad}, {}), ShapeError);
  EXPECT_THROW(r.find("softmax_grad")->infer({x, bad}, {}), ShapeError);
  EXPECT_THROW(r.find("rmsnorm_grad")->infer({x, g, bad}, {{"eps", 1e-6}}), ShapeError);
}

// ---- Every registered op, from its family's test cases ---------------------------------------

// Equal (infinities too) or within 1e-12 relative (1e-300 absolute), NaN where NaN is expected,
// and zeros of the same sign:
// an example is written out by hand, so it pins the details (relu(-0) = +0).
::testing::AssertionResult same_values(const RefTensor& got, const RefTensor& want) {
  if (got.shape != want.shape) return ::testing::AssertionFailure() << "shape mismatch";
  for (size_t i = 0; i < got.data.size(); ++i) {
    double g = got.data[i], w = want.data[i];
    bool ok = std::isnan(w) ? std::isnan(g)
                            : (g == w || std::abs(g - w) <= 1e-12 * std::abs(w) + 1e-300) &&
                                  (w != 0 || std::signbit(g) == std::signbit(w));
    if (!ok) return ::testing::AssertionFailure() << "element " << i << ": " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

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

class ReferenceExample : public ::testing::TestWithParam<ExampleParam> {};

TEST_P(ReferenceExample, GivesTheWrittenOutputs) {
  const OpExample& ex = testing::schema_of(GetParam().op).tests.examples[GetParam().index];
  std::vector<RefTensor> got = run_reference(GetParam().op, ex.inputs, ex.attrs);
  ASSERT_EQ(got.size(), ex.outputs.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(same_values(got[i], ex.outputs[i])) << "output " << i;
}

INSTANTIATE_TEST_SUITE_P(Ops, ReferenceExample, ::testing::ValuesIn(example_params()),
                         [](const ::testing::TestParamInfo<ExampleParam>& info) {
                           return info.param.op + "_example" + std::to_string(info.param.index);
                         });

class ReferenceCase : public ::testing::TestWithParam<testing::OpCase> {
 protected:
  void SetUp() override { RecordProperty("seed", std::to_string(testing::test_seed())); }
  std::mt19937_64 rng_{testing::test_seed()};
};

// The reference's outputs have the shapes inference promises, are finite on finite inputs, and
// come out the same twice.
TEST_P(ReferenceCase, AgreesWithInference) {
  const OpSchema& s = testing::schema_of(GetParam().op);
  Attrs attrs = testing::with_defaults(s, GetParam().c.attrs);
  std::vector<RefTensor> in = testing::random_inputs(rng_, s, GetParam().c);
  std::vector<RefTensor> got = s.reference(in, attrs);
  std::vector<TensorType> want =
      s.infer(testing::input_types(s, in, DType::F32, GetParam().c.input_dtypes), attrs);
  for (TensorType& t : want) t.dtype = DType::F32;  // references hold doubles, typed f32 here
  EXPECT_EQ(testing::types_of(got), want);
  for (const RefTensor& t : got)
    EXPECT_TRUE(
        std::all_of(t.data.begin(), t.data.end(), [](double v) { return std::isfinite(v); }));
  std::vector<RefTensor> again = s.reference(in, attrs);
  ASSERT_EQ(again.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(again[i].data, got[i].data) << "output " << i;
}

// Inference accepts every dtype the op lists (outputs of the same dtype, or the one its dtype
// attribute names, slots of a fixed dtype keeping theirs) and refuses the others with a
// ShapeError, so the dtypes `tilerun --list-ops`
// prints are the ones that work. An op whose every slot has a fixed dtype (check_index, and
// index_established, which has no inputs) has no dtype of its own to refuse.
TEST_P(ReferenceCase, InferenceAcceptsExactlyTheListedDtypes) {
  const OpSchema& s = testing::schema_of(GetParam().op);
  const OpTestCase& c = GetParam().c;
  Attrs attrs = testing::with_defaults(s, c.attrs);
  const bool from_attr = testing::dtype_from_attr(s, c.shapes.size(), c.input_dtypes);
  const bool all_fixed = !from_attr &&
                         s.input_dtypes.size() + c.input_dtypes.size() == c.shapes.size() &&
                         s.output_dtypes.size() + s.output_dtype_attrs.size() == s.outputs.size();
  for (DType dtype : testing::kAllDTypes) {
    std::vector<TensorType> in = testing::input_types(s, c.shapes, dtype, c.input_dtypes);
    // Ops whose inputs do not carry the dtype take it from their attribute (fill's `dtype`); cast
    // takes its output's from `to`.
    if (from_attr) attrs[s.dtype_attr] = std::string(dtype_name(dtype));
    DType want = dtype;
    if (!from_attr && !s.dtype_attr.empty())
      want = *parse_dtype(std::get<std::string>(attrs.at(s.dtype_attr)));
    bool listed = std::find(s.dtypes.begin(), s.dtypes.end(), dtype) != s.dtypes.end();
    if (listed) {
      std::vector<TensorType> out = s.infer(in, attrs);
      for (size_t i = 0; i < out.size(); ++i) {
        auto fixed = s.output_dtypes.find(static_cast<int>(i));
        auto named = s.output_dtype_attrs.find(static_cast<int>(i));
        const DType expected = named != s.output_dtype_attrs.end()
                                   ? *parse_dtype(std::get<std::string>(attrs.at(named->second)))
                                   : (fixed == s.output_dtypes.end() ? want : fixed->second);
        EXPECT_EQ(out[i].dtype, expected) << dtype_name(dtype) << " output " << i;
      }
    } else if (!all_fixed) {
      EXPECT_THROW(s.infer(in, attrs), ShapeError) << dtype_name(dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReferenceCase,
                         ::testing::ValuesIn(testing::registry_cases(/*gradient=*/false)),
                         [](const ::testing::TestParamInfo<testing::OpCase>& info) {
                           return info.param.name();
                         });

// Every op has a reference and at least one worked example in its family file.
TEST(ReferenceCoverage, EveryOpHasAReferenceAndAnExample) {
  for (const std::string& name : op_registry().names()) {
    const OpSchema& s = *op_registry().find(name);
    EXPECT_TRUE(s.reference) << name << " has no reference";
    EXPECT_FALSE(s.tests.examples.empty()) << name << " has no worked example";
  }
}

}  // namespace
}  // namespace tilerun::kernels
