// weight_only_nodes, chain_nodes and urgency (graph/runtime/graph_topology.h), which set the
// stream priorities of a layer's CUDA graph: the weight-only nodes must be the ones no input
// reaches, the chain the nodes another layer waits on. Checked against dataflows computed here from
// the op graph alone (which tensor an op produces from which, which layer reads it), independently
// of the node-by-node walks over the kernels' signatures that the functions do, on every shipped
// config.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/kernel.h"
#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "graph/optimizer.h"
#include "graph/runtime/graph_topology.h"
#include "tilerun/tilerun.h"

namespace tilerun::graph {
namespace {

// Every config the repository ships, in name order.
std::vector<std::filesystem::path> shipped_configs() {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(TILERUN_SOURCE_DIR "/configs"))
    if (e.path().extension() == ".yaml") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

KernelGraph training_graph(const Model& model) {
  OpGraph ops = build_forward(model);
  append_backward(model, ops);
  append_update(model, ops);
  return expand(std::move(ops));
}

// Per tensor, from the ops: `derived` when it is a weight or every input of the op producing it
// is derived (an op without inputs, a table's iota, too); `reached` when it is an input or a
// gradient nothing writes, or some input of its producing op is reached. Ops are in order, so
// one pass over them settles every tensor.
struct Dataflow {
  std::vector<bool> derived, reached;
};

Dataflow dataflow(const KernelGraph& kg) {
  const std::vector<GraphTensor>& ts = kg.ops.tensors;
  const size_t ops = kg.ops.ops.size();
  std::vector<bool> op_derived(ops, true), op_reached(ops, false);
  auto derived = [&](int t) {
    return ts[t].producer >= 0 ? static_cast<bool>(op_derived[ts[t].producer])
                               : ts[t].kind == TensorKind::Weight;
  };
  auto reached = [&](int t) {
    return ts[t].producer >= 0 ? static_cast<bool>(op_reached[ts[t].producer])
                               : ts[t].kind != TensorKind::Weight;
  };
  for (size_t o = 0; o < ops; ++o)
    for (int t : kg.ops.ops[o].inputs) {
      EXPECT_LT(ts[t].producer, static_cast<int>(o)) << ts[t].name;  // produced before it is read
      op_derived[o] = op_derived[o] && derived(t);
      op_reached[o] = op_reached[o] || reached(t);
    }
  Dataflow f;
  for (size_t t = 0; t < ts.size(); ++t) {
    f.derived.push_back(derived(static_cast<int>(t)));
    f.reached.push_back(reached(static_cast<int>(t)));
  }
  return f;
}

TEST(WeightOnlyNodes, NoInputReachesThemAndEveryNodeOfWeightsAloneIsOne) {
  int configs = 0, with_some = 0;
  for (const std::filesystem::path& p : shipped_configs()) {
    SCOPED_TRACE(p.filename().string());
    const KernelGraph kg = training_graph(load_model(p.string()));
    const std::vector<bool> only = weight_only_nodes(kg);
    ASSERT_EQ(only.size(), kg.nodes.size());
    const Dataflow f = dataflow(kg);
    int count = 0;
    for (size_t n = 0; n < kg.nodes.size(); ++n) {
      const KernelNode& node = kg.nodes[n];
      const compiler::KernelSignature& sig = kg.kernels[node.kernel]->sig;
      bool all_derived = true;
      std::string reached;
      for (size_t b = 0; b < node.buffers.size(); ++b) {
        if (sig.buffers[b].is_output) continue;
        const int t = node.buffers[b];
        all_derived = all_derived && f.derived[t];
        // The op's own scratch: what an earlier kernel of the op wrote, which the walk follows
        // kernel by kernel and the op graph cannot see.
        if (f.reached[t] && kg.ops.tensors[t].producer != node.op) reached = kg.ops.tensors[t].name;
      }
      const std::string what =
          "node " + std::to_string(n) + " (" + sig.name + ", op " + kg.ops.ops[node.op].type + ")";
      if (only[n]) EXPECT_EQ(reached, "") << what << " reads " << reached;
      if (all_derived) EXPECT_TRUE(only[n]) << what << " reads weights alone";
      count += only[n];
    }
    with_some += count > 0;
    ++configs;
  }
  EXPECT_GE(configs, 10);
  EXPECT_GE(with_some, 2);  // the tables, and the fake_quants of weights
}

// In a routed MLP of FP4-trained experts (V4's MoE), the expert weights' fake_quants are the
// forward's weight-only nodes, and nothing that reads the residual stream is.
TEST(WeightOnlyNodes, TheExpertWeightsFakeQuantsAreWeightOnly) {
  Model model = load_model(TILERUN_SOURCE_DIR "/configs/fp4_experts.yaml");
  const KernelGraph kg = expand(build_forward(model));
  const std::vector<bool> only = weight_only_nodes(kg);
  std::set<std::string> weight_only_ops, other_ops;
  for (size_t n = 0; n < kg.nodes.size(); ++n)
    (only[n] ? weight_only_ops : other_ops).insert(kg.ops.ops[kg.nodes[n].op].type);
  // index_established: the router's ids are in range by construction, a constant status that
  // reads nothing.
  EXPECT_EQ(weight_only_ops, (std::set<std::string>{"fake_quant", "index_established"}));
  for (const char* op : {"rmsnorm", "matmul", "counting_sort", "grouped_matmul", "swiglu", "add"})
    EXPECT_TRUE(other_ops.count(op)) << op;
}

// chain_nodes on every shipped config, against the op graph: a node that writes a tensor an op
// of another layer of the same direction reads is marked, the marks are closed under the
// layer's dependency edges (a marked node's dependencies in its layer are marked), and each
// marked node is needed: it writes a tensor another layer of its direction reads, a model output,
// a loss value or an input's gradient, or a marked node of its layer depends on it.
TEST(ChainNodes, ClosedUnderDependenciesAndEachNeeded) {
  int with_unmarked = 0;
  for (const std::filesystem::path& p : shipped_configs()) {
    SCOPED_TRACE(p.filename().string());
    const KernelGraph kg = training_graph(load_model(p.string()));
    const std::vector<bool> chain = chain_nodes(kg);
    ASSERT_EQ(chain.size(), kg.nodes.size());
    const std::vector<Group> groups = group_nodes(kg);
    // Per tensor: whether an op of another layer than its producer's, of the same direction,
    // reads it.
    const OpGraph& ops = kg.ops;
    std::vector<bool> feeds_other(ops.tensors.size(), false);
    for (const GraphOp& op : ops.ops)
      for (int t : op.inputs) {
        const int pr = ops.tensors[t].producer;
        if (pr >= 0 && ops.ops[pr].layer != op.layer && ops.ops[pr].direction == op.direction)
          feeds_other[t] = true;
      }
    std::set<int> kept(ops.outputs.begin(), ops.outputs.end());
    for (const GraphLossTerm& l : ops.loss) kept.insert(l.value);
    for (const auto& [t, grad] : ops.grad)
      if (ops.tensors[t].kind == TensorKind::Input) kept.insert(grad);
    for (const Group& grp : groups) {
      bool any_unmarked = false;
      for (int i = grp.begin; i < grp.end; ++i) {
        const KernelNode& node = kg.nodes[i];
        const compiler::KernelSignature& sig = kg.kernels[node.kernel]->sig;
        bool writes_carried = false;  // writes an op output another layer reads
        for (size_t b = 0; b < node.buffers.size(); ++b) {
          if (!sig.buffers[b].is_output) continue;
          const int t = node.buffers[b];
          const int pr = ops.tensors[t].producer;
          if ((pr == node.op && feeds_other[t]) || kept.count(t)) writes_carried = true;
        }
        const std::string what =
            "node " + std::to_string(i) + " (" + sig.name + ", op " + ops.ops[node.op].type + ")";
        if (writes_carried) EXPECT_TRUE(chain[i]) << what;
        if (chain[i])
          for (int d : node.deps)
            if (d >= grp.begin) EXPECT_TRUE(chain[d]) << what << " depends on node " << d;
        any_unmarked = any_unmarked || !chain[i];
      }
      // Each marked node is needed: a target, or a marked node of the group depends on it.
      if (!any_unmarked) continue;
      ++with_unmarked;
      std::vector<bool> needed(grp.end - grp.begin, false);
      for (int i = grp.end - 1; i >= grp.begin; --i) {
        if (!chain[i]) continue;
        for (int d : kg.nodes[i].deps)
          if (d >= grp.begin) needed[d - grp.begin] = true;
      }
      for (int i = grp.begin; i < grp.end; ++i) {
        if (!chain[i] || needed[i - grp.begin]) continue;
        // Not needed by its group: it must write something that leaves the layer.
        const KernelNode& node = kg.nodes[i];
        const compiler::KernelSignature& sig = kg.kernels[node.kernel]->sig;
        bool leaves = false;
        for (size_t b = 0; b < node.buffers.size(); ++b)
          if (sig.buffers[b].is_output) {
            const int t = node.buffers[b];
            leaves = leaves || kept.count(t) || feeds_other[t] ||
                     (kg.views[t].base >= 0 && kept.count(kg.views[t].base));
          }
        EXPECT_TRUE(leaves) << "node " << i << " (" << sig.name << ") marked but not needed";
      }
    }
  }
  EXPECT_GE(with_unmarked, 3);  // the backward's weight gradients in every multi-block model
}

// The tiny MLP's backward, both blocks: the input gradient's chain (the matmuls' dgrads, rmsnorm's
// dx, the residual's sum; block.0's ends in the model input x's gradient) is marked, the nodes
// that write only weight gradients (dw1, dw2, dg) are not.
TEST(ChainNodes, WeightGradientsOfTheTinyMlpAreOffTheChain) {
  Model model = load_model(TILERUN_SOURCE_DIR "/configs/tiny.yaml");
  const KernelGraph kg = training_graph(model);
  const std::vector<bool> chain = chain_nodes(kg);
  const OpGraph& ops = kg.ops;
  std::set<int> weight_grads;
  for (const auto& [t, gt] : ops.grad)
    if (ops.tensors[t].kind == TensorKind::Weight) weight_grads.insert(gt);
  ASSERT_EQ(weight_grads.size(), 6u);
  const int dx = ops.grad.at(ops.find("x"));
  int groups = 0, writes_dx = 0;
  for (const Group& grp : group_nodes(kg)) {
    if (grp.direction != Direction::Backward) continue;
    SCOPED_TRACE(model.layers[grp.layer].name);
    ++groups;
    int off = 0, on = 0;
    for (int i = grp.begin; i < grp.end; ++i) {
      const KernelNode& node = kg.nodes[i];
      const compiler::KernelSignature& sig = kg.kernels[node.kernel]->sig;
      bool only_weight_grads = true;
      for (size_t b = 0; b < node.buffers.size(); ++b) {
        if (!sig.buffers[b].is_output) continue;
        only_weight_grads = only_weight_grads && weight_grads.count(node.buffers[b]);
        if (node.buffers[b] == dx) {
          EXPECT_TRUE(chain[i]) << sig.name << " writes x's gradient";
          ++writes_dx;
        }
      }
      if (only_weight_grads) EXPECT_FALSE(chain[i]) << sig.name;
      off += !chain[i];
      on += chain[i];
    }
    EXPECT_GE(off, 3);  // dw1, dw2, dg at least
    EXPECT_GE(on, 3);   // dx through both matmuls and the norm
  }
  EXPECT_EQ(groups, 2);
  EXPECT_GE(writes_dx, 1);
}

// urgency on every shipped config: 0 exactly for the weight-only and off-chain nodes, and for the
// rest in (0, 1], falling along every dependency edge inside a layer (a node's dependency, unless
// weight-only, is more urgent than it), and 1 somewhere in every layer with a node that counts.
TEST(Urgency, FallsAlongEveryEdgeAndIsZeroOffTheChain) {
  int levels_seen = 0;
  for (const std::filesystem::path& p : shipped_configs()) {
    SCOPED_TRACE(p.filename().string());
    const KernelGraph kg = training_graph(load_model(p.string()));
    const std::vector<double> u = urgency(kg);
    const std::vector<bool> only = weight_only_nodes(kg), chain = chain_nodes(kg);
    ASSERT_EQ(u.size(), kg.nodes.size());
    for (const Group& grp : group_nodes(kg)) {
      double top = 0;
      std::set<double> levels;
      for (int i = grp.begin; i < grp.end; ++i) {
        const bool yields = only[i] || !chain[i];
        if (yields) EXPECT_EQ(u[i], 0.0) << "node " << i;
        if (!yields) {
          EXPECT_GT(u[i], 0.0) << "node " << i;
          EXPECT_LE(u[i], 1.0) << "node " << i;
        }
        for (int d : kg.nodes[i].deps)
          if (d >= grp.begin && !yields && !only[d])
            EXPECT_GT(u[d], u[i]) << "node " << d << " -> " << i;
        top = std::max(top, u[i]);
        levels.insert(u[i]);
      }
      const bool any_chain =
          std::any_of(chain.begin() + grp.begin, chain.begin() + grp.end, [](bool c) { return c; });
      if (any_chain &&
          !std::all_of(only.begin() + grp.begin, only.begin() + grp.end, [](bool w) { return w; }))
        EXPECT_EQ(top, 1.0);
      levels_seen = std::max(levels_seen, static_cast<int>(levels.size()));
    }
  }
  EXPECT_GE(levels_seen, 10);  // a layer of many kernels has a long chain
}

// critical_paths under random kernel times on every shipped config: each layer's length is its
// longest dependency chain, found here the other way round (from the ends: a node's longest
// chain from it onwards); the flagged nodes are a chain of dependencies with that summed time.
TEST(CriticalPaths, LongestChainOfEachLayer) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> time(0.5, 100.0);
  for (const std::filesystem::path& p : shipped_configs()) {
    SCOPED_TRACE(p.filename().string());
    const KernelGraph kg = training_graph(load_model(p.string()));
    std::vector<double> us(kg.nodes.size());
    for (double& u : us) u = time(rng);
    const CriticalPaths paths = critical_paths(kg, us);
    const std::vector<Group> groups = group_nodes(kg);
    ASSERT_EQ(paths.length.size(), groups.size());
    ASSERT_EQ(paths.on_path.size(), kg.nodes.size());
    for (size_t k = 0; k < groups.size(); ++k) {
      const Group& grp = groups[k];
      std::vector<double> onwards(kg.nodes.size(), 0.0);
      double longest = 0, flagged = 0;
      std::vector<int> path;
      for (int i = grp.end - 1; i >= grp.begin; --i) {
        onwards[i] += us[i];
        longest = std::max(longest, onwards[i]);
        for (int d : kg.nodes[i].deps)
          if (d >= grp.begin) onwards[d] = std::max(onwards[d], onwards[i]);
      }
      for (int i = grp.begin; i < grp.end; ++i)
        if (paths.on_path[i]) {
          flagged += us[i];
          path.push_back(i);
        }
      EXPECT_NEAR(paths.length[k], longest, 1e-9 * longest);
      EXPECT_NEAR(flagged, longest, 1e-9 * longest);
      for (size_t j = 1; j < path.size(); ++j) {
        const std::vector<int>& deps = kg.nodes[path[j]].deps;
        EXPECT_NE(std::find(deps.begin(), deps.end(), path[j - 1]), deps.end())
            << "node " << path[j] << " does not depend on node " << path[j - 1];
      }
    }
  }
}

}  // namespace
}  // namespace tilerun::graph
