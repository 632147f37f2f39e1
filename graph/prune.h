// Dead kernels: after expansion, a kernel node none of whose writes reaches anything that
// outlives the step (reuse.h's persistent tensors: outputs, loss values, gradients of inputs and
// weights, statuses, ...) or a kept node's reads is dropped before the memory plan. Gradient
// rules and expansions stay simple (a rule writes every gradient slot it has); what nothing reads
// never runs: the gradient of a constant (rmsnorm's dgamma when gamma is a table), the outputs a
// rule leaves unused.
#pragma once

#include <vector>

#include "graph/kernel_graph.h"
#include "graph/node_access.h"

namespace tilerun::graph {

// Removes kg's dead nodes (and their entries of `access`), keeping the others in order, and
// lists kg.kernels again in first-use order of the kept nodes. kg.views must be complete.
void prune_dead_nodes(KernelGraph& kg, std::vector<NodeAccess>& access);

}  // namespace tilerun::graph
