// The tilerun binary end to end: stdout, stderr and exit codes (0 success, 2 usage or model).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace {

namespace fs = std::filesystem;

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

// Runs the CLI with `args` (already shell-quoted where needed) through /bin/sh; `prefix` is
// shell text run before it in the same shell (a `cd`, a `ulimit`), `launcher` a command that
// runs it (`timeout 60`).
Result run_cli(const std::string& args, const std::string& prefix = "",
               const std::string& launcher = "") {
  std::string err_path = temp_path("stderr");
  std::string command = "{ " + prefix + (prefix.empty() ? "" : "; ") + "exec " + launcher + " '" +
                        tilerun::testing::cli_path() + "' " + args + "; } 2>'" + err_path + "'";
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
  TILERUN_REQUIRE_CLI();
  Result r = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml --validate");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("model: tiny"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  block.1: 5 ops (rmsnorm, matmul x2, silu, add)"), std::string::npos);
  EXPECT_NE(r.out.find("parameters: 1,049,088"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  block.1.y: f32[128,256]"), std::string::npos) << r.out;
}

TEST(CliTest, HelpAndVersion) {
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
  std::string path = write_model("malformed.yaml", "model: [unclosed\n");
  Result r = run_cli("-- '" + path + "'");  // `--` ends the options; the path follows
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind(path + ":", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(": error: malformed YAML"), std::string::npos) << r.err;
  std::remove(path.c_str());
}

TEST(CliTest, RunsTinyWithCheckAndReport) {
  TILERUN_REQUIRE_CLI();
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
  // 1 output, its loss value, gradients of x and 2 x (g, w1, w2).
  EXPECT_EQ(j["check"]["tensors"], 9);
  // The loss, 0.5 * sum(y^2) of the output, with its one term.
  ASSERT_EQ(j["loss"]["terms"].size(), 1u);
  EXPECT_EQ(j["loss"]["terms"][0]["name"], "half_sum_squares");
  EXPECT_GT(j["loss"]["total"].get<double>(), 0);
  EXPECT_EQ(j["loss"]["total"], j["loss"]["terms"][0]["value"]);
  EXPECT_NE(r.out.find("\nloss "), std::string::npos) << r.out;
  EXPECT_LE(j["check"]["worst_error"].get<double>(), 1e-4);
  ASSERT_EQ(j["layers"].size(), 4u);  // 2 layers x (forward, backward)
  int kernels = 0;
  for (const auto& l : j["layers"]) {
    EXPECT_GT(l["host_us"].get<double>(), 0);
    EXPECT_GT(l["device_us"].get<double>(), 0);
    kernels += l["kernels"].get<int>();
    // The critical path is a chain of the layer's kernels: no longer than their sum, and at
    // least its longest kernel.
    EXPECT_GT(l["critical_us"].get<double>(), 0);
    EXPECT_LE(l["critical_us"].get<double>(), l["kernels_us"].get<double>() * (1 + 1e-9));
    EXPECT_TRUE(l["direction"] == "forward" || l["direction"] == "backward");
  }
  EXPECT_EQ(kernels, j["kernels_total"].get<int>());
  // Each kernel of the step with its op, time, bytes and bandwidth floor; tiny's matmuls among
  // them, forward and backward.
  ASSERT_EQ(j["kernels"].size(), static_cast<size_t>(kernels));
  int matmuls = 0;
  for (const auto& k : j["kernels"]) {
    EXPECT_FALSE(k["op"].get<std::string>().empty()) << k;
    EXPECT_GT(k["bytes"].get<int64_t>(), 0) << k;
    EXPECT_DOUBLE_EQ(k["floor_us"].get<double>(),
                     k["bytes"].get<double>() / (j["floor_gbps"].get<double>() * 1e3));
    EXPECT_GE(k["us"].get<double>(), 0) << k;
    matmuls += k["op"] == "matmul";
  }
  EXPECT_GE(matmuls, 4);
  for (const auto& l : j["layers"]) {
    double longest = 0, on_path = 0;
    int critical = 0;
    for (const auto& k : j["kernels"])
      if (k["layer"] == l["name"] && k["direction"] == l["direction"]) {
        longest = std::max(longest, k["us"].get<double>());
        if (k["critical"].get<bool>()) {
          on_path += k["us"].get<double>();
          ++critical;
        }
      }
    EXPECT_GE(l["critical_us"].get<double>(), longest * (1 - 1e-9)) << l;
    // The kernels flagged critical are the path critical_us measures: their times sum to it.
    EXPECT_GE(critical, 1) << l;
    EXPECT_NEAR(on_path, l["critical_us"].get<double>(), 1e-9 * on_path + 1e-12) << l;
  }
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
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
  TILERUN_REQUIRE_CLI();
  std::string trace = temp_path("trace.json");
  Result r = run_cli(TILERUN_SOURCE_DIR "/configs/tiny.yaml --device cpu --trace '" + trace + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(read_file(trace));
  int host = 0, device = 0, kernels = 0, critical = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    int pid = e["pid"];
    (pid == 1 ? host : pid == 2 ? device : kernels) += 1;
    if (pid == 3) critical += e["args"]["critical"].get<bool>();
  }
  EXPECT_EQ(host, 4);  // 2 layers x 2 directions
  EXPECT_EQ(device, 4);
  EXPECT_EQ(kernels, 28);  // every kernel of the step (2 compute the loss)
  // Each layer's critical path: a kernel at least in each of the 4, not every kernel (each
  // backward's weight gradients are off it).
  EXPECT_GE(critical, 4);
  EXPECT_LT(critical, kernels);
  std::remove(trace.c_str());
}

TEST(CliTest, BadOptionValuesExitTwo) {
  TILERUN_REQUIRE_CLI();
  for (const char* args : {"--steps 0", "--steps -3", "--steps x", "--device tpu", "--mode fast",
                           "--seed", "--report"}) {
    Result r = run_cli(std::string(TILERUN_SOURCE_DIR "/configs/tiny.yaml ") + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("error: option"), std::string::npos) << args << ": " << r.err;
  }
}

// A fresh empty folder for one test (removed by the caller).
std::string temp_dir(const std::string& name) {
  std::string dir = temp_path(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

const std::string kTiny = TILERUN_SOURCE_DIR "/configs/tiny.yaml";

TEST(CliTest, AnOptionsMissingValueIsAUsageError) {
  TILERUN_REQUIRE_CLI();
  // The next flag was taken as the value: a file "--check" appeared and the check was skipped.
  std::string dir = temp_dir("missing_value");
  for (const std::string args : {"--device cpu --save --check", "--dump-kernels --validate",
                                 "--report --trace t.json", "--device cpu --save -x.st"}) {
    Result r = run_cli("'" + kTiny + "' " + args, "cd '" + dir + "'");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find("error: option --"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(entries(dir), std::vector<std::string>{}) << args;
  }
  Result r = run_cli("'" + kTiny + "' --save --check", "cd '" + dir + "'");
  EXPECT_NE(r.err.find("option --save expects a value, found the option '--check'"),
            std::string::npos)
      << r.err;
  fs::remove_all(dir);
}

TEST(CliTest, ModeBothOnTheCpuIsAUsageErrorBeforeCompiling) {
  TILERUN_REQUIRE_CLI();
  Result r = run_cli("'" + kTiny + "' --device cpu --mode both");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");  // nothing compiled
  EXPECT_NE(r.err.find("--mode both"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("needs a CUDA device"), std::string::npos) << r.err;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver != nullptr) {
    dlclose(driver);
    return;  // --device auto picks the GPU here
  }
  Result a = run_cli("'" + kTiny + "' --mode both");
  EXPECT_EQ(a.exit_code, 2) << a.err;
  EXPECT_EQ(a.out, "");
  EXPECT_NE(a.err.find("--device auto chose the CPU"), std::string::npos) << a.err;
}

TEST(CliTest, OutputsNeverOverwriteTheModelTheWeightsOrEachOther) {
  TILERUN_REQUIRE_CLI();
  std::string dir = temp_dir("same_path");
  const std::string model = dir + "/m.yaml";
  fs::copy_file(kTiny, model);
  const std::string text = read_file(model);
  fs::create_directory(dir + "/sub");
  fs::create_symlink(model, dir + "/link.yaml");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--save '" + model + "'", "option --save would overwrite the model file"},
      {"--report '" + dir + "/sub/../m.yaml'", "option --report would overwrite the model file"},
      {"--trace '" + dir + "/link.yaml'", "option --trace would overwrite the model file"},
      {"--save '" + dir + "/o' --report '" + dir + "/sub/../o'",
       "options --save and --report name the same file"},
      {"--report '" + dir + "/o' --trace '" + dir + "/./o'",
       "options --report and --trace name the same file"},
      {"--save '" + dir + "/sub'", "names a directory"},
      {"--save '" + dir + "/nowhere/o'", "does not exist"},
  };
  for (const Case& c : cases) {
    Result r = run_cli("'" + model + "' --device cpu " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.args;  // refused before compiling
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
  }
  EXPECT_EQ(read_file(model), text);
  EXPECT_FALSE(fs::exists(dir + "/o"));
  // /dev/null takes any number of outputs.
  Result ok = run_cli("'" + model +
                      "' --device cpu --forward-only --save /dev/null --report "
                      "/dev/null --trace /dev/null");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  fs::remove_all(dir);
}

TEST(CliTest, WeightsMustBeARegularFile) {
  TILERUN_REQUIRE_CLI();
  // A FIFO was opened before the regular-file check, and the open blocked for ever.
  std::string dir = temp_dir("weights_kind");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, what] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "it is a FIFO, not a regular file"},
           {dir, "it is a directory"},
           {dir + "/absent", "No such file or directory"}}) {
    Result r = run_cli("'" + kTiny + "' --device cpu --weights '" + path + "'", "", "timeout 60");
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind(path + ": error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  }
  fs::remove_all(dir);
}

TEST(CliTest, ValidateRefusesOutputsAndWeights) {
  TILERUN_REQUIRE_CLI();
  std::string dir = temp_dir("validate");
  std::string weights = dir + "/w.safetensors";
  tilerun::write_safetensors(weights, {});
  for (const std::string flag : {"--save", "--report", "--trace", "--weights", "--dump-kernels"}) {
    std::string path = flag == "--weights" ? weights : dir + "/out";
    Result r = run_cli("'" + kTiny + "' --validate " + flag + " '" + path + "'");
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("cannot be combined with " + flag), std::string::npos) << r.err;
  }
  EXPECT_EQ(entries(dir), std::vector<std::string>{"w.safetensors"});
  fs::remove_all(dir);
}

TEST(CliTest, AFailedWriteExitsOneAndKeepsTheOldFile) {
  TILERUN_REQUIRE_CLI();
  // A failed --save left a truncated file (destroying a good one); --report to a full device
  // exited 0.
  Result full = run_cli("'" + kTiny + "' --device cpu --forward-only --report /dev/full");
  EXPECT_EQ(full.exit_code, 1) << full.err;
  EXPECT_NE(full.err.find("/dev/full: error: cannot write the file: No space left on device"),
            std::string::npos)
      << full.err;
  Result trace = run_cli("'" + kTiny + "' --device cpu --forward-only --trace /dev/full");
  EXPECT_EQ(trace.exit_code, 1) << trace.err;

  std::string dir = temp_dir("failed_write");
  const std::string saved = dir + "/out.safetensors";
  ASSERT_EQ(run_cli("'" + kTiny + "' --device cpu --seed 3 --save '" + saved + "'").exit_code, 0);
  const std::string good = read_file(saved);
  ASSERT_GT(good.size(), 1000000u);
  // A file-size limit far below the file's size (in 512- or 1024-byte blocks, by shell).
  Result r =
      run_cli("'" + kTiny + "' --device cpu --seed 4 --save '" + saved + "'", "ulimit -f 64");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(saved + ": error: cannot write the file: File too large"), std::string::npos)
      << r.err;
  EXPECT_TRUE(read_file(saved) == good) << "the good file was changed";
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.safetensors"});  // no temporary left
  fs::remove_all(dir);
}

