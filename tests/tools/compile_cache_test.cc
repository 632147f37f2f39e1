// The on-disk compile caches through the command line: a second run of a model reads every
// lowered kernel (and so asks Z3 nothing) and every CPU object from $TILERUN_CACHE_DIR and
// computes the same loss, outputs and gradients bit for bit; without the lowered kernels it reads
// every Z3 verdict instead (no solver time), with the same results; a damaged verdict entry is
// reported, asked again and rewritten.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace tilerun::testing {
namespace {

namespace fs = std::filesystem;

struct OpsRun {
  CliResult cli;
  nlohmann::json proofs;
  std::string saved;  // outputs and gradients (.safetensors bytes)
};

OpsRun run_ops(const std::string& tag) {
  const std::string saved = temp_path("cache_save_" + tag), report = saved + ".json";
  OpsRun r;
  r.cli = run_cli(std::string(TILERUN_SOURCE_DIR) + "/configs/ops.yaml --device cpu --steps 1 " +
                  "--print-loss --save '" + saved + "' --report '" + report + "'");
  if (r.cli.exit_code == 0) {
    r.proofs = nlohmann::json::parse(read_file(report))["proofs"];
    r.saved = read_file(saved);
  }
  fs::remove(saved);
  fs::remove(report);
  return r;
}

TEST(CompileCache, AWarmRunLowersNothingAndCompilesTheSameKernels) {
  TILERUN_REQUIRE_CLI();
  const fs::path cache = temp_path("compile_cache");
  fs::remove_all(cache);
  ASSERT_EQ(::setenv("TILERUN_CACHE_DIR", cache.c_str(), 1), 0);
  OpsRun cold = run_ops("cold");
  ASSERT_EQ(cold.cli.exit_code, 0) << cold.cli.out;
  EXPECT_EQ(cold.proofs["z3_disk_hits"].get<int>(), 0);
  const int queries = cold.proofs["z3_queries"].get<int>();
  ASSERT_GT(queries, 0);

  OpsRun warm = run_ops("warm");
  ASSERT_EQ(warm.cli.exit_code, 0) << warm.cli.out;
  EXPECT_EQ(warm.proofs["lowered_from_cache"].get<int>(),
            warm.proofs["kernels_distinct"].get<int>());
  EXPECT_EQ(warm.proofs["z3_queries"].get<int>(), 0);
  EXPECT_EQ(warm.proofs["proved"], cold.proofs["proved"]);
  EXPECT_EQ(warm.proofs["unknown"], cold.proofs["unknown"]);
  EXPECT_EQ(loss_lines(warm.cli.out), loss_lines(cold.cli.out));
  ASSERT_FALSE(cold.saved.empty());
  EXPECT_EQ(warm.saved, cold.saved);

  // Without the lowered kernels: lowered again, every verdict read from disk.
  fs::remove_all(cache / "lowered-v1");
  warm = run_ops("verdicts");
  ASSERT_EQ(warm.cli.exit_code, 0) << warm.cli.out;
  EXPECT_EQ(warm.proofs["lowered_from_cache"].get<int>(), 0);
  EXPECT_EQ(warm.proofs["z3_queries"].get<int>(), queries);
  EXPECT_EQ(warm.proofs["z3_disk_hits"].get<int>(), queries);
  EXPECT_EQ(warm.proofs["z3_ms"].get<double>(), 0.0);
  EXPECT_EQ(loss_lines(warm.cli.out), loss_lines(cold.cli.out));
  ASSERT_FALSE(cold.saved.empty());
  EXPECT_EQ(warm.saved, cold.saved);

  // One verdict damaged: reported once, asked of Z3 again, rewritten whole.
  std::vector<fs::path> verdicts;
  for (const auto& e : fs::recursive_directory_iterator(cache / "z3-verdict-v1"))
    if (e.is_regular_file()) verdicts.push_back(e.path());
  // The counted queries, plus those asked with the launch's concrete sizes.
  ASSERT_GE(static_cast<int>(verdicts.size()), queries);
  std::sort(verdicts.begin(), verdicts.end());
  const fs::path victim = verdicts[std::random_device{}() % verdicts.size()];
  const std::string good = read_file(victim);
  std::string bad = good;
  bad.back() = static_cast<char>(bad.back() ^ 0x20);
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bad;
  fs::remove_all(cache / "lowered-v1");  // or the kernels would not be lowered, nor Z3 asked
  OpsRun healed = run_ops("healed");
  ASSERT_EQ(healed.cli.exit_code, 0) << healed.cli.out;
  EXPECT_NE(healed.cli.out.find("tilerun: warning: kernel cache entry"), std::string::npos)
      << healed.cli.out;
  EXPECT_GE(healed.proofs["z3_disk_hits"].get<int>(), queries - 1);
  EXPECT_GT(healed.proofs["z3_ms"].get<double>(), 0.0);
  EXPECT_EQ(healed.saved, cold.saved);
  EXPECT_EQ(read_file(victim), good);
  ::unsetenv("TILERUN_CACHE_DIR");
  fs::remove_all(cache);
}

}  // namespace
}  // namespace tilerun::testing
