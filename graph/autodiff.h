// graph/autodiff: the forward OpGraph of a model, and the backward ops from each op's gradient
// rule in reverse order, with gradient accumulation where a tensor feeds several ops.
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// The model's forward ops over its tensors (types from each op's inference).
OpGraph build_forward(const Model& model);

// Appends the backward ops: seeds each output's gradient from the model's loss
// (half_sum_squares: dL/dout = out, an alias), then walks the forward ops in reverse, emitting
// each op's gradient rule for the inputs that need a gradient, and an `add` where a tensor's
// gradient has several contributions (in reverse op order, so the sum order is fixed). After it,
// OpGraph::grad holds the gradient of every input and weight. Throws tilerun::Error naming the
// op when a rule is missing.
void append_backward(const Model& model, OpGraph& graph);

}  // namespace tilerun::graph
