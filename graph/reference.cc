#include "graph/reference.h"

#include "compiler/base/check.h"

namespace tilerun::graph {

std::vector<kernels::RefTensor> evaluate_reference(
    const OpGraph& graph, std::vector<kernels::RefTensor> values,
    const std::map<int, kernels::RefTensor>& chosen_from) {
  values.resize(graph.tensors.size());
  for (size_t i = 0; i < graph.tensors.size(); ++i) {
    const GraphTensor& t = graph.tensors[i];
    if (t.producer >= 0 || !values[i].data.empty()) continue;
    values[i].shape = t.type.shape;
    values[i].data.assign(values[i].numel(), 0.0);
  }
  for (const GraphOp& op : graph.ops) {
    const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
    TR_CHECK(schema != nullptr && schema->reference, "op without a reference: " + op.type);
    const bool chooses = !chosen_from.empty() && chooses_from_inputs(graph, op);
    std::vector<kernels::RefTensor> ins;
    for (int in : op.inputs) {
      auto given = chooses ? chosen_from.find(in) : chosen_from.end();
      ins.push_back(given != chosen_from.end() ? given->second : values[in]);
    }
    std::vector<kernels::RefTensor> outs = schema->reference(ins, op.attrs);
    TR_CHECK(outs.size() == op.outputs.size(), "reference of " + op.type + " output count");
    for (size_t i = 0; i < outs.size(); ++i) values[op.outputs[i]] = std::move(outs[i]);
  }
  return values;
}

}  // namespace tilerun::graph
