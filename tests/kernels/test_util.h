// Helpers shared by the kernel-library tests: random tensors, attribute defaults, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "compiler/base/check.h"
#include "kernels/op_registry.h"

namespace tilerun::kernels::testing {

// A fresh seed per run (the inputs are new each time); tests print it so a failure can be
// replayed by setting TILERUN_TEST_SEED.
inline uint64_t test_seed() {
  if (const char* s = std::getenv("TILERUN_TEST_SEED")) return std::stoull(s);
  static const uint64_t seed = std::random_device{}();
  return seed;
}

inline RefTensor random_tensor(std::mt19937_64& rng, std::vector<int64_t> shape, double lo = -2.0,
                               double hi = 2.0) {
  RefTensor t{.shape = std::move(shape)};
  std::uniform_real_distribution<double> u(lo, hi);
  t.data.resize(t.numel());
  for (double& v : t.data) v = u(rng);
  return t;
}

// A random tensor for one test case: values in [c.lo, c.hi), none nearer to zero than c.min_abs,
// multiples of c.step when it is set.
inline RefTensor random_tensor(std::mt19937_64& rng, std::vector<int64_t> shape,
                               const OpTestCase& c) {
  RefTensor t = random_tensor(rng, std::move(shape), c.lo, c.hi);
  std::uniform_real_distribution<double> u(c.lo, c.hi);
  for (double& v : t.data) {
    while (std::abs(v) < c.min_abs) v = u(rng);
    if (c.step > 0) v = std::floor(v / c.step) * c.step;
  }
  return t;
}

// The inputs of one test case: random_tensor per shape, and 0 or 1 (even odds) for mask inputs.
inline std::vector<RefTensor> random_inputs(std::mt19937_64& rng, const OpTestCase& c) {
  std::vector<RefTensor> in;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    in.push_back(random_tensor(rng, c.shapes[i], c));
    if (std::find(c.masks.begin(), c.masks.end(), static_cast<int>(i)) != c.masks.end())
      for (double& v : in.back().data) v = std::bernoulli_distribution(0.5)(rng) ? 1.0 : 0.0;
  }
  return in;
}

// One test case of one op, named for ctest: "rmsnorm_case2".
struct OpCase {
  std::string op;
  int index = 0;
  OpTestCase c;
  std::string name() const { return op + "_case" + std::to_string(index); }
};

// "rmsnorm_case1: [5,7] [7] eps=0.5": for gtest's messages about a parameter.
inline std::ostream& operator<<(std::ostream& os, const OpCase& c) {
  os << c.name() << ":";
  for (const auto& s : c.c.shapes) {
    os << " [";
    for (size_t d = 0; d < s.size(); ++d) os << (d ? "," : "") << s[d];
    os << "]";
  }
  for (const auto& [name, v] : c.c.attrs) {
    os << " " << name << "=";
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>) os << x;
        },
        v);
  }
  return os;
}

// Every op's kernel (or gradient) test cases, in op name order: the shared suites run over these.
inline std::vector<OpCase> registry_cases(bool gradient) {
  std::vector<OpCase> out;
  for (const std::string& op : op_registry().names()) {
    const OpTests& t = op_registry().find(op)->tests;
    const std::vector<OpTestCase>& cases = gradient ? t.gradient : t.kernel;
    for (size_t i = 0; i < cases.size(); ++i) out.push_back({op, static_cast<int>(i), cases[i]});
  }
  return out;
}

// Every dtype there is (to check that an op refuses those it does not list).
inline const std::vector<DType> kAllDTypes = {
    DType::F32, DType::BF16,    DType::F16,  DType::F8E4M3, DType::I32, DType::I64,
    DType::U8,  DType::FP4E2M1, DType::E8M0, DType::F8E5M2, DType::Bool};

inline const OpSchema& schema_of(const std::string& op) {
  const OpSchema* s = op_registry().find(op);
  TR_CHECK(s != nullptr, "no such op: " + op);
  return *s;
}

// The attributes as the model parser passes them: defaults filled in.
inline Attrs with_defaults(const OpSchema& schema, Attrs attrs) {
  for (const AttrSpec& spec : schema.attrs)
    if (!attrs.count(spec.name) && spec.default_value) attrs[spec.name] = *spec.default_value;
  return attrs;
}

// Runs op's reference on inputs with defaults-filled attrs.
inline std::vector<RefTensor> run_reference(const std::string& op, const std::vector<RefTensor>& in,
                                            const Attrs& attrs = {}) {
  const OpSchema& s = schema_of(op);
  TR_CHECK(static_cast<bool>(s.reference), "op without a reference: " + op);
  return s.reference(in, with_defaults(s, attrs));
}

inline std::vector<TensorType> types_of(const std::vector<RefTensor>& ts) {
  std::vector<TensorType> out;
  for (const RefTensor& t : ts) out.push_back({DType::F32, t.shape});
  return out;
}

