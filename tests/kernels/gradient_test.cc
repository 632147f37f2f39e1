// Every op's gradient rule against central finite differences of its forward reference, in
// double. The rule's backward ops are composed by a tiny evaluator that runs their references
// (and type inference) in order; the loss is sum_k <w_k, y_k> for random w, so dy_k = w_k.
#include <map>

#include "kernels/op_registry.h"
#include "tests/kernels/test_util.h"

namespace tilerun::kernels {
namespace {

using testing::random_tensor;
using testing::run_reference;
using testing::schema_of;
using testing::types_of;
using testing::with_defaults;

struct GradCase {
  std::string op;
  std::vector<std::vector<int64_t>> shapes;  // of the inputs
  Attrs attrs;
};

std::ostream& operator<<(std::ostream& os, const GradCase& c) {
  os << c.op;
  for (const auto& s : c.shapes) os << " " << to_string(TensorType{DType::F32, s});
  for (const auto& [name, v] : c.attrs) {
    os << " " << name << "=";
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>) os << x;
        },
        v);
  }
  return os;
}

// Runs a gradient rule: binds xi, yi, dyi, then each backward op's reference. Each op's outputs
// must have the types its inference promises. Returns every bound value by name.
std::map<std::string, RefTensor> run_rule(const std::vector<GradOp>& rule,
                                          const std::vector<RefTensor>& x,
                                          const std::vector<RefTensor>& y,
                                          const std::vector<RefTensor>& dy) {
  std::map<std::string, RefTensor> v;
  for (size_t i = 0; i < x.size(); ++i) v["x" + std::to_string(i)] = x[i];
  for (size_t i = 0; i < y.size(); ++i) v["y" + std::to_string(i)] = y[i];
  for (size_t i = 0; i < dy.size(); ++i) v["dy" + std::to_string(i)] = dy[i];
  for (const GradOp& op : rule) {
    std::vector<RefTensor> in;
    for (const std::string& n : op.inputs) {
      EXPECT_TRUE(v.count(n)) << op.type << " reads unbound " << n;
      in.push_back(v[n]);
    }
    std::vector<RefTensor> out;
    if (op.type == "alias") {
      EXPECT_EQ(in.size(), 1u);
      out = in;
    } else {
      const OpSchema& s = schema_of(op.type);
      Attrs attrs = with_defaults(s, op.attrs);
      out = s.reference(in, attrs);
      std::vector<TensorType> inferred = s.infer(types_of(in), attrs);
      EXPECT_EQ(inferred, types_of(out)) << op.type << ": reference and inference disagree";
    }
    EXPECT_EQ(out.size(), op.outputs.size()) << op.type;
    for (size_t i = 0; i < out.size() && i < op.outputs.size(); ++i) {
      EXPECT_FALSE(v.count(op.outputs[i])) << op.type << " rebinds " << op.outputs[i];
      v[op.outputs[i]] = out[i];
    }
  }
  return v;
}

double loss(const std::string& op, const std::vector<RefTensor>& x, const Attrs& attrs,
            const std::vector<RefTensor>& w) {
  std::vector<RefTensor> y = run_reference(op, x, attrs);
  double l = 0;
  for (size_t k = 0; k < y.size(); ++k)
    for (size_t e = 0; e < y[k].data.size(); ++e) l += w[k].data[e] * y[k].data[e];
  return l;
}

class GradientTest : public ::testing::TestWithParam<GradCase> {
 protected:
  void SetUp() override { RecordProperty("seed", std::to_string(testing::test_seed())); }
  std::mt19937_64 rng_{testing::test_seed()};
};

TEST_P(GradientTest, MatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  const OpSchema& schema = schema_of(c.op);
  ASSERT_TRUE(schema.gradient) << c.op << " has no gradient rule";
  const Attrs attrs = with_defaults(schema, c.attrs);
  std::vector<RefTensor> x;
  for (const auto& s : c.shapes) x.push_back(random_tensor(rng_, s));
  std::vector<RefTensor> y = run_reference(c.op, x, attrs);
  std::vector<RefTensor> w;
  for (const RefTensor& t : y) w.push_back(random_tensor(rng_, t.shape));

  // Central differences; h balances truncation (~h^2) against rounding (~1e-16 / h).
  const double h = 1e-5;
  std::vector<RefTensor> fd;
  for (size_t i = 0; i < x.size(); ++i) {
    RefTensor g = x[i];
    for (size_t e = 0; e < g.data.size(); ++e) {
      std::vector<RefTensor> xp = x, xm = x;
      xp[i].data[e] += h;
      xm[i].data[e] -= h;
      g.data[e] = (loss(c.op, xp, attrs, w) - loss(c.op, xm, attrs, w)) / (2 * h);
    }
    fd.push_back(g);
  }

  // Every non-empty subset of inputs needing a gradient: exactly those dx appear, correct.
  const size_t n = x.size();
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<bool> needs(n);
    for (size_t i = 0; i < n; ++i) needs[i] = (mask >> i) & 1;
    SCOPED_TRACE(::testing::Message() << "needs_grad mask " << mask);
    std::vector<GradOp> rule = schema.gradient(types_of(x), attrs, needs);
    std::map<std::string, RefTensor> v = run_rule(rule, x, y, w);
    for (size_t i = 0; i < n; ++i) {
      std::string dx = "dx" + std::to_string(i);
      if (!needs[i]) {
        EXPECT_FALSE(v.count(dx)) << dx << " produced but not needed";
        continue;
      }
      ASSERT_TRUE(v.count(dx)) << dx << " not produced";
      EXPECT_TRUE(testing::all_close(v[dx], fd[i], 1e-6, 1e-7)) << dx;
    }
  }
  EXPECT_TRUE(schema.gradient(types_of(x), attrs, std::vector<bool>(n, false)).empty());
}

INSTANTIATE_TEST_SUITE_P(
    Ops, GradientTest,
    ::testing::Values(
        GradCase{"add", {{7, 3}, {7, 3}}, {}}, GradCase{"mul", {{33}, {33}}, {}},
        GradCase{"scale", {{2, 3, 5}}, {{"alpha", -1.7}}}, GradCase{"silu", {{7, 5}}, {}},
        GradCase{"rmsnorm", {{5, 7}, {7}}, {}},
        GradCase{"rmsnorm", {{2, 3, 9}, {9}}, {{"eps", 0.5}}},
        GradCase{"rmsnorm", {{1}, {1}}, {{"eps", 0.1}}}, GradCase{"softmax", {{3, 7}}, {}},
        GradCase{"softmax", {{1, 1}}, {}}, GradCase{"softmax", {{2, 2, 5}}, {}},
        GradCase{"matmul", {{3, 5}, {5, 4}}, {}},
        GradCase{"matmul", {{5, 3}, {5, 4}}, {{"transpose_a", true}}},
        GradCase{"matmul", {{3, 5}, {4, 5}}, {{"transpose_b", true}}},
        GradCase{"matmul", {{5, 3}, {4, 5}}, {{"transpose_a", true}, {"transpose_b", true}}},
        GradCase{"matmul", {{1, 1}, {1, 7}}, {}}),
    [](const ::testing::TestParamInfo<GradCase>& info) {
      return info.param.op + "_" + std::to_string(info.index);
    });

}  // namespace
}  // namespace tilerun::kernels
