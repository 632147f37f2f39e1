// Helpers of the tests that run the `tilerun` command line as a child process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tilerun::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// A path in the test's temp dir, unique to this process.
inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tilerun_cli_" + std::to_string(::getpid()) + "_" + name;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The `tilerun` binary, found as GPU tests find configs/ through TILERUN_SOURCE_DIR, so a test
// binary staged on another machine (../shared/device/stage.sh copies binaries into one bin/)
// runs the staged CLI rather than a build-tree path that is not there: $TILERUN_BIN when set,
// else `tilerun` beside the test binary, else the one this test was built with (TILERUN_CLI).
// "" when the chosen one does not exist: callers skip with where_cli_was_looked_for().
inline std::string cli_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv("TILERUN_BIN"); env != nullptr && *env != 0)
    return fs::is_regular_file(env, ec) ? env : "";
  const fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "tilerun";
  if (!ec && fs::is_regular_file(beside, ec)) return beside.string();
  return fs::is_regular_file(TILERUN_CLI, ec) ? TILERUN_CLI : "";
}

// The reason a test gives when cli_path() is "".
inline std::string where_cli_was_looked_for() {
  const char* env = std::getenv("TILERUN_BIN");
  if (env != nullptr && *env != 0) return std::string("no tilerun binary at $TILERUN_BIN=") + env;
  return "no tilerun binary beside this test nor at " + std::string(TILERUN_CLI) +
         " (set TILERUN_BIN to run the command-line tests)";
}

// First statement of every test that runs the CLI: without a binary (a GPU bundle staged
// without it, $TILERUN_BIN naming nothing) the test skips saying where it looked, instead of
// failing on the shell's exit 127.
#define TILERUN_REQUIRE_CLI()                 \
  if (::tilerun::testing::cli_path().empty()) \
  GTEST_SKIP() << ::tilerun::testing::where_cli_was_looked_for()

// Runs `tilerun ARGS` (ARGS quoted by the caller where needed).
inline CliResult run_cli(const std::string& args) {
  std::string command = "'" + cli_path() + "' " + args + " 2>&1";
  CliResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The "step N: loss X" lines of --print-loss, in order.
inline std::vector<std::string> loss_lines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("step ", 0) == 0) lines.push_back(line);
  return lines;
}

inline double loss_of(const std::string& line) {
  return std::stod(line.substr(line.find("loss ") + 5));
}

}  // namespace tilerun::testing
