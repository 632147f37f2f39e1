// `tilerun MODEL --steps N --save F` with an optimizer saves the weights after exactly N updates
// and the outputs and gradients of step N (those its update used), not those of the profiling
// pass that runs after the steps: checked against the SGD rule between N = 1, 2, 3, against the
// initialiser's weights, and against a library session that runs N steps and never profiles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "graph/runtime/cuda_driver.h"
#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

using tilerun::testing::CliResult;
using tilerun::testing::run_cli;
using tilerun::testing::temp_path;

constexpr float kLr = 0.25f;

// An MLP with a square loss and plain SGD, so one update is w - lr * dw and nothing else.
std::string mlp_yaml() {
  return "model: sgd_mlp\ndtype: f32\ndims: {B: 8, D: 6, H: 10}\n"
         "inputs:\n  x: {shape: [B, D]}\n"
         "layers:\n  - name: mlp\n    weights:\n"
         "      w1: {shape: [D, H], init: {normal: {std: 0.5}}}\n"
         "      w2: {shape: [H, D], init: {normal: {std: 0.5}}}\n"
         "    ops:\n"
         "      - {op: matmul, in: [x, w1], out: a}\n"
         "      - {op: tanh, in: a, out: h}\n"
         "      - {op: matmul, in: [h, w2], out: y}\n"
         "outputs: [mlp.y]\n"
         "optimizer: {sgd: {lr: 0.25}}\n";
}

std::string model_path() {
  static const std::string path = [] {
    std::string p = temp_path("sgd_mlp.yaml");
    std::ofstream(p) << mlp_yaml();
    return p;
  }();
  return path;
}

// `tilerun MODEL --device DEVICE --steps N ARGS --save F`, read back.
TensorMap saved_after(const std::string& device, int steps, const std::string& args = "") {
  const std::string file = temp_path(device + "_" + std::to_string(steps) + "_" +
                                     std::to_string(args.size()) + ".safetensors");
  CliResult r = run_cli("'" + model_path() + "' --device " + device + " --steps " +
                        std::to_string(steps) + " " + args + " --save '" + file + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  TensorMap t = r.exit_code == 0 ? read_safetensors(file) : TensorMap{};
  std::remove(file.c_str());
  return t;
}

std::vector<float> floats(const HostTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

// `after` is `before` less one SGD step along `grad` (to f32 rounding), and moved at all.
void expect_one_update(const HostTensor& before, const HostTensor& grad, const HostTensor& after,
                       const std::string& what) {
  std::vector<float> w = floats(before), g = floats(grad), w_new = floats(after);
  ASSERT_EQ(w.size(), w_new.size()) << what;
  double moved = 0;
  int wrong = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const float want = w[i] - kLr * g[i];
    const double tolerance = 4e-7 * (std::fabs(w[i]) + std::fabs(kLr * g[i]));
    if (!(std::fabs(w_new[i] - want) <= tolerance) && wrong++ == 0)
      ADD_FAILURE() << what << ": element " << i << " is " << w_new[i] << ", expected " << want
                    << " (" << w[i] << " - " << kLr << " * " << g[i] << ")";
    moved += std::fabs(w_new[i] - w[i]);
  }
  EXPECT_EQ(wrong, 0) << what << ": elements not one update away";
  EXPECT_GT(moved, 1e-3) << what << " did not move";
}

// What a library session gives after `steps` steps without any profiling pass: the last step's
// outputs and gradients, then the weights after its update.
TensorMap steps_without_profiling(Device device, int steps) {
  const Model model = load_model(model_path());
  Session s(model, {.device = device});
  TensorMap all;
  for (int i = 0; i < steps; ++i) {
    s.forward();
    s.backward();
    if (i == steps - 1) {
      all = s.outputs();
      for (auto& [name, t] : s.gradients()) all["grad." + name] = std::move(t);
    }
    s.update();
  }
  for (const char* w : {"mlp.w1", "mlp.w2"}) all[w] = s.tensor(w);
  return all;
}

void expect_same_bytes(const TensorMap& a, const TensorMap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": no " << name;
    EXPECT_TRUE(t.data == b.at(name).data) << what << ": " << name << " differs";
  }
}

void check_device(const std::string& device, Device d) {
  const TensorMap initial = initialize_tensors(load_model(model_path()), 0);
  const TensorMap s1 = saved_after(device, 1), s2 = saved_after(device, 2),
                  s3 = saved_after(device, 3);
  ASSERT_FALSE(s1.empty() || s2.empty() || s3.empty());
  for (const char* w : {"mlp.w1", "mlp.w2"}) {
    const std::string g = std::string("grad.") + w;
    expect_one_update(initial.at(w), s1.at(g), s1.at(w), device + " step 1, " + w);
    expect_one_update(s1.at(w), s2.at(g), s2.at(w), device + " step 2, " + w);
    expect_one_update(s2.at(w), s3.at(g), s3.at(w), device + " step 3, " + w);
  }
  // The first step's output is the untrained model's: the forward-only run's.
  const TensorMap untrained = saved_after(device, 1, "--forward-only");
  ASSERT_TRUE(untrained.count("mlp.y"));
  EXPECT_TRUE(s1.at("mlp.y").data == untrained.at("mlp.y").data);
  // Nothing the profiling pass does reaches the file, whichever way it times the kernels.
  expect_same_bytes(s2, steps_without_profiling(d, 2), device + " --steps 2 vs no profiling");
  expect_same_bytes(s3, saved_after(device, 3, "--profile off"), device + " --profile off");
}

TEST(SaveAfterTraining, CpuSavesTheWeightsAfterExactlyNStepsAndStepNsOutputsAndGradients) {
  TILERUN_REQUIRE_CLI();
  check_device("cpu", Device::Cpu);
}

TEST(SaveAfterTraining, CudaSavesTheWeightsAfterExactlyNStepsAndStepNsOutputsAndGradients) {
  TILERUN_REQUIRE_CLI();
  std::string why;
  if (!graph::cuda_driver(&why)) GTEST_SKIP() << why;
  check_device("cuda", Device::Cuda);
}

}  // namespace
}  // namespace tilerun
