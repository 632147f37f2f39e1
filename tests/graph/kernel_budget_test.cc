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
// picks where the config has them, as the H200 runs it). `halves`, if given, gets the counts
// of the attention half (the ops through the layer's first hc_post) and of the MoE half.
Count kernels_of(const std::string& config, const std::string& layer, int64_t t,
                 Count (*halves)[2] = nullptr) {
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
  int split_line = 0;  // the attention half's hc_post
  for (const GraphOp& op : kg.ops.ops)
    if (op.type == "hc_post" && (split_line == 0 || op.loc.line < split_line))
      split_line = op.loc.line;
  Count c;
  if (halves) (*halves)[0] = (*halves)[1] = Count{};
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
    const bool fwd = node.direction == Direction::Forward;
    const bool sum = kg.kernels[node.kernel]->sig.name.find("splitk_sum") != std::string::npos;
    for (Count* k : {&c, halves ? &(*halves)[kg.ops.ops[node.op].loc.line > split_line] : nullptr})
      if (k) {
        (fwd ? k->forward : k->backward) += 1;
        k->splitk_sums += sum;
      }
  }
  std::printf(
      "[ budget   ] %s %s T=%lld: %d forward + %d backward = %d kernels (%d split-K sums)\n",
      config.c_str(), layer.c_str(), static_cast<long long>(t), c.forward, c.backward, c.total(),
      c.splitk_sums);
  if (halves)
    for (int h : {0, 1})
      std::printf("[ budget   ]   the %s half: %d forward + %d backward = %d kernels\n",
                  h ? "MoE" : "attention", (*halves)[h].forward, (*halves)[h].backward,
                  (*halves)[h].total());
  return c;
}

// Issue 18: about 200 kernels a layer forward + backward, at most 250 (held at today's 157). At
// T = 4096 the GEMMs whose K is the tokens split K for parallelism, each split adding a sum
// kernel: held at today's count there until a split-K GEMM sums its own partials.
// Issues 16 and 17, counted in this layer as the H200 runs it (bf16, tensor cores): the
// attention half within 110 kernels at both T (held at today's 100 / 106: at 4096 its
// transposed GEMMs over the tokens split K, each adding a sum kernel), the MoE half within 90
// (held at today's 57 / 60).
// A layer's loss term (the indexer's KL) runs with the model's loss ops, not in these counts.
TEST(KernelBudget, V4MiniLayer) {
  struct Bound {
    int64_t t;
    int layer, attention, moe;
  };
  for (const Bound& b : {Bound{1024, 157, 100, 57}, Bound{4096, 166, 106, 60}}) {
    Count halves[2];
    EXPECT_LE(kernels_of("v4-mini.yaml", "block.0", b.t, &halves).total(), b.layer);
    EXPECT_LE(halves[0].total(), b.attention) << "T = " << b.t;
    EXPECT_LE(halves[1].total(), b.moe) << "T = " << b.t;
  }
}

// The halves' own configs (f32, for the CPU checks; their layers add the loss): SIMT kernels,
// and the grouped projection's layout copies the tensor-core kernel reads around.
TEST(KernelBudget, V4Halves) {
  for (int64_t t : {1024, 4096}) {
    EXPECT_LE(kernels_of("v4-attn.yaml", "attn.0", t).total(), 112) << "T = " << t;
    EXPECT_LE(kernels_of("v4-moe.yaml", "moe.0", t).total(), 61) << "T = " << t;
  }
}

}  // namespace
}  // namespace tilerun::graph
