// The memory plan of a KernelGraph: which tensors outlive the step, which start as zeros, and
// one arena whose bytes are reused only along data dependencies (plan.h does the packing).
#pragma once

#include <vector>

#include "graph/kernel_graph.h"
#include "graph/node_access.h"
#include "graph/plan.h"

namespace tilerun::graph {

struct ReusePlan {
  std::vector<BufferUse> uses;          // per tensor: bytes and first/last node
  std::vector<std::vector<int>> users;  // per tensor: the nodes touching it, in order
};

// What outlives the step's kernels, per tensor: inputs, weights, outputs, loss values, index
// checks' statuses, the values selections choose indices by, the gradients of inputs and
// weights, zero gradients that nothing writes, and the bases of views that do.
std::vector<bool> persistent_tensors(const KernelGraph& kg);

// Fills kg.persistent, kg.zero_init and kg.plan. A buffer may take bytes another one used only
// if every node touching that one is an ancestor (through read-after-write edges) of the node
// that first touches this one: then the hazard edges reuse implies are already implied by the
// data, and independent branches stay free to overlap.
ReusePlan plan_reuse(KernelGraph& kg, const std::vector<NodeAccess>& access);

}  // namespace tilerun::graph
