// configs/mhc-fused.yaml (the fused hc_pre / hc_post) against configs/mhc.yaml (the same mHC
// composed from ~25 small ops) on the same fresh random streams and weights: outputs and every
// gradient agree within f32 rounding (the two sum in different orders), and the fused step runs
// fewer kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

const std::string kDir = std::string(TILERUN_SOURCE_DIR) + "/configs/";

std::vector<float> floats(const HostTensor& t) {
  EXPECT_EQ(t.dtype, DType::F32);
  std::vector<float> v(t.numel());
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

// |a - b|₂ / |b|₂.
double relative_l2(const HostTensor& a, const HostTensor& b) {
  const std::vector<float> x = floats(a), y = floats(b);
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    norm += double(y[i]) * y[i];
  }
  return std::sqrt(diff / norm);
}

int64_t kernels_of(const Session& s) {
  int64_t n = 0;
  for (const LayerTiming& t : s.timings()) n += t.kernels;
  return n;
}

TEST(MhcFused, MatchesTheComposedOpsOnFreshInputs) {
  const Model composed = load_model(kDir + "mhc.yaml"), fused = load_model(kDir + "mhc-fused.yaml");
  std::random_device rd;
  const uint64_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Session a(composed, {.device = Device::Cpu, .seed = seed});
  Session b(fused, {.device = Device::Cpu, .seed = seed + 1});
  a.forward();
  a.backward();
  // Every input and weight of the composed model, bound in the fused one; its extra weight,
  // V4's scale of the mixes, is 1 (the composed model has none).
  const TensorMap grads_a = a.gradients();
  for (const auto& [name, g] : grads_a) b.set_tensor(name, a.tensor(name));
  b.forward();  // a first step names b's weights (gradients() lists them)
  b.backward();
  int scales = 0;
  for (const auto& [name, g] : b.gradients()) {
    if (grads_a.count(name)) continue;
    ASSERT_NE(name.find("scale"), std::string::npos) << name << " is not in the composed model";
    HostTensor ones = b.tensor(name);
    const float one = 1.0f;
    for (int64_t i = 0; i < ones.numel(); ++i) std::memcpy(ones.data.data() + 4 * i, &one, 4);
    b.set_tensor(name, ones);
    ++scales;
  }
  EXPECT_EQ(scales, 2);  // one per layer
  b.forward();
  b.backward();

  const TensorMap outs_a = a.outputs(), outs_b = b.outputs();
  ASSERT_EQ(outs_a.size(), 1u);
  for (const auto& [name, out] : outs_a) {
    ASSERT_TRUE(outs_b.count(name)) << name;
    EXPECT_LT(relative_l2(outs_b.at(name), out), 1e-5) << name;
  }
  const TensorMap grads_b = b.gradients();
  for (const auto& [name, g] : grads_a) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(grads_b.count(name));
    EXPECT_LT(relative_l2(grads_b.at(name), g), 1e-4);
  }
  const int64_t ka = kernels_of(a), kb = kernels_of(b);
  std::printf("[kernels] composed %lld, fused %lld (forward and backward)\n",
              static_cast<long long>(ka), static_cast<long long>(kb));
  EXPECT_LT(kb, ka);
}

// Batch invariance: the first 5 tokens through a T = 5 copy of the model give the bits they get
// among 16 (every kernel's sums are per token or fixed by the shape's other dims).
TEST(MhcFused, ATokensResultDoesNotDependOnTheBatch) {
  std::ifstream in(kDir + "mhc-fused.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string small = text.str();
  const size_t at = small.find("T: 16");
  ASSERT_NE(at, std::string::npos);
  small.replace(at, 5, "T: 5");
  std::random_device rd;
  const uint64_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Session a(load_model(kDir + "mhc-fused.yaml"), {.device = Device::Cpu, .seed = seed});
  Session b(parse_model(small, "mhc-fused-T5.yaml"), {.device = Device::Cpu, .seed = seed + 1});
  a.forward();
  a.backward();
  for (const auto& [name, g] : a.gradients()) {
    HostTensor v = a.tensor(name);
    if (name == "x") {
      v.shape[0] = 5;
      v.data.resize(v.data.size() * 5 / 16);
    }
    b.set_tensor(name, v);
  }
  b.forward();
  const HostTensor out_a = a.outputs().begin()->second, out_b = b.outputs().begin()->second;
  ASSERT_EQ(out_b.nbytes() * 16, out_a.nbytes() * 5);
  EXPECT_EQ(std::memcmp(out_a.data.data(), out_b.data.data(), out_b.data.size()), 0);
}

}  // namespace
}  // namespace tilerun
