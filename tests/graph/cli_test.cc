// The tilerun binary end to end: stdout, stderr and exit codes (0 success, 2 usage or model).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tilerun_cli_test_" + std::to_string(::getpid()) + "_" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the CLI with `args` (already shell-quoted where needed) through /bin/sh.
Result run_cli(const std::string& args) {
  std::string err_path = temp_path("stderr");
  std::string command = std::string("'") + TILERUN_CLI + "' " + args + " 2>'" + err_path + "'";
  Result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return r;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file(err_path);
  std::remove(err_path.c_str());
  return r;
}

std::string write_model(const std::string& name, const std::string& text) {
  std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(CliTest, ValidModelPrintsSummary) {
  Result r = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("model: tiny"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  block.1: 5 ops (rmsnorm, matmul x2, silu, add)"), std::string::npos);
  EXPECT_NE(r.out.find("parameters: 1,049,088"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  block.1.y: f32[128,256]"), std::string::npos) << r.out;
}

TEST(CliTest, HelpAndVersion) {
  for (const char* flag : {"--help", "-h"}) {
    Result r = run_cli(flag);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out.rfind("usage: tilerun MODEL.yaml", 0), 0u) << r.out;
    EXPECT_EQ(r.err, "");
  }
  Result r = run_cli("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("tilerun ", 0), 0u) << r.out;
  EXPECT_EQ(r.out.back(), '\n');
}

TEST(CliTest, UsageErrorsExitTwo) {
  Result unknown = run_cli("--frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.out, "");
  EXPECT_NE(unknown.err.find("error: unknown option '--frobnicate'"), std::string::npos)
      << unknown.err;

  Result none = run_cli("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("error: no model given"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("usage:"), std::string::npos) << none.err;

  Result two = run_cli("a.yaml b.yaml");
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.err.find("more than one model given"), std::string::npos) << two.err;
}

TEST(CliTest, MissingFileExitsTwo) {
  Result r = run_cli("/nonexistent/model.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "/nonexistent/model.yaml: error: cannot open the model file: No such file or "
            "directory\n");
  Result dir = run_cli("'" + ::testing::TempDir() + "'");
  EXPECT_EQ(dir.exit_code, 2);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
}

TEST(CliTest, BadModelPrintsTheErrorLine) {
  std::string path = write_model("bad.yaml",
                                 "model: bad\n"
                                 "dims: {T: 4}\n"
                                 "inputs:\n"
                                 "  x: {shape: [T, D]}\n");
  Result r = run_cli("'" + path + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, path + ":4:18: error: unknown dim 'D' in the shape of 'x' (declared dims: T)\n");
  std::remove(path.c_str());
}

TEST(CliTest, MalformedYamlExitsTwo) {
  std::string path = write_model("malformed.yaml", "model: [unclosed\n");
  Result r = run_cli("-- '" + path + "'");  // `--` ends the options; the path follows
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind(path + ":", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(": error: malformed YAML"), std::string::npos) << r.err;
  std::remove(path.c_str());
}

}  // namespace
