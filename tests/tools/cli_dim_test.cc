// --dim NAME=N: the command line sets a dim the model declares before anything is read from it;
// shapes, attributes and kernels follow, and a mistake is a usage error (exit 2) saying why.
// --layers N: every layer that declares `repeat:` is repeated N times, each with its own weights.
#include <gtest/gtest.h>

#include <random>

#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

using testing::run_cli;

const std::string kTiny = TILERUN_SOURCE_DIR "/configs/tiny.yaml";

TEST(CliDim, SetsTheDimBeforeTheShapesAreRead) {
  TILERUN_REQUIRE_CLI();
  std::mt19937 rng(std::random_device{}());
  const int64_t t = std::uniform_int_distribution<int64_t>(1, 300)(rng);
  Model model = load_model(kTiny, {.dims = {{"T", t}}});
  EXPECT_EQ(model.find_tensor("x")->shape, (std::vector<int64_t>{t, 256}));
  bool listed = false;
  for (const auto& [name, value] : model.dims) listed = listed || (name == "T" && value == t);
  EXPECT_TRUE(listed);
  // The file's own value otherwise.
  EXPECT_EQ(load_model(kTiny).find_tensor("x")->shape, (std::vector<int64_t>{128, 256}));
}

TEST(CliDim, AStepAtTheNewSizeMatchesTheReference) {
  TILERUN_REQUIRE_CLI();
  std::mt19937 rng(std::random_device{}());
  const int t = std::uniform_int_distribution<int>(1, 40)(rng);
  testing::CliResult r =
      run_cli("'" + kTiny + "' --device cpu --check --dim T=" + std::to_string(t) + " --dim F=96");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("check: ok"), std::string::npos) << r.out;
}

TEST(CliDim, MistakesAreUsageErrors) {
  TILERUN_REQUIRE_CLI();
  struct Case {
    std::string args, says;
  } cases[] = {
      {"--dim X=3",
       "--dim X=3: model 'tiny' (" + kTiny + ") declares no dim 'X' (its dims: T, D, F)"},
      {"--dim t=3", "declares no dim 't'"},
      {"--dim T=0", "option --dim expects N >= 1, found 'T=0'"},
      {"--dim T", "option --dim expects NAME=N, found 'T'"},
      {"--dim =4", "option --dim expects NAME=N, found '=4'"},
      {"--dim T=-1", "option --dim expects a non-negative integer"},
      {"--dim T=2 --dim T=3", "option --dim gives dim 'T' twice ('T=2' and 'T=3')"},
  };
  for (const Case& c : cases) {
    testing::CliResult r = run_cli("'" + kTiny + "' --validate " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << ": " << r.out;
  }
}

TEST(CliLayers, RepeatsEveryRepeatedLayer) {
  TILERUN_REQUIRE_CLI();
  std::mt19937 rng(std::random_device{}());
  const int64_t n = std::uniform_int_distribution<int64_t>(1, 6)(rng);
  Model model = load_model(kTiny, {.layers = n});
  for (int64_t i = 0; i < n + 1; ++i)
    EXPECT_EQ(model.find_tensor("block." + std::to_string(i) + ".w1") != nullptr, i < n) << i;
  testing::CliResult r =
      run_cli("'" + kTiny + "' --device cpu --check --dim T=8 --layers " + std::to_string(n));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("check: ok"), std::string::npos) << r.out;
}

TEST(CliLayers, MistakesAreUsageErrors) {
  TILERUN_REQUIRE_CLI();
  const std::string embedding = TILERUN_SOURCE_DIR "/configs/embedding.yaml";
  testing::CliResult r = run_cli("'" + embedding + "' --validate --layers 2");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--layers 2: model 'embedding' (" + embedding +
                       ") has no layer with 'repeat:' to repeat"),
            std::string::npos)
      << r.out;
  r = run_cli("'" + kTiny + "' --validate --layers 0");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("option --layers expects at least 1, found '0'"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace tilerun
