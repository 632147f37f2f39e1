// weight_only_nodes (graph/runtime/graph_topology.h): the nodes a layer's CUDA graph runs at the
// least priority must be the ones no input reaches. Checked against a dataflow computed here from
// the op graph alone (which tensor an op produces from which), independently of the node-by-node
// walk over the kernels' signatures that the function does, on every shipped config.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
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
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(TILERUN_SOURCE_DIR "/configs"))
    if (e.path().extension() == ".yaml") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  int configs = 0, with_some = 0;
  for (const std::filesystem::path& p : paths) {
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

}  // namespace
}  // namespace tilerun::graph
