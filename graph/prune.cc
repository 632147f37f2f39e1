#include "graph/prune.h"

#include <map>

#include "compiler/ir/kernel.h"
#include "graph/reuse.h"

namespace tilerun::graph {

void prune_dead_nodes(KernelGraph& kg, std::vector<NodeAccess>& access) {
  // Backwards: a node is kept when it writes a live tensor; then what it reads is live, and so is
  // everything it writes: a later kernel of an op may read what an earlier one wrote to the op's
  // output (counting_sort's offsets), which its accesses list as a write only.
  std::vector<bool> live = persistent_tensors(kg);
  std::vector<bool> keep(kg.nodes.size(), false);
  for (size_t j = kg.nodes.size(); j-- > 0;) {
    for (int w : access[j].writes) keep[j] = keep[j] || live[w];
    if (!keep[j]) continue;
    for (int r : access[j].reads) live[r] = true;
    for (int w : access[j].writes) live[w] = true;
  }
  std::vector<KernelNode> nodes;
  std::vector<NodeAccess> kept_access;
  std::vector<std::shared_ptr<const compiler::Kernel>> kernels;
  std::map<int, int> renumbered;  // old kernel index -> new, in first-use order
  for (size_t j = 0; j < kg.nodes.size(); ++j) {
    if (!keep[j]) continue;
    KernelNode node = std::move(kg.nodes[j]);
    auto [it, added] = renumbered.emplace(node.kernel, static_cast<int>(kernels.size()));
    if (added) kernels.push_back(kg.kernels[node.kernel]);
    node.kernel = it->second;
    nodes.push_back(std::move(node));
    kept_access.push_back(std::move(access[j]));
  }
  kg.nodes = std::move(nodes);
  kg.kernels = std::move(kernels);
  access = std::move(kept_access);
}

}  // namespace tilerun::graph
