// A NaN in a router's logits (issue 17): topk ranks NaN above every number (as torch.topk
// does), so the step runs and only the routing changes; no output need hold the NaN. The command
// line names the logits in its NaN/Inf warning (exit 0) and fails --check (exit 1), whether the
// NaN comes from the model's own arithmetic or from a --weights file; finite logits warn of
// nothing. The logits stay readable after backward (Session::selection_inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

using tilerun::testing::CliResult;
using tilerun::testing::read_file;
using tilerun::testing::run_cli;
using tilerun::testing::temp_path;

// Routes from logits + log(`neg`): with neg = -1 every logit is NaN. Only the routing reaches
// the outputs (the tokens in expert order and the experts' offsets), never the gate values.
std::string routing_yaml(double neg) {
  return "model: nan_router\ndtype: f32\ndims: {T: 4, E: 8, D: 6, TR: 8}\n"
         "inputs:\n"
         "  logits: {shape: [T, E]}\n"
         "  neg:    {shape: [T, E], init: {constant: " +
         std::to_string(neg) +
         "}}\n"
         "  h:      {shape: [T, D]}\n"
         "layers:\n  - name: route\n    weights:\n"
         "      scale: {shape: [TR, D], init: {normal: {std: 1.0}}}\n"
         "    ops:\n"
         "      - {op: log, in: neg, out: bad}\n"
         "      - {op: add, in: [logits, bad], out: router}\n"
         "      - {op: topk, in: router, out: [gate, expert], k: 2}\n"
         "      - {op: counting_sort, in: expert, out: [position, order, row, offsets], bins: 8}\n"
         "      - {op: embedding, in: [h, row], out: xs}\n"
         "      - {op: mul, in: [xs, scale], out: ys}\n"
         "      - {op: embedding, in: [ys, position], out: back}\n"
         "outputs: [route.back, route.offsets]\n";
}

std::string write_model(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(NanRouting, NanLogitsFromTheModelAreNamedAndFailTheCheck) {
  TILERUN_REQUIRE_CLI();
  const std::string nan = write_model("nan_router.yaml", routing_yaml(-1));
  const std::string report = temp_path("nan_router.json");
  CliResult r = run_cli("'" + nan + "' --device cpu --report '" + report + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("tilerun: warning: route.router holds NaN or Inf"), std::string::npos)
      << r.out;
  EXPECT_NE(read_file(report).find("\"non_finite\": \"route.router\""), std::string::npos)
      << read_file(report);
  CliResult c = run_cli("'" + nan + "' --device cpu --check");
  EXPECT_EQ(c.exit_code, 1) << c.out;
  EXPECT_NE(c.out.find("check: FAILED, route.router holds NaN or Inf"), std::string::npos) << c.out;

  const std::string fine = write_model("finite_router.yaml", routing_yaml(2));
  CliResult f = run_cli("'" + fine + "' --device cpu --check");
  EXPECT_EQ(f.exit_code, 0) << f.out;
  EXPECT_EQ(f.out.find("warning"), std::string::npos) << f.out;
  for (const std::string& p : {nan, fine, report}) std::remove(p.c_str());
}

// configs/topk.yaml given one NaN router logit by --weights: the warning names the input itself
// (not the first NaN output or gradient it spread to), and --check fails.
TEST(NanRouting, ANanRouterLogitFromWeightsIsNamed) {
  TILERUN_REQUIRE_CLI();
  const std::string config = std::string(TILERUN_SOURCE_DIR) + "/configs/topk.yaml";
  HostTensor router{.dtype = DType::F32, .shape = {16, 8}, .data = {}};
  std::vector<float> v(16 * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7f * static_cast<float>(i));
  v[21] = std::numeric_limits<float>::quiet_NaN();
  router.data.resize(v.size() * sizeof(float));
  std::memcpy(router.data.data(), v.data(), router.data.size());
  const std::string weights = temp_path("nan_router.safetensors");
  write_safetensors(weights, {{"router", router}});
  const std::string args =
      "'" + config + "' --device cpu --allow-missing --weights '" + weights + "'";
  CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("tilerun: warning: router holds NaN or Inf"), std::string::npos) << r.out;
  CliResult c = run_cli(args + " --check");
  EXPECT_EQ(c.exit_code, 1) << c.out;
  EXPECT_NE(c.out.find("check: FAILED, router holds NaN or Inf"), std::string::npos) << c.out;
  std::remove(weights.c_str());
}

// The logits are kept for the whole step: after backward they still hold logits + log 2.
TEST(NanRouting, SelectionInputsAreReadableAfterBackward) {
  TILERUN_REQUIRE_CLI();
  const Model model = parse_model(routing_yaml(2), "finite_router.yaml");
  Session s(model, {.device = Device::Cpu, .seed = 5});
  s.forward();
  s.backward();
  const TensorMap selection = s.selection_inputs();
  ASSERT_EQ(selection.size(), 1u);
  ASSERT_TRUE(selection.count("route.router"));
  const HostTensor logits = s.tensor("logits"), router = selection.at("route.router");
  ASSERT_EQ(router.numel(), logits.numel());
  for (int64_t i = 0; i < router.numel(); ++i) {
    float x, y;
    std::memcpy(&x, logits.data.data() + 4 * i, 4);
    std::memcpy(&y, router.data.data() + 4 * i, 4);
    EXPECT_NEAR(y, x + std::log(2.0f), 1e-6f * (1 + std::fabs(x))) << "element " << i;
  }
}

}  // namespace
}  // namespace tilerun
