#include "graph/runtime/graph_topology.h"

#include <algorithm>
#include <set>

#include "compiler/ir/kernel.h"

namespace tilerun::graph {

std::vector<Group> group_nodes(const KernelGraph& g) {
  std::vector<Group> groups;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const KernelNode& n = g.nodes[i];
    if (groups.empty() || groups.back().layer != n.layer || groups.back().direction != n.direction)
      groups.push_back({n.layer, n.direction, i, i});
    groups.back().end = i + 1;
  }
  return groups;
}

std::vector<std::vector<int>> graph_edges(const KernelGraph& g, const Group& grp,
                                          const std::vector<bool>& launched) {
  const int n = grp.end - grp.begin;
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));  // reach[j][i]: i before j
  std::vector<std::vector<int>> out(n);
  for (int j = 0; j < n; ++j) {
    std::vector<int> deps;
    for (int d : g.nodes[grp.begin + j].deps)
      if (d >= grp.begin && d < grp.end && launched[d - grp.begin]) deps.push_back(d - grp.begin);
    std::sort(deps.rbegin(), deps.rend());  // latest first: it implies the most
    for (int i : deps) {
      if (reach[j][i]) continue;
      out[j].push_back(i);
      reach[j][i] = true;
      for (int k = 0; k < i; ++k)
        if (reach[i][k]) reach[j][k] = true;
    }
    std::sort(out[j].begin(), out[j].end());
  }
  return out;
}

std::vector<bool> weight_only_nodes(const KernelGraph& g) {
  std::vector<bool> only(g.nodes.size(), false);
  std::vector<int> writer(g.ops.tensors.size(), -1);  // the last node that wrote a tensor's bytes
  auto bytes_of = [&](int t) { return g.views[t].base >= 0 ? g.views[t].base : t; };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const KernelNode& node = g.nodes[n];
    const compiler::KernelSignature& sig = g.kernels[node.kernel]->sig;
    bool reads_weights_only = true;
    for (size_t b = 0; b < node.buffers.size(); ++b) {
      if (sig.buffers.at(b).is_output) continue;
      const int t = bytes_of(node.buffers[b]);
      const int w = writer[t];
      const bool weight = g.ops.tensors[t].kind == TensorKind::Weight;
      if (w >= 0 ? !only[w] : !weight) reads_weights_only = false;
    }
    only[n] = reads_weights_only;
    for (size_t b = 0; b < node.buffers.size(); ++b)
      if (sig.buffers.at(b).is_output) writer[bytes_of(node.buffers[b])] = static_cast<int>(n);
  }
  return only;
}

std::vector<bool> chain_nodes(const KernelGraph& g) {
  const std::vector<Group> groups = group_nodes(g);
  std::vector<int> group_of(g.nodes.size(), 0);
  for (size_t k = 0; k < groups.size(); ++k)
    for (int i = groups[k].begin; i < groups[k].end; ++i) group_of[i] = static_cast<int>(k);
  auto bytes_of = [&](int t) { return g.views[t].base >= 0 ? g.views[t].base : t; };
  // What the caller reads after the step: outputs, loss values, the inputs' gradients.
  std::set<int> kept;
  for (int t : g.ops.outputs) kept.insert(bytes_of(t));
  for (const GraphLossTerm& l : g.ops.loss) kept.insert(bytes_of(l.value));
  for (const auto& [t, grad] : g.ops.grad)
    if (g.ops.tensors[t].kind == TensorKind::Input) kept.insert(bytes_of(grad));
  std::vector<bool> target(g.nodes.size(), false);
  std::vector<int> writer(g.ops.tensors.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const KernelNode& node = g.nodes[n];
    const compiler::KernelSignature& sig = g.kernels[node.kernel]->sig;
    for (size_t b = 0; b < node.buffers.size(); ++b) {
      const int t = bytes_of(node.buffers[b]);
      if (sig.buffers.at(b).is_output) continue;
      const int w = writer[t];
      if (w >= 0 && group_of[w] != group_of[n] && g.nodes[w].direction == node.direction)
        target[w] = true;
    }
    for (size_t b = 0; b < node.buffers.size(); ++b) {
      if (!sig.buffers.at(b).is_output) continue;
      const int t = bytes_of(node.buffers[b]);
      writer[t] = static_cast<int>(n);
      if (kept.count(t)) target[n] = true;
    }
  }
  // Backwards through each group: a node's users come after it, so its mark is final first.
  std::vector<bool> chain(g.nodes.size(), false);
  for (const Group& grp : groups) {
    bool any = false;
    for (int i = grp.end - 1; i >= grp.begin; --i) {
      if (target[i]) chain[i] = true;
      if (!chain[i]) continue;
      any = true;
      for (int d : g.nodes[i].deps)
        if (d >= grp.begin && d < grp.end) chain[d] = true;
    }
    if (!any) std::fill(chain.begin() + grp.begin, chain.begin() + grp.end, true);
  }
  return chain;
}

std::vector<double> urgency(const KernelGraph& g) {
  const std::vector<bool> weight_only = weight_only_nodes(g), chain = chain_nodes(g);
  std::vector<double> out(g.nodes.size(), 0.0);
  for (const Group& grp : group_nodes(g)) {
    // Longest path to the layer's end in nodes, over the dependency edges inside the layer.
    std::vector<int> below(grp.end - grp.begin, 1);
    for (int i = grp.end - 1; i >= grp.begin; --i)
      for (int d : g.nodes[i].deps)
        if (d >= grp.begin && d < grp.end)
          below[d - grp.begin] = std::max(below[d - grp.begin], below[i - grp.begin] + 1);
    auto counts = [&](int i) { return chain[i] && !weight_only[i]; };
    int longest = 1;  // over the nodes that count (a weight-only root may start a longer path)
    for (int i = grp.begin; i < grp.end; ++i)
      if (counts(i)) longest = std::max(longest, below[i - grp.begin]);
    for (int i = grp.begin; i < grp.end; ++i)
      if (counts(i)) out[i] = static_cast<double>(below[i - grp.begin]) / longest;
  }
  return out;
}

CriticalPaths critical_paths(const KernelGraph& g, const std::vector<double>& us) {
  CriticalPaths out{.length = {}, .on_path = std::vector<bool>(g.nodes.size(), false)};
  std::vector<double> finish(g.nodes.size(), 0.0);
  std::vector<int> from(g.nodes.size(), -1);
  for (const Group& grp : group_nodes(g)) {
    int last = -1;
    for (int i = grp.begin; i < grp.end; ++i) {
      double start = 0;
      for (int d : g.nodes[i].deps)
        if (d >= grp.begin && d < grp.end && finish[d] > start) {
          start = finish[d];
          from[i] = d;
        }
      finish[i] = start + us[i];
      if (last < 0 || finish[i] > finish[last]) last = i;
    }
    out.length.push_back(last >= 0 ? finish[last] : 0.0);
    for (int i = last; i >= 0; i = from[i]) out.on_path[i] = true;
  }
  return out;
}

}  // namespace tilerun::graph
