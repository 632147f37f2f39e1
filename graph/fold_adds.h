// Epilogue folding: before expansion, an `add` of two same-typed tensors one of which is output 0
// of an op with an addend input (OpSchema::addend_input: matmul, hc_pre_grad, weighted_relu_sum)
// read by nothing else (a residual add after a projection, a gradient's two contributions summed,
// a mask added to scores) becomes that op with the other tensor as its addend (the output rounded
// to its dtype, then added and rounded: the bits of the add). Matmul's tensor-core kernels add it
// in their epilogue, hc_pre_grad its dx kernel, weighted_relu_sum its column pass: one kernel
// fewer each; only such are folded (where the expansion would run the add's kernel after the op,
// nothing is gained). The fused op takes the op's place in the order when the other tensor is
// ready by then, else the add's; the product must not outlive the step (an output, a loss value,
// a weight's gradient).
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// Folds every such pair in `g`; the op ids after a removed add shift down (tensors' producers,
// the loss terms' and index checks' ops follow). Returns how many adds it folded.
int fold_matmul_adds(OpGraph& g);

}  // namespace tilerun::graph
