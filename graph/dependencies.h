// The hazard edges of a KernelGraph: which kernel nodes must finish before which, from the
// data (read after write, write after read/write) and from the memory plan's reuse of bytes.
#pragma once

#include <vector>

#include "graph/kernel_graph.h"
#include "graph/node_access.h"
#include "graph/reuse.h"

namespace tilerun::graph {

// j depends on an earlier i when i writes what j reads (a true dependency), when j writes what
// i read or wrote, or when j touches bytes the plan gave to a tensor i touched before (reuse):
// in graph mode the two may not run at the same time. Per tensor, every earlier access of the
// same tensor that conflicts is listed; across tensors sharing bytes, the accesses of the
// previous occupant of those bytes (older occupants are ordered before that one by the reuse
// rule, through nodes listed here). Linear in the accesses, O(n log n) with the byte map.
void add_dependencies(KernelGraph& kg, const std::vector<NodeAccess>& access,
                      const ReusePlan& reuse);

}  // namespace tilerun::graph
