// Helpers of the tests that run the `tilerun` command line (TILERUN_CLI) as a child process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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

// Runs `tilerun ARGS` (ARGS quoted by the caller where needed).
inline CliResult run_cli(const std::string& args) {
  std::string command = "'" + std::string(TILERUN_CLI) + "' " + args + " 2>&1";
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
