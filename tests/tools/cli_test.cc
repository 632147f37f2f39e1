// The tilerun binary end to end: stdout, stderr and exit codes (0 success, 2 usage or model).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
  Result r = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml --validate");
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

TEST(CliTest, RunsTinyWithCheckAndReport) {
  std::string report = temp_path("report.json");
  Result r = run_cli(TILERUN_SOURCE_DIR
                     "/configs/tiny.yaml --device cpu --check --steps 2 "
                     "--report '" +
                     report + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("check: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("block.0          forward"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(read_file(report));
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["check"]["ok"], true);
  EXPECT_EQ(j["check"]["tensors"], 8);  // 1 output + gradients of x and 2 x (g, w1, w2)
  EXPECT_LE(j["check"]["worst_error"].get<double>(), 1e-4);
  ASSERT_EQ(j["layers"].size(), 4u);  // 2 layers x (forward, backward)
  int kernels = 0;
  for (const auto& l : j["layers"]) {
    EXPECT_GT(l["host_us"].get<double>(), 0);
    EXPECT_GT(l["device_us"].get<double>(), 0);
    kernels += l["kernels"].get<int>();
    EXPECT_TRUE(l["direction"] == "forward" || l["direction"] == "backward");
  }
  EXPECT_EQ(kernels, j["kernels_total"].get<int>());
  EXPECT_LE(j["arena_bytes"].get<int64_t>(), j["tensor_bytes"].get<int64_t>());
  // Every distinct kernel's accesses went through the prover; no race anywhere.
  EXPECT_GT(j["proofs"]["proved"].get<int>(), 0);
  EXPECT_EQ(j["proofs"]["disproved"].get<int>(), 0);
  EXPECT_GE(j["proofs"]["unknown"].get<int>(), 0);
  EXPECT_GE(j["proofs"]["z3_queries"].get<int>(), 0);
  EXPECT_GT(j["proofs"]["compile_ms"].get<double>(), 0);
  std::remove(report.c_str());
}

TEST(CliTest, TwoProcessesGiveBitIdenticalResults) {
  std::string a = temp_path("a.safetensors"), b = temp_path("b.safetensors"),
              c = temp_path("c.safetensors");
  const std::string model = TILERUN_SOURCE_DIR "/configs/tiny.yaml --device cpu ";
  ASSERT_EQ(run_cli(model + "--seed 11 --save '" + a + "'").exit_code, 0);
  ASSERT_EQ(run_cli(model + "--seed 11 --save '" + b + "'").exit_code, 0);
  ASSERT_EQ(run_cli(model + "--seed 12 --save '" + c + "'").exit_code, 0);
  std::string fa = read_file(a), fb = read_file(b), fc = read_file(c);
  EXPECT_GT(fa.size(), 4u * 128 * 256);  // the output and every gradient
  EXPECT_EQ(fa, fb);
  EXPECT_NE(fa, fc);
  for (const std::string& p : {a, b, c}) std::remove(p.c_str());
}

TEST(CliTest, WeightsFileRoundTrip) {
  // Saved gradients are not weights: loading them must be refused by name.
  std::string saved = temp_path("saved.safetensors");
  const std::string model = TILERUN_SOURCE_DIR "/configs/tiny.yaml --device cpu ";
  ASSERT_EQ(run_cli(model + "--save '" + saved + "'").exit_code, 0);
  Result r = run_cli(model + "--weights '" + saved + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("grad."), std::string::npos) << r.err;
  std::remove(saved.c_str());
}

TEST(CliTest, CheckMismatchExitsOne) {
  // f32 overflows to inf where the double reference stays finite: --check must catch it.
  std::string path = write_model("overflow.yaml",
                                 "model: overflow\n"
                                 "dims: {N: 8}\n"
                                 "inputs:\n"
                                 "  x: {shape: [N], init: {constant: 1.0e30}}\n"
                                 "layers:\n"
                                 "  - name: l\n"
                                 "    ops:\n"
                                 "      - {op: scale, in: x, out: y, alpha: 1.0e10}\n"
                                 "outputs: [l.y]\n");
  Result r = run_cli("'" + path + "' --device cpu --check");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("check: MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worst l.y"), std::string::npos) << r.out;
  std::remove(path.c_str());
}

TEST(CliTest, DumpKernelsWritesEveryKernel) {
  std::string dir = temp_path("dump");
  Result r = run_cli(TILERUN_SOURCE_DIR
                     "/configs/tiny.yaml --device cpu --forward-only "
                     "--dump-kernels '" +
                     dir + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  FILE* p = ::popen(("ls -R '" + dir + "' | grep -c '\\.simt.txt$'").c_str(), "r");
  char buf[64] = {};
  ASSERT_NE(p, nullptr);
  std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  EXPECT_GE(std::atoi(buf), 4) << buf;  // rmsnorm, two matmul shapes, silu, add
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(CliTest, TwoProcessesDumpByteIdenticalKernels) {
  // Every op family, forward and backward: Tile IR, SIMT IR, LLVM IR, CUDA C++, proofs and
  // layouts, from two separate compilations, must match byte for byte.
  // The summed Z3 query count is the same too: each distinct question runs once per process,
  // whichever compile thread asks it first.
  std::string a = temp_path("dump_a"), b = temp_path("dump_b");
  std::vector<int> queries;
  for (const std::string& dir : {a, b}) {
    std::string report = dir + ".json";
    Result r =
        run_cli(TILERUN_SOURCE_DIR "/configs/ops.yaml --device cpu --steps 1 --dump-kernels '" +
                dir + "' --report '" + report + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    queries.push_back(nlohmann::json::parse(read_file(report))["proofs"]["z3_queries"].get<int>());
    std::remove(report.c_str());
  }
  EXPECT_EQ(queries[0], queries[1]);
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(a))
    if (e.is_regular_file()) files.push_back(fs::relative(e.path(), a).string());
  std::sort(files.begin(), files.end());
  size_t count_b = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(b))
    count_b += e.is_regular_file();
  EXPECT_GE(files.size(), 5u * 10);  // ten kernels or more, five files each
  EXPECT_EQ(files.size(), count_b);
  for (const std::string& f : files) {
    std::string x = read_file(a + "/" + f), y = read_file(b + "/" + f);
    EXPECT_FALSE(x.empty()) << f;
    EXPECT_TRUE(x == y) << f << " differs between the two processes";
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(CliTest, CudaWithoutADeviceIsAClearRuntimeError) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver != nullptr) {
    dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is present; the GPU tests cover this machine";
  }
  Result r = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml --device cuda");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("error: no CUDA device"), std::string::npos) << r.err;
  // auto falls back to the CPU backend.
  Result a = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml --forward-only");
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("on cpu"), std::string::npos) << a.out;
}

TEST(CliTest, TraceHasHostDeviceAndKernelSpans) {
  std::string trace = temp_path("trace.json");
  Result r = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml --device cpu --trace '" + trace + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(read_file(trace));
  int host = 0, device = 0, kernels = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    int pid = e["pid"];
    (pid == 1 ? host : pid == 2 ? device : kernels) += 1;
  }
  EXPECT_EQ(host, 4);  // 2 layers x 2 directions
  EXPECT_EQ(device, 4);
  EXPECT_EQ(kernels, 26);  // every kernel of the step
  std::remove(trace.c_str());
}

TEST(CliTest, BadOptionValuesExitTwo) {
  for (const char* args : {"--steps 0", "--steps -3", "--steps x", "--device tpu", "--mode fast",
                           "--seed", "--report"}) {
    Result r = run_cli(std::string(TILERUN_SOURCE_DIR "/configs/tiny.yaml ") + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("error: option"), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
