// What each kernel node of a KernelGraph reads and writes, by tensor id: the facts the memory
// plan (reuse.h) and the hazard edges (dependencies.h) are computed from.
#pragma once

#include <vector>

namespace tilerun::graph {

struct NodeAccess {
  std::vector<int> reads, writes;  // a scratch tensor is both
};

}  // namespace tilerun::graph
