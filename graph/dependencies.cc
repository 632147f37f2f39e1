#include "graph/dependencies.h"

#include <algorithm>
#include <map>

namespace tilerun::graph {

void add_dependencies(KernelGraph& kg, const std::vector<NodeAccess>& access,
                      const ReusePlan& reuse) {
  const OpGraph& g = kg.ops;
  const std::vector<std::vector<int>>& users = reuse.users;
  const std::vector<BufferUse>& bytes = reuse.uses;
  auto add_edges = [&](const std::vector<int>& from, int j) {
    for (int i : from)
      if (i < j) kg.nodes[j].deps.push_back(i);
  };
  const size_t tensors = g.tensors.size();
  std::vector<std::vector<int>> readers(tensors), writers(tensors);
  for (size_t j = 0; j < kg.nodes.size(); ++j) {
    std::vector<int>& deps = kg.nodes[j].deps;
    for (int r : access[j].reads) deps.insert(deps.end(), writers[r].begin(), writers[r].end());
    for (int w : access[j].writes) {
      deps.insert(deps.end(), writers[w].begin(), writers[w].end());
      deps.insert(deps.end(), readers[w].begin(), readers[w].end());
    }
    for (int r : access[j].reads) readers[r].push_back(static_cast<int>(j));
    for (int w : access[j].writes) writers[w].push_back(static_cast<int>(j));
  }
  // Reuse: tensors in order of their first use; each previous occupant's accesses conflict
  // with this tensor's where one of the two writes.
  std::vector<int> order;
  for (size_t t = 0; t < tensors; ++t)
    if (!users[t].empty() && !kg.persistent[t]) order.push_back(static_cast<int>(t));
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(users[a].front(), a) < std::pair(users[b].front(), b);
  });
  std::map<int64_t, std::pair<int64_t, int>> occupant;  // byte segment begin -> (end, tensor)
  for (int y : order) {
    if (bytes[y].bytes == 0) continue;
    const int64_t begin = kg.plan.offsets[y], end = begin + bytes[y].bytes;
    std::vector<int> previous;
    auto it = occupant.upper_bound(begin);
    if (it != occupant.begin()) --it;
    while (it != occupant.end() && it->first < end) {
      auto [seg_end, x] = it->second;
      const int64_t seg_begin = it->first;
      if (seg_end <= begin) {
        ++it;
        continue;
      }
      previous.push_back(x);
      it = occupant.erase(it);
      if (seg_begin < begin) occupant[seg_begin] = {begin, x};
      if (seg_end > end) occupant[end] = {seg_end, x};
    }
    occupant[begin] = {end, y};
    std::sort(previous.begin(), previous.end());
    previous.erase(std::unique(previous.begin(), previous.end()), previous.end());
    for (int x : previous) {
      for (int j : readers[y]) add_edges(writers[x], j);
      for (int j : writers[y]) {
        add_edges(writers[x], j);
        add_edges(readers[x], j);
      }
    }
  }
  for (KernelNode& node : kg.nodes) {
    std::sort(node.deps.begin(), node.deps.end());
    node.deps.erase(std::unique(node.deps.begin(), node.deps.end()), node.deps.end());
  }
  for (size_t j = 0; j < kg.nodes.size(); ++j) std::erase(kg.nodes[j].deps, static_cast<int>(j));
}

}  // namespace tilerun::graph
