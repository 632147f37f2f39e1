// The V4 layers' kernel budgets (issues 16-18) at the H200's sizes: the configs expanded into
// kernel graphs (nothing compiled or run) and their kernels counted per layer and direction. A
// fusion that comes apart, or a gradient rule that grows, shows here before any device run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "compiler/ir/kernel.h"
#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "tilerun/tilerun.h"

namespace tilerun::graph {
namespace {

struct Count {
  int forward = 0, backward = 0;
  int splitk_sums = 0;  // the partial sums of split-K GEMMs (a choice of T: long K, few tiles)
  int total() const { return forward + backward; }
};

// Layer `layer` of configs/`config` at T tokens (C = T / 4 compressed entries and KI = 128
// picks where the config has them, as the H200 runs it).
Count kernels_of(const std::string& config, const std::string& layer, int64_t t) {
  const std::string path = std::string(TILERUN_SOURCE_DIR) + "/configs/" + config;
  ModelOptions options;
  options.dims = {{"T", t}};
  for (const auto& [name, value] : load_model(path).dims) {
    if (name == "C") options.dims.push_back({"C", t / 4});
    if (name == "KI") options.dims.push_back({"KI", 128});
  }
  Model model = load_model(path, options);
  OpGraph ops = build_forward(model);
  append_backward(model, ops);
  const KernelGraph kg = expand(std::move(ops));
  int index = -1;
  for (size_t l = 0; l < model.layers.size(); ++l)
    if (model.layers[l].name == layer) index = static_cast<int>(l);
  EXPECT_GE(index, 0) << config << " has no layer " << layer;
  Count c;
  // TILERUN_BUDGET_LIST=1 lists the layer's kernels: direction, the op each comes from (with its
  // YAML line) and the kernel's name.
  const bool list = std::getenv("TILERUN_BUDGET_LIST") != nullptr;
  for (const KernelNode& node : kg.nodes) {
    if (node.layer != index) continue;
    if (list) {
      const GraphOp& op = kg.ops.ops[node.op];
      std::printf("  %s %-22s line %-4d %s\n", node.direction == Direction::Forward ? "fwd" : "bwd",
                  op.type.c_str(), op.loc.line, kg.kernels[node.kernel]->sig.name.c_str());
    }
    (node.direction == Direction::Forward ? c.forward : c.backward) += 1;
    c.splitk_sums += kg.kernels[node.kernel]->sig.name.find("splitk_sum") != std::string::npos;
  }
  std::printf(
      "[ budget   ] %s %s T=%lld: %d forward + %d backward = %d kernels (%d split-K sums)\n",
      config.c_str(), layer.c_str(), static_cast<long long>(t), c.forward, c.backward, c.total(),
      c.splitk_sums);
  return c;
}

// Issue 18: about 200 kernels a layer forward + backward, at most 250 (held at today's 217). At
// T = 4096 the GEMMs whose K is the tokens split K for parallelism, each split adding a sum
// kernel: held at today's count there until a split-K GEMM sums its own partials.
TEST(KernelBudget, V4MiniLayer) {
  EXPECT_LE(kernels_of("v4-mini.yaml", "block.0", 1024).total(), 217);
  EXPECT_LE(kernels_of("v4-mini.yaml", "block.0", 4096).total(), 226);
}

// Issues 16 and 17: the attention half within 110 kernels (not yet: held at today's count, so
// that it only falls), the MoE half within 90, each with its layer's loss kernels.
TEST(KernelBudget, V4Halves) {
  for (int64_t t : {1024, 4096}) {
    EXPECT_LE(kernels_of("v4-attn.yaml", "attn.0", t).total(), 130) << "T = " << t;
    EXPECT_LE(kernels_of("v4-moe.yaml", "moe.0", t).total(), 90) << "T = " << t;
  }
}

}  // namespace
}  // namespace tilerun::graph
