// graph/optimizer: the optimiser step of a model with `optimizer:`, as ops of Direction::Update
// that update every weight in place after backward.
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// After append_backward: one update op per float weight with a gradient, in tensor order, in
// the weight's layer, its outputs bound to the tensors it updates (the weight; AdamW's m and v,
// f32 state tensors zero at the start and kept across steps). AdamW first advances its two bias
// corrections (an f32[2] state tensor) with one adamw_bias op. Nothing when the model has no
// optimizer.
void append_update(const Model& model, OpGraph& graph);

}  // namespace tilerun::graph
