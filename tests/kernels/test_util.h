// Helpers shared by the kernel-library tests: random tensors, attribute defaults, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
