// graph/autodiff: the forward OpGraph of a model, and the backward ops from each op's gradient
// rule in reverse order, with gradient accumulation where a tensor feeds several ops.
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// The model's forward ops over its tensors (types from each op's inference), then one op per
// loss term computing its value (OpGraph::loss; the default: half_sum_squares of each output).
OpGraph build_forward(const Model& model);

// Appends the backward ops: seeds the gradient of each loss term's value with its weight (a
// loss_seed op; a half_sum_squares term of weight 1 seeds its input with the input itself, an
// alias), then walks the forward ops in reverse, emitting
// each op's gradient rule for the inputs that need a gradient, and an `add` where a tensor's
// gradient has several contributions (in reverse op order, so the sum order is fixed). After it,
// OpGraph::grad holds the gradient of every float input and weight (integer inputs, such as
// targets, have none). Throws tilerun::Error naming the
// op when a rule is missing.
void append_backward(const Model& model, OpGraph& graph);

}  // namespace tilerun::graph
