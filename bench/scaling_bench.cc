// Time against size for the parts of model loading that must stay O(n log n): building the op
// graph, expanding it into kernels with the memory plan and the hazard edges, and reading a
// .safetensors file of many tensors. Prints one table row per size; a quadratic step shows as
// time growing 4x per doubling. Runs on the CPU, compiles no kernel.
//
//   tilerun_scaling_bench [--quick]     (--quick: the smaller sizes only, for the smoke test)
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "tilerun/tilerun.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `repeat` repetitions of a block of `ops` ops cycling through five op kinds, carried.
std::string block_model(int repeat, int ops) {
  static const char* kOps[] = {"{op: rmsnorm, in: [x, g], out: t%d}",
                               "{op: scale, in: t%p, out: t%d, alpha: 0.5}",
                               "{op: mul, in: [t%p, x], out: t%d}", "{op: silu, in: t%p, out: t%d}",
                               "{op: add, in: [t%p, x], out: t%d}"};
  std::string text =
      "model: scaling\ndims: {T: 4, D: 8}\ninputs:\n  x: {shape: [T, D]}\nlayers:\n"
      "  - name: b\n    repeat: " +
      std::to_string(repeat) +
      "\n    carry: {x: y}\n    weights:\n      g: {shape: [D]}\n    ops:\n";
  for (int i = 0; i < ops; ++i) {
    std::string op = kOps[i % 5];
    auto put = [&](const std::string& key, const std::string& value) {
      size_t at = op.find(key);
      if (at != std::string::npos) op.replace(at, key.size(), value);
    };
    put("t%p", "t" + std::to_string(i - 1));
    put("t%d", i + 1 == ops ? "y" : "t" + std::to_string(i));
    text += "      - " + op + "\n";
  }
  return text + "outputs: [b.y]\n";
}

void graph_row(int repeat, int ops, bool backward) {
  auto start = Clock::now();
  tilerun::Model model = tilerun::parse_model(block_model(repeat, ops), "scaling.yaml");
  double parse_s = seconds_since(start);
  auto t1 = Clock::now();
  tilerun::graph::OpGraph g = tilerun::graph::build_forward(model);
  if (backward) tilerun::graph::append_backward(model, g);
  double build_s = seconds_since(t1);
  auto t2 = Clock::now();
  tilerun::graph::KernelGraph kg = tilerun::graph::expand(std::move(g));
  double expand_s = seconds_since(t2);
  std::printf(
      "| graph %-9s | %5d x %2d ops | %7zu kernels | parse %.3f s | build %.3f s | "
      "expand+plan+edges %.3f s | total %.3f s |\n",
      backward ? "fwd+bwd" : "forward", repeat, ops, kg.nodes.size(), parse_s, build_s, expand_s,
      seconds_since(start));
}

void safetensors_row(int count, const std::string& dir) {
  tilerun::TensorMap tensors;
  for (int i = 0; i < count; ++i)
    tensors["w" + std::to_string(i)] = {
        .dtype = tilerun::DType::F32, .shape = {4}, .data = std::vector<uint8_t>(16, 1)};
  std::string path = dir + "/w" + std::to_string(count) + ".safetensors";
  auto start = Clock::now();
  tilerun::write_safetensors(path, tensors);
  double write_s = seconds_since(start);
  auto t1 = Clock::now();
  tilerun::TensorMap back = tilerun::read_safetensors(path);
  double read_s = seconds_since(t1);
  std::filesystem::remove(path);
  std::printf("| safetensors       | %7d tensors           | write %.3f s | read %.3f s |\n",
              static_cast<int>(back.size()), write_s, read_s);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::vector<int> repeats =
      quick ? std::vector<int>{250, 500} : std::vector<int>{1000, 2000, 4000, 10000};
  for (int r : repeats) graph_row(r, 5, false);
  for (int r : repeats) graph_row(r, 5, true);
  // 60 layers of ~250 kernels (forward and backward), the size a large model reaches.
  graph_row(quick ? 6 : 60, 85, true);
  std::string dir = std::filesystem::temp_directory_path().string() + "/tilerun_scaling_" +
                    std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (int n : quick ? std::vector<int>{1000, 2000} : std::vector<int>{10000, 20000, 40000, 100000})
    safetensors_row(n, dir);
  std::filesystem::remove_all(dir);
  return 0;
}
