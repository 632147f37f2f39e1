// Every op's gradient rule against central finite differences of its forward reference, in
// double. The rule's backward ops are composed by a tiny evaluator that runs their references
// (and type inference) in order; the loss is sum_k <w_k, y_k> for random w, so dy_k = w_k.
#include <algorithm>
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
    } else if (op.type == "zeros") {
      EXPECT_EQ(in.size(), 1u);
      out = in;
      for (RefTensor& t : out) std::fill(t.data.begin(), t.data.end(), 0.0);
    } else {
      const OpSchema& s = schema_of(op.type);
      Attrs attrs = with_defaults(s, op.attrs);
      out = s.reference(in, attrs);
      std::vector<TensorType> inferred = s.infer(testing::input_types(s, in), attrs);
      // References give doubles; an output of a fixed dtype (counting_sort's i32 order) has it.
      std::vector<TensorType> want = types_of(out);
      for (const auto& [slot, dtype] : s.output_dtypes)
        if (static_cast<size_t>(slot) < want.size()) want[slot].dtype = dtype;
      EXPECT_EQ(inferred, want) << op.type << ": reference and inference disagree";
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

class GradientTest : public ::testing::TestWithParam<testing::OpCase> {
 protected:
  void SetUp() override { RecordProperty("seed", std::to_string(testing::test_seed())); }
  std::mt19937_64 rng_{testing::test_seed()};
};

TEST_P(GradientTest, MatchesFiniteDifferences) {
  const std::string& op = GetParam().op;
  const OpTestCase& c = GetParam().c;
  const OpSchema& schema = schema_of(op);
  ASSERT_TRUE(schema.gradient) << op << " has no gradient rule";
  const Attrs attrs = with_defaults(schema, c.attrs);
  std::vector<RefTensor> x = testing::random_inputs(rng_, schema, c);
  const std::vector<TensorType> x_types = testing::input_types(schema, x);
  std::vector<RefTensor> y = run_reference(op, x, attrs);
  std::vector<RefTensor> w;
  for (const RefTensor& t : y) w.push_back(random_tensor(rng_, t.shape));

  // Central differences; h balances truncation (~h^2) against rounding (~1e-16 / h).
  // A kink of the op (min(a, b) where a = b, clamp at a bound, a tie of topk or reduce_max) that
  // a random draw puts within h of an element makes its difference wrong by up to half the jump in
  // slope (about one run in 10^3 of the whole suite). Where the differences over h and over h/4
  // disagree by more than the check's tolerance, a kink lies between: that element is not
  // compared (kink[i][e]). A smooth loss's two differ by ~1e-9; a kink fools this only if it lies
  // within ~1e-6 h of the element.
  const double h = 1e-5;
  auto central = [&](std::vector<RefTensor> xs, size_t i, size_t e, double step) {
    const double v = xs[i].data[e];
    xs[i].data[e] = v + step;
    const double lp = loss(op, xs, attrs, w);
    xs[i].data[e] = v - step;
    return (lp - loss(op, xs, attrs, w)) / (2 * step);
  };
  std::vector<RefTensor> fd;
  std::vector<std::vector<bool>> kink(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    RefTensor g = x[i];
    kink[i].assign(g.data.size(), false);
    if (testing::frozen_input(schema, i)) {  // targets, stored codes: no gradient to check
      fd.push_back(g);
      continue;
    }
    for (size_t e = 0; e < g.data.size(); ++e) {
      g.data[e] = central(x, i, e, h);
      const double near = central(x, i, e, h / 4);
      kink[i][e] = std::abs(g.data[e] - near) > 0.5 * (1e-7 + 1e-6 * std::abs(near));
    }
    // A kink near one element is chance; near several, the op is not smooth where the case draws.
    EXPECT_LE(std::count(kink[i].begin(), kink[i].end(), true), 1) << "x" << i << " kinks";
    fd.push_back(g);
  }

  // Every non-empty subset of the float inputs needing a gradient (integer inputs never do):
  // exactly those dx appear, correct.
  const size_t n = x.size();
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<bool> needs(n);
    bool integer_needed = false;
    for (size_t i = 0; i < n; ++i) {
      needs[i] = (mask >> i) & 1;
      integer_needed |= needs[i] && testing::frozen_input(schema, i);
    }
    if (integer_needed) continue;
    SCOPED_TRACE(::testing::Message() << "needs_grad mask " << mask);
    std::vector<GradOp> rule = schema.gradient(x_types, attrs, needs);
    std::map<std::string, RefTensor> v = run_rule(rule, x, y, w);
    for (size_t i = 0; i < n; ++i) {
      std::string dx = "dx" + std::to_string(i);
      if (!needs[i]) {
        EXPECT_FALSE(v.count(dx)) << dx << " produced but not needed";
        continue;
      }
      ASSERT_TRUE(v.count(dx)) << dx << " not produced";
      RefTensor got = v[dx];
      ASSERT_EQ(got.data.size(), fd[i].data.size()) << dx;
      for (size_t e = 0; e < got.data.size(); ++e)
        if (kink[i][e]) got.data[e] = fd[i].data[e];
      EXPECT_TRUE(testing::all_close(got, fd[i], 1e-6, 1e-7)) << dx;
    }
  }
  EXPECT_TRUE(schema.gradient(x_types, attrs, std::vector<bool>(n, false)).empty());
}