TEST(CliTest, AFailedKernelDumpLeavesNoTornFile) {
  TILERUN_REQUIRE_CLI();
  // Kernel dumps were written with a plain ofstream: a size limit left a truncated file behind.
  std::string dir = temp_dir("failed_dump");
  // 128 blocks (64 KB under sh's 512-byte blocks): the first kernel's small files (a few KB) get
  // through, the matmuls' LLVM IR and pass logs (over 150 KB) do not.
  Result r = run_cli("'" + kTiny + "' --device cpu --forward-only --dump-kernels '" + dir + "'",
                     "ulimit -f 128");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(": error: cannot write the file: File too large"), std::string::npos)
      << r.err;
  // Every file present is complete: no temporary remains, and each was written whole (under the
  // limit), so an unlimited dump into a fresh folder has the same bytes for it.
  std::string clean = temp_dir("clean_dump");
  ASSERT_EQ(run_cli("'" + kTiny + "' --device cpu --forward-only --dump-kernels '" + clean + "'")
                .exit_code,
            0);
  int files = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    EXPECT_TRUE(read_file(e.path().string()) ==
                read_file((fs::path(clean) / fs::relative(e.path(), dir)).string()))
        << e.path() << " is torn";
  }
  EXPECT_GT(files, 0);  // the limit let some small files through: the check above saw them
  fs::remove_all(dir);
  fs::remove_all(clean);
}

