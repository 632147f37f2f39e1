// The double-precision reference of a whole step: every op of an OpGraph evaluated with its
// registered reference, in order. `--check` and the tests compare the executor against it.
#pragma once

#include <map>
#include <vector>

#include "graph/op_graph.h"

namespace tilerun::graph {

// values[i] is tensor i. Inputs and weights must be set by the caller; tensors without a producer
// that are not set (zero gradients) are zeros. `chosen_from`: values (by tensor id) that the ops
// choosing from their inputs (chooses_from_inputs) read instead of the reference's own, so
// that their choices follow a run's (Session::check); every other op reads the reference's.
// Returns every tensor's value.
std::vector<kernels::RefTensor> evaluate_reference(
    const OpGraph& graph, std::vector<kernels::RefTensor> values,
    const std::map<int, kernels::RefTensor>& chosen_from = {});

}  // namespace tilerun::graph
