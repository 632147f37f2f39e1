// `tilerun MODEL --steps N` as a training loop: configs/classifier.yaml (an MLP, cross-entropy on
// integer labels, AdamW) trains for 100 steps on the CPU with a falling loss, and two processes
// print the same loss digits and save the same trained weights, byte for byte.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"

namespace {

using tilerun::testing::CliResult;
using tilerun::testing::loss_lines;
using tilerun::testing::loss_of;
using tilerun::testing::read_file;
using tilerun::testing::run_cli;
using tilerun::testing::temp_path;

TEST(Train, ClassifierLossFallsOverHundredStepsAndRepeatsBitForBit) {
  TILERUN_REQUIRE_CLI();
  const std::string save_a = temp_path("a.safetensors"), save_b = temp_path("b.safetensors");
  const std::string args = std::string(TILERUN_SOURCE_DIR) +
                           "/configs/classifier.yaml --device cpu --steps 100 --print-loss --check "
                           "--save ";
  CliResult a = run_cli(args + "'" + save_a + "'");
  ASSERT_EQ(a.exit_code, 0) << a.out;
  std::vector<std::string> lines = loss_lines(a.out);
  ASSERT_EQ(lines.size(), 100u) << a.out;
  EXPECT_EQ(lines[0].rfind("step 1: loss ", 0), 0u) << lines[0];
  // Random labels of 8 classes: about ln 8 at first, then memorised.
  std::vector<double> loss;
  for (const std::string& l : lines) loss.push_back(loss_of(l));
  EXPECT_GT(loss[0], 1.0);
  EXPECT_LT(loss[99], 0.05 * loss[0]);
  // Falling throughout: each block of 10 steps averages below the one before.
  for (int block = 1; block < 10; ++block) {
    double before = 0, now = 0;
    for (int i = 0; i < 10; ++i) before += loss[(block - 1) * 10 + i], now += loss[block * 10 + i];
    EXPECT_LT(now, before) << "steps " << block * 10 + 1 << " to " << block * 10 + 10;
  }
  // The trained weights are saved, with the check of the final step against the reference.
  EXPECT_NE(a.out.find("check: ok"), std::string::npos) << a.out;
  const std::string saved = read_file(save_a);
  EXPECT_NE(saved.find("\"mlp.w1\""), std::string::npos);

  CliResult b = run_cli(args + "'" + save_b + "'");
  ASSERT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(loss_lines(b.out), lines);  // every printed digit (9 significant) the same
  EXPECT_TRUE(read_file(save_b) == saved) << "the two processes saved different bytes";
  std::remove(save_a.c_str());
  std::remove(save_b.c_str());
}

// The optimizer runs only after backward: a forward-only run prints the same first loss and
// never changes the weights.
TEST(Train, ForwardOnlyStepsDoNotTrain) {
  TILERUN_REQUIRE_CLI();
  CliResult r =
      run_cli(std::string(TILERUN_SOURCE_DIR) +
              "/configs/classifier.yaml --device cpu --steps 3 --print-loss --forward-only");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> lines = loss_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(loss_of(lines[0]), loss_of(lines[1]));
  EXPECT_EQ(loss_of(lines[1]), loss_of(lines[2]));
}

}  // namespace
