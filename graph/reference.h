// The double-precision reference of a whole step: every op of an OpGraph evaluated with its
// registered reference, in order. `--check` and the tests compare the executor against it.
#pragma once

#include <vector>

#include "graph/op_graph.h"

namespace tilerun::graph {

// values[i] is tensor i. Inputs and weights must be set by the caller; tensors without a producer
// that are not set (zero gradients) are zeros. Returns every tensor's value.
std::vector<kernels::RefTensor> evaluate_reference(const OpGraph& graph,
                                                   std::vector<kernels::RefTensor> values);

}  // namespace tilerun::graph