TEST(CliTest, AWeightMissingFromTheFileIsAnErrorUnlessAllowed) {
  TILERUN_REQUIRE_CLI();
  // Missing tensors were silently filled by the initialiser.
  std::string dir = temp_dir("missing_weight");
  tilerun::Model model = tilerun::load_model(kTiny);
  tilerun::TensorMap all = tilerun::initialize_tensors(model, 5);
  tilerun::TensorMap partial = all;
  partial.erase("block.1.w2");
  partial.erase("x");
  const std::string full_path = dir + "/all.safetensors", partial_path = dir + "/part.safetensors";
  tilerun::write_safetensors(full_path, all);
  tilerun::write_safetensors(partial_path, partial);
  const std::string run = "'" + kTiny + "' --device cpu --forward-only ";

  Result missing = run_cli(run + "--weights '" + partial_path + "'");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_EQ(missing.out, "");  // refused before compiling
  EXPECT_NE(missing.err.find("lacks inputs or weights of model 'tiny': 'x', 'block.1.w2'"),
            std::string::npos)
      << missing.err;

  // Allowed, the missing ones come from the initialiser: with the file's seed, the same bits as
  // a run without the file.
  const std::string a = dir + "/a.safetensors", b = dir + "/b.safetensors",
                    c = dir + "/c.safetensors";
  Result allowed =
      run_cli(run + "--seed 5 --allow-missing --weights '" + partial_path + "' --save '" + a + "'");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_EQ(run_cli(run + "--weights '" + full_path + "' --save '" + b + "'").exit_code, 0);
  EXPECT_EQ(run_cli(run + "--seed 5 --save '" + c + "'").exit_code, 0);
  EXPECT_EQ(read_file(a), read_file(c));
  EXPECT_EQ(read_file(b), read_file(c));                     // the file's values, not seed 0's
  EXPECT_EQ(run_cli(run + "--allow-missing").exit_code, 2);  // without --weights
  fs::remove_all(dir);
}

