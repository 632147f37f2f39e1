#include "graph/fold_util.h"

namespace tilerun::graph {

std::vector<bool> kept_tensors(const OpGraph& g) {
  std::vector<bool> keep(g.tensors.size(), false);
  for (int out : g.outputs) keep[out] = true;
  for (const GraphLossTerm& term : g.loss) keep[term.value] = true;
  for (const GraphIndexCheck& check : g.index_checks) {
    if (check.status >= 0) keep[check.status] = true;
    if (check.ids >= 0) keep[check.ids] = true;
  }
  for (int t : g.selection_inputs) keep[t] = true;
  for (const auto& [x, dx] : g.grad) {
    const TensorKind k = g.tensors[x].kind;
    if (k == TensorKind::Input || k == TensorKind::Weight) keep[dx] = true;
  }
  return keep;
}

std::vector<int> reader_counts(const OpGraph& g) {
  std::vector<int> readers(g.tensors.size(), 0);
  for (const GraphOp& op : g.ops)
    for (int t : op.inputs) ++readers[t];
  return readers;
}

void drop_ops(OpGraph& g, const std::vector<bool>& removed) {
  std::vector<int> id(g.ops.size(), -1);
  std::vector<GraphOp> ops;
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (!removed[i]) {
      id[i] = static_cast<int>(ops.size());
      ops.push_back(std::move(g.ops[i]));
    }
  g.ops = std::move(ops);
  auto renumber = [&](int& op) {
    if (op >= 0) op = id[op];
  };
  for (GraphTensor& t : g.tensors) renumber(t.producer);
  for (GraphLossTerm& term : g.loss) renumber(term.op);
  for (GraphIndexCheck& check : g.index_checks) {
    renumber(check.producer);
    renumber(check.op);
  }
}

}  // namespace tilerun::graph