INSTANTIATE_TEST_SUITE_P(Ops, GradientTest,
                         ::testing::ValuesIn(testing::registry_cases(/*gradient=*/true)),
                         [](const ::testing::TestParamInfo<testing::OpCase>& info) {
                           return info.param.name();
                         });

// A detaching rule (stop_gradient's) says "zeros" for every input on the op's first kernel
// case: by definition, not the derivative, so it has no finite-difference cases.
bool detaches(const OpSchema& s) {
  if (!s.gradient || s.tests.kernel.empty()) return false;
  const OpTestCase& c = s.tests.kernel[0];
  std::vector<TensorType> in;
  for (const auto& shape : c.shapes) in.push_back({DType::F32, shape});
  std::vector<GradOp> rule =
      s.gradient(in, with_defaults(s, c.attrs), std::vector<bool>(in.size(), true));
  return !rule.empty() &&
         std::all_of(rule.begin(), rule.end(), [](const GradOp& op) { return op.type == "zeros"; });
}

// Every op with a gradient rule has gradient cases in its family file; an op without one has
// none (they would test nothing).
TEST(GradientCoverage, EveryRuleHasACase) {
  for (const std::string& name : op_registry().names()) {
    const OpSchema& s = *op_registry().find(name);
    EXPECT_EQ(static_cast<bool>(s.gradient), !s.tests.gradient.empty() ||
                                                 s.tests.straight_through || s.tests.fp8_gradient ||
                                                 detaches(s))
        << name
        << (s.gradient ? " has a gradient rule but no gradient case"
                       : " has gradient cases but no gradient rule");
  }
}

// A straight-through rule hands dy on unchanged (an alias, no kernel), for one input.
TEST(GradientCoverage, StraightThroughRulesPassDyOn) {
  int checked = 0;
  for (const std::string& name : op_registry().names()) {
    const OpSchema& s = *op_registry().find(name);
    if (!s.tests.straight_through) continue;
    ASSERT_TRUE(s.gradient) << name;
    ASSERT_FALSE(s.tests.kernel.empty()) << name;
    const OpTestCase& c = s.tests.kernel[0];
    std::vector<TensorType> in;
    for (const auto& shape : c.shapes) in.push_back({DType::F32, shape});
    std::vector<GradOp> rule = s.gradient(in, with_defaults(s, c.attrs), {true});
    ASSERT_EQ(rule.size(), 1u) << name;
    EXPECT_EQ(rule[0].type, "alias") << name;
    EXPECT_EQ(rule[0].inputs, std::vector<std::string>{"dy0"}) << name;
    EXPECT_EQ(rule[0].outputs, std::vector<std::string>{"dx0"}) << name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// stop_gradient detaches: its value is x, its rule gives x no gradient, and
// its schema says so (graph/autodiff gives its output none).
TEST(GradientCoverage, StopGradientDetaches) {
  const OpSchema* s = op_registry().find("stop_gradient");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(detaches(*s));
  EXPECT_TRUE(s->detaches);
  // A schema that says it detaches has the rule to match (the comparisons' rules give zeros too;
  // they do not claim the flag, which only saves backward ops).
  for (const std::string& name : op_registry().names())
    if (op_registry().find(name)->detaches)
      EXPECT_TRUE(detaches(*op_registry().find(name))) << name;
  EXPECT_FALSE(s->tests.straight_through);
  EXPECT_TRUE(s->tests.gradient.empty());
}

}  // namespace
}  // namespace tilerun::kernels