// The dtype of input slot i of an op run in `dtype`: the case's (OpTestCase::input_dtypes,
// `per_case`), its fixed dtype (an integer slot, a loss value) or `dtype`.
inline DType input_dtype(const OpSchema& schema, size_t i, DType dtype,
                         const std::map<int, DType>& per_case = {}) {
  if (auto c = per_case.find(static_cast<int>(i)); c != per_case.end()) return c->second;
  auto it = schema.input_dtypes.find(static_cast<int>(i));
  return it == schema.input_dtypes.end() ? dtype : it->second;
}

// Input slot i holds integers: never differentiated, drawn from [int_lo, int_hi).
inline bool integer_input(const OpSchema& schema, size_t i,
                          const std::map<int, DType>& per_case = {}) {
  return !dtype_is_float(input_dtype(schema, i, DType::F32, per_case));
}

// Whether input i is never differentiated: an integer, or stored low-precision codes or scales
// (FP8, FP4, E8M0 in a fixed slot: grouped_matmul_fp4's weights are frozen storage).
inline bool frozen_input(const OpSchema& schema, size_t i) {
  const DType d = input_dtype(schema, i, DType::F32, {});
  return integer_input(schema, i) || d == DType::F8E4M3 || d == DType::F8E5M2 ||
         d == DType::FP4E2M1 || d == DType::E8M0;
}

// Whether an op run on this case takes its dtype from its dtype attribute: it has one and none
// of its inputs carries the op's dtype (fill has none; dequantize's codes and scales have the
// case's dtypes); the suites then set the attribute to the dtype they run.
inline bool dtype_from_attr(const OpSchema& schema, size_t inputs,
                            const std::map<int, DType>& per_case) {
  if (schema.dtype_attr.empty()) return false;
  for (size_t i = 0; i < inputs; ++i)
    if (!schema.input_dtypes.count(static_cast<int>(i)) && !per_case.count(static_cast<int>(i)))
      return false;
  return true;
}

// The case's attributes for a run in `dtype` (see dtype_from_attr).
inline Attrs case_attrs(const OpSchema& schema, const OpTestCase& c, DType dtype) {
  Attrs attrs = c.attrs;
  if (dtype_from_attr(schema, c.shapes.size(), c.input_dtypes))
    attrs[schema.dtype_attr] = std::string(dtype_name(dtype));
  return attrs;
}

// The types of an op's inputs when it runs in `dtype`.
inline std::vector<TensorType> input_types(const OpSchema& schema,
                                           const std::vector<std::vector<int64_t>>& shapes,
                                           DType dtype = DType::F32,
                                           const std::map<int, DType>& per_case = {}) {
  std::vector<TensorType> out;
  for (size_t i = 0; i < shapes.size(); ++i)
    out.push_back({input_dtype(schema, i, dtype, per_case), shapes[i]});
  return out;
}
inline std::vector<TensorType> input_types(const OpSchema& schema, const std::vector<RefTensor>& ts,
                                           DType dtype = DType::F32,
                                           const std::map<int, DType>& per_case = {}) {
  std::vector<std::vector<int64_t>> shapes;
  for (const RefTensor& t : ts) shapes.push_back(t.shape);
  return input_types(schema, shapes, dtype, per_case);
}

// Fresh inputs for one case of `schema`: floats as random_inputs(c) (masks 0/1), integer slots
// uniform in [c.int_lo, c.int_hi) (or their running sums, c.running_sums), then c.derive.
inline std::vector<RefTensor> random_inputs(std::mt19937_64& rng, const OpSchema& schema,
                                            const OpTestCase& c) {
  std::vector<RefTensor> in;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    if (!integer_input(schema, i, c.input_dtypes)) {
      in.push_back(random_tensor(rng, c.shapes[i], c));
      if (std::find(c.masks.begin(), c.masks.end(), static_cast<int>(i)) != c.masks.end())
        for (double& v : in.back().data) v = std::bernoulli_distribution(0.5)(rng) ? 1.0 : 0.0;
      continue;
    }
    RefTensor t{.shape = c.shapes[i]};
    std::uniform_int_distribution<int64_t> u(c.int_lo, c.int_hi - 1);
    t.data.resize(t.numel());
    for (double& v : t.data) v = static_cast<double>(u(rng));
    if (std::find(c.running_sums.begin(), c.running_sums.end(), static_cast<int>(i)) !=
        c.running_sums.end())
      std::partial_sum(t.data.begin(), t.data.end(), t.data.begin());
    in.push_back(std::move(t));
  }
  if (c.derive) c.derive(in);
  return in;
}

// Max |a - b| / (atol + rtol * |b|) over the elements, with shapes checked; <= 1 passes.
inline ::testing::AssertionResult all_close(const RefTensor& got, const RefTensor& want,
                                            double rtol, double atol) {
  if (got.shape != want.shape) return ::testing::AssertionFailure() << "shape mismatch";
  if (got.data.size() != want.data.size()) return ::testing::AssertionFailure() << "size mismatch";
  for (size_t i = 0; i < got.data.size(); ++i) {
    double err = std::abs(got.data[i] - want.data[i]);
    if (!(err <= atol + rtol * std::abs(want.data[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got.data[i]
                                           << ", want " << want.data[i] << " (|err| " << err << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tilerun::kernels::testing
