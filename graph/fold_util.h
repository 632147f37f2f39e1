// What the epilogue folds (fold_adds.h, fold_quant.h) share: which tensors must keep their own
// bytes, how many ops read each tensor, and dropping the ops a fold absorbed.
#pragma once

#include <vector>

#include "graph/op_graph.h"

namespace tilerun::graph {

// Tensors that outlive the step or are read from outside the ops (reuse.h persistent_tensors'
// op-level part): a product among them keeps its own buffer, so no fold may absorb it.
std::vector<bool> kept_tensors(const OpGraph& g);

// How many op inputs name each tensor (an op reading it twice counts twice).
std::vector<int> reader_counts(const OpGraph& g);

// Removes the ops marked in `removed`; the op ids after them shift down (tensors' producers, the
// loss terms' and index checks' ops follow).
void drop_ops(OpGraph& g, const std::vector<bool>& removed);

}  // namespace tilerun::graph
