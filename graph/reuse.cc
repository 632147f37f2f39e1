#include "graph/reuse.h"

#include "graph/ancestry.h"

namespace tilerun::graph {
namespace {

int64_t tensor_bytes(const GraphTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.type.shape) n *= d;
  return dtype_bytes(t.type.dtype, n);
}

// Per node, the earlier nodes that wrote a tensor it touches (read after write).
std::vector<std::vector<int>> read_after_write_preds(const KernelGraph& kg,
                                                     const std::vector<NodeAccess>& access) {
  const OpGraph& g = kg.ops;
  std::vector<std::vector<int>> writers(g.tensors.size()), preds(kg.nodes.size());
  for (size_t j = 0; j < kg.nodes.size(); ++j) {
    for (int r : access[j].reads)
      preds[j].insert(preds[j].end(), writers[r].begin(), writers[r].end());
    for (int w : access[j].writes)
      if (writers[w].empty() || writers[w].back() != static_cast<int>(j))
        writers[w].push_back(static_cast<int>(j));
  }
  return preds;
}

}  // namespace

// Everything bound or read from outside outlives the step's kernels: inputs, weights, outputs,
// loss values, index checks' statuses, the values selections choose indices by, the gradients of
// inputs and weights, and zero gradients that nothing writes; and with a view that does, its base
// (and every view of that base).
std::vector<bool> persistent_tensors(const KernelGraph& kg) {
  const OpGraph& g = kg.ops;
  std::vector<bool> p(g.tensors.size(), false);
  for (size_t i = 0; i < g.tensors.size(); ++i)
    p[i] = g.tensors[i].kind == TensorKind::Input || g.tensors[i].kind == TensorKind::Weight ||
           g.tensors[i].producer < 0;
  for (int out : g.outputs) p[out] = true;
  for (const GraphLossTerm& term : g.loss) p[term.value] = true;
  for (const GraphIndexCheck& check : g.index_checks) p[check.status] = true;
  for (int t : g.selection_inputs) p[t] = true;
  for (const auto& [x, dx] : g.grad) {
    TensorKind k = g.tensors[x].kind;
    if (k == TensorKind::Input || k == TensorKind::Weight) p[dx] = true;
  }
  for (size_t t = 0; t < p.size(); ++t)
    if (kg.views[t].base >= 0 && p[t]) p[kg.views[t].base] = true;
  for (size_t t = 0; t < p.size(); ++t)
    if (kg.views[t].base >= 0) p[t] = p[kg.views[t].base];
  return p;
}

ReusePlan plan_reuse(KernelGraph& kg, const std::vector<NodeAccess>& access) {
  const OpGraph& g = kg.ops;
  ReusePlan out;
  // A view has no bytes of its own: its uses are its base's, and its offset follows the base's.
  auto base_of = [&](int t) { return kg.views[t].base >= 0 ? kg.views[t].base : t; };
  kg.persistent = persistent_tensors(kg);
  kg.zero_init.assign(g.tensors.size(), false);
  for (size_t t = 0; t < g.tensors.size(); ++t)
    kg.zero_init[t] = g.tensors[t].kind == TensorKind::Gradient && g.tensors[t].producer < 0;
  std::vector<BufferUse> uses(g.tensors.size());
  std::vector<bool> touched(g.tensors.size(), false);
  for (size_t n = 0; n < kg.nodes.size(); ++n)
    for (int view : kg.nodes[n].buffers) {
      const int t = base_of(view);
      BufferUse& u = uses[t];
      if (!touched[t]) u.first = static_cast<int>(n);
      u.last = static_cast<int>(n);
      touched[t] = true;
    }
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    uses[t].bytes = kg.views[t].base >= 0 ? 0 : tensor_bytes(g.tensors[t]);
    uses[t].persistent = kg.persistent[t];
  }
  // Reuse only along data dependencies: a buffer may take bytes another one used only if
  // every node touching that one is an ancestor (through read-after-write edges) of the
  // node that first touches this one. Then the hazard edges reuse implies are already
  // implied by the data, and independent branches stay free to overlap.
  Ancestry ancestry(read_after_write_preds(kg, access));
  out.users.assign(g.tensors.size(), {});
  for (size_t node = 0; node < kg.nodes.size(); ++node)
    for (int view : kg.nodes[node].buffers) {
      const int t = base_of(view);
      if (out.users[t].empty() || out.users[t].back() != static_cast<int>(node))
        out.users[t].push_back(static_cast<int>(node));
    }
  auto ordered = [&](int a, int b) {
    if (out.users[a].empty() || out.users[b].empty()) return true;  // never touched: no hazard
    const int v = out.users[b].front();
    for (int u : out.users[a])
      if (!ancestry.is_ancestor(u, v)) return false;
    return true;
  };
  // Only tensors with bytes of their own are placed; each view then sits inside its base.
  std::vector<int> placed;
  std::vector<BufferUse> placed_uses;
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (kg.views[t].base < 0) {
      placed.push_back(static_cast<int>(t));
      placed_uses.push_back(uses[t]);
    }
  MemoryPlan plan =
      plan_memory(placed_uses, [&](int a, int b) { return ordered(placed[a], placed[b]); });
  kg.plan = {.offsets = std::vector<int64_t>(g.tensors.size(), 0),
             .arena_bytes = plan.arena_bytes,
             .total_bytes = plan.total_bytes};
  for (size_t i = 0; i < placed.size(); ++i) kg.plan.offsets[placed[i]] = plan.offsets[i];
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (kg.views[t].base >= 0)
      kg.plan.offsets[t] = kg.plan.offsets[kg.views[t].base] + kg.views[t].offset;
  out.uses = std::move(uses);
  return out;
}

}  // namespace tilerun::graph
