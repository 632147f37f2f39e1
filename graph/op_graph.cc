#include "graph/op_graph.h"

#include "compiler/base/check.h"

namespace tilerun::graph {

const char* direction_name(Direction d) { return d == Direction::Forward ? "forward" : "backward"; }

int OpGraph::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

int OpGraph::add_tensor(GraphTensor t) {
  TR_CHECK(find(t.name) < 0, "tensor added twice: " + t.name);
  tensors.push_back(std::move(t));
  return static_cast<int>(tensors.size()) - 1;
}

}  // namespace tilerun::graph
