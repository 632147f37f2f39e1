// The on-disk compile caches through the command line: a second run of a model reads every Z3
// verdict and every CPU object from $TILERUN_CACHE_DIR (no solver time) and writes the same
// kernel dumps (proof texts with their step counts included) and the same loss; a damaged
// verdict entry is reported, asked again and rewritten.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace tilerun::testing {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> files_under(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path());
  return out;
}

struct OpsRun {
  CliResult cli;
  nlohmann::json proofs;
  std::map<std::string, std::string> dumps;
};

OpsRun run_ops(const std::string& tag) {
  const std::string dumps = temp_path("cache_dump_" + tag), report = dumps + ".json";
  OpsRun r;
  r.cli = run_cli(std::string(TILERUN_SOURCE_DIR) + "/configs/ops.yaml --device cpu --steps 1 " +
                  "--print-loss --dump-kernels '" + dumps + "' --report '" + report + "'");
  if (r.cli.exit_code == 0) {
    r.proofs = nlohmann::json::parse(read_file(report))["proofs"];
    r.dumps = files_under(dumps);
  }
  fs::remove_all(dumps);
  fs::remove(report);
  return r;
}

TEST(CompileCache, AWarmRunAsksZ3NothingAndCompilesTheSameKernels) {
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
  EXPECT_EQ(warm.proofs["z3_queries"].get<int>(), queries);
  EXPECT_EQ(warm.proofs["z3_disk_hits"].get<int>(), queries);
  EXPECT_EQ(warm.proofs["z3_ms"].get<double>(), 0.0);
  EXPECT_EQ(loss_lines(warm.cli.out), loss_lines(cold.cli.out));
  ASSERT_FALSE(cold.dumps.empty());
  EXPECT_EQ(warm.dumps, cold.dumps);

  // One verdict damaged: reported once, asked of Z3 again, rewritten whole.
  std::vector<fs::path> verdicts;
  for (const auto& e : fs::recursive_directory_iterator(cache / "z3-verdict-v1"))
    if (e.is_regular_file()) verdicts.push_back(e.path());
  ASSERT_EQ(static_cast<int>(verdicts.size()), queries);
  std::sort(verdicts.begin(), verdicts.end());
  const fs::path victim = verdicts[std::random_device{}() % verdicts.size()];
  const std::string good = read_file(victim);
  std::string bad = good;
  bad.back() = static_cast<char>(bad.back() ^ 0x20);
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bad;
  OpsRun healed = run_ops("healed");
  ASSERT_EQ(healed.cli.exit_code, 0) << healed.cli.out;
  EXPECT_NE(healed.cli.out.find("tilerun: warning: kernel cache entry"), std::string::npos)
      << healed.cli.out;
  EXPECT_EQ(healed.proofs["z3_disk_hits"].get<int>(), queries - 1);
  EXPECT_EQ(healed.dumps, cold.dumps);
  EXPECT_EQ(read_file(victim), good);
  ::unsetenv("TILERUN_CACHE_DIR");
  fs::remove_all(cache);
}

}  // namespace
}  // namespace tilerun::testing
