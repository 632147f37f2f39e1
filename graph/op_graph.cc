#include "graph/op_graph.h"

#include "compiler/base/check.h"

namespace tilerun::graph {

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::Forward:
      return "forward";
    case Direction::Backward:
      return "backward";
    case Direction::Update:
      return "update";
  }
  return "?";
}

int OpGraph::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int OpGraph::add_tensor(GraphTensor t) {
  const int id = static_cast<int>(tensors.size());
  TR_CHECK(index_.emplace(t.name, id).second, "tensor added twice: " + t.name);
  tensors.push_back(std::move(t));
  return id;
}

std::string OpGraph::unique_name(std::string base) const {
  while (find(base) >= 0) base += "'";
  return base;
}

bool chooses_from_inputs(const OpGraph& g, const GraphOp& op) {
  const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
  TR_CHECK(schema != nullptr, "graph uses unknown op " + op.type);
  bool integers = !op.outputs.empty();
  for (int out : op.outputs) {
    const DType t = g.tensors[out].type.dtype;
    integers = integers && (t == DType::I32 || t == DType::I64);
  }
  if (schema->index_outputs.empty() && !integers) return false;
  for (int in : op.inputs)
    if (dtype_is_float(g.tensors[in].type.dtype)) return true;
  return false;
}

}  // namespace tilerun::graph
