// The shape of a step's CUDA graphs: which kernel nodes form one graph (a layer in one
// direction) and which edges between them a graph needs.
#pragma once

#include <vector>

#include "graph/kernel_graph.h"

namespace tilerun::graph {

// Consecutive nodes of one layer and direction: what one CUDA graph (or one timed launch loop)
// holds.
struct Group {
  int layer = 0;
  Direction direction = Direction::Forward;
  int begin = 0, end = 0;  // node range
};

// The groups in node order.
std::vector<Group> group_nodes(const KernelGraph& g);

// Edges of a layer's graph between its launched nodes (`launched[j]`: node begin + j has a
// non-empty grid), as local indices, with the transitive ones removed: a graph needs only the
// edges no other path implies (the KernelGraph lists every hazard pair). Nodes with an empty grid
// get no graph node and are left out here: they do no work, so no hazard passes through them.
std::vector<std::vector<int>> graph_edges(const KernelGraph& g, const Group& grp,
                                          const std::vector<bool>& launched);

// Per node: whether it reads only weights, or what weight-only nodes wrote (a node reading
// nothing, such as a table's iota, counts): work whose inputs no activation reaches, such as an
// expert weight's fake_quant. It can run any time before its users, so a layer's CUDA graph gives
// it the least priority and the rest the greatest: the scheduler then fills SMs the critical path
// leaves idle with it instead of running it first (bench/RESULTS.md, forty-fifth session).
std::vector<bool> weight_only_nodes(const KernelGraph& g);

// Per node: whether the next layer waits on it, i.e. it has a path (dependency edges within its
// layer's graph) to a node that writes what another layer of the same direction reads (the
// residual stream into the next layer's forward, the input gradient into the previous layer's
// backward), a model output, a loss value or an input's gradient. The rest (the backward's weight
// gradients, what only the backward reads) can yield to it. A layer with no such node has every
// node marked.
std::vector<bool> chain_nodes(const KernelGraph& g);

// Per node, how soon its layer needs it, in [0, 1]: 0 for weight-only nodes and nodes off the
// chain (they may wait for idle SMs); for a chain node, the longest path from it to its layer's
// end, counted in nodes, over the longest such path from a chain node (1 at its start). A layer's
// CUDA graph maps it onto the device's stream priorities: the scheduler then gives the SMs first to
// the kernels the most work waits on (bench/RESULTS.md, forty-sixth session).
std::vector<double> urgency(const KernelGraph& g);

// Each layer's critical path under kernel times `us` (per node): nodes in execution order, each
// starting when its latest dependency inside its layer finishes; the latest finish ends the path,
// which leads back through the dependency that set each start (the first of equals).
struct CriticalPaths {
  std::vector<double> length;  // per group (group_nodes' order): the path's summed time
  std::vector<bool> on_path;   // per node
};
CriticalPaths critical_paths(const KernelGraph& g, const std::vector<double>& us);

}  // namespace tilerun::graph