TEST(CliTest, NonFiniteResultsWarnAndFailTheCheck) {
  TILERUN_REQUIRE_CLI();
  // f32 overflows to inf: a warning names the tensor (exit 0), and --check fails on it.
  std::string path = write_model("inf.yaml",
                                 "model: inf\n"
                                 "dims: {N: 8}\n"
                                 "inputs:\n"
                                 "  x: {shape: [N], init: {constant: 1.0e30}}\n"
                                 "layers:\n"
                                 "  - name: l\n"
                                 "    ops:\n"
                                 "      - {op: scale, in: x, out: y, alpha: 1.0e10}\n"
                                 "outputs: [l.y]\n");
  Result r = run_cli("'" + path + "' --device cpu --forward-only");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tilerun: warning: l.y holds NaN or Inf"), std::string::npos) << r.err;
  Result c = run_cli("'" + path + "' --device cpu --forward-only --check");
  EXPECT_EQ(c.exit_code, 1) << c.err;
  EXPECT_NE(c.out.find("check: FAILED, l.y holds NaN or Inf"), std::string::npos) << c.out;
  Result fine = run_cli("'" + kTiny + "' --device cpu --forward-only");
  EXPECT_EQ(fine.err.find("warning"), std::string::npos) << fine.err;
  std::remove(path.c_str());
}

TEST(CliTest, ControlCharactersInMessagesAreEscaped) {
  TILERUN_REQUIRE_CLI();
  // ESC sequences reached the terminal raw; a NUL cut the message short.
  Result path = run_cli("\"$(printf 'bad\033[31m\a.yaml')\"");
  EXPECT_EQ(path.exit_code, 2);
  EXPECT_EQ(path.err.find('\x1b'), std::string::npos) << path.err;
  EXPECT_EQ(path.err.find('\a'), std::string::npos) << path.err;
  EXPECT_NE(path.err.find("bad\\x1b[31m\\x07.yaml: error: cannot open"), std::string::npos)
      << path.err;
  Result option = run_cli("'" + kTiny + "' --device \"$(printf 'x\033]0;t\007')\"");
  EXPECT_EQ(option.exit_code, 2);
  EXPECT_NE(option.err.find("found 'x\\x1b]0;t\\x07'"), std::string::npos) << option.err;

  // YAML's "\0" and "\e" escapes put a NUL and an ESC into the model's name.
  std::string model = write_model("nul.yaml", "model: \"a\\0b\\ec\"\ndims: {N: 2}\n");
  Result nul = run_cli("'" + model + "' --validate");
  EXPECT_EQ(nul.exit_code, 2);
  EXPECT_NE(nul.err.find(":1:8: error: 'a\\x00b\\x1bc' is not a valid name for 'model'"),
            std::string::npos)
      << nul.err;
  std::remove(model.c_str());
}

}  // namespace
