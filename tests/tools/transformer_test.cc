// configs/transformer.yaml, the small causal LM: it trains for 100 steps on the CPU with a
// falling loss (the last 10 steps' mean below the first 10's), passes --check, and two processes
// print the same loss digits and save the same trained weights, byte for byte; and its attention
// is causal: changing token j changes the logits of rows j.. and leaves rows before j
// bit-identical.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

using testing::CliResult;

const std::string kConfig = std::string(TILERUN_SOURCE_DIR) + "/configs/transformer.yaml";

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

TEST(Transformer, LossFallsOverHundredStepsAndRepeatsBitForBit) {
  TILERUN_REQUIRE_CLI();
  const std::string save_a = testing::temp_path("lm_a.safetensors");
  const std::string save_b = testing::temp_path("lm_b.safetensors");
  const std::string args = "'" + kConfig + "' --device cpu --steps 100 --print-loss --save ";
  CliResult a = testing::run_cli(args + "'" + save_a + "' --check");
  ASSERT_EQ(a.exit_code, 0) << a.out;
  EXPECT_NE(a.out.find("check: ok"), std::string::npos) << a.out;
  std::vector<std::string> lines = testing::loss_lines(a.out);
  ASSERT_EQ(lines.size(), 100u) << a.out;
  std::vector<double> loss;
  for (const std::string& l : lines) loss.push_back(testing::loss_of(l));
  const double first = mean(loss, 0, 10), last = mean(loss, 90, 100);
  std::printf("[loss] first 10 steps %.6g, last 10 steps %.6g\n", first, last);
  EXPECT_LT(last, 0.5 * first);
  const std::string saved = testing::read_file(save_a);
  EXPECT_NE(saved.find("\"block.1.wq\""), std::string::npos) << "trained weights not saved";

  CliResult b = testing::run_cli(args + "'" + save_b + "'");
  ASSERT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(testing::loss_lines(b.out), lines);
  EXPECT_TRUE(testing::read_file(save_b) == saved) << "the two processes saved different bytes";
  std::remove(save_a.c_str());
  std::remove(save_b.c_str());
}

// Row r of a [rows, cols] f32 tensor.
std::vector<float> row(const HostTensor& t, int64_t r) {
  const int64_t cols = t.shape.back();
  std::vector<float> v(cols);
  std::memcpy(v.data(), t.data.data() + r * cols * 4, cols * 4);
  return v;
}

TEST(Transformer, AttentionIsCausal) {
  TILERUN_REQUIRE_CLI();
  Model model = load_model(kConfig);
  std::random_device rd;
  Session s(model, {.device = Device::Cpu, .seed = rd(), .forward_only = true});
  s.forward();
  const HostTensor before = s.outputs().at("head.logits");
  const HostTensor ids = s.tensor("ids");
  const int64_t T = before.shape[0], V = s.tensor("embed.table").shape[0];
  for (int64_t j : {int64_t{0}, T / 2, T - 1}) {
    // Token j replaced by the next id of the vocabulary.
    HostTensor changed = ids;
    int32_t id;
    std::memcpy(&id, changed.data.data() + 4 * j, 4);
    id = static_cast<int32_t>((id + 1) % V);
    std::memcpy(changed.data.data() + 4 * j, &id, 4);
    s.set_tensor("ids", changed);
    s.forward();
    const HostTensor after = s.outputs().at("head.logits");
    for (int64_t r = 0; r < T; ++r) {
      if (r < j)
        EXPECT_EQ(row(after, r), row(before, r)) << "row " << r << " sees token " << j;
      else
        EXPECT_NE(row(after, r), row(before, r)) << "row " << r << " does not see token " << j;
    }
    s.set_tensor("ids", ids);
  }
}

}  // namespace
}  // namespace tilerun
