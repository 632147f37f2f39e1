// Epilogue folding: before expansion, an `add` of two same-typed tensors one of which is a
// matmul's product read by nothing else (a residual add after a projection, a gradient's two
// contributions summed) becomes that matmul with the other tensor as its addend (kernels'
// matmul: the product rounded to c's dtype, then added and rounded, so the bits of the add). The
// tensor-core kernels add it in their epilogue, one kernel fewer; only those are folded (where
// matmul's expansion would run the add's kernel after the product, nothing is gained). The fused
// op takes the matmul's place in the order when the other tensor is ready by then, else the
// add's; the product must not outlive the step (an output, a loss value, a weight's gradient).
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// Folds every such pair in `g`; the op ids after a removed add shift down (tensors' producers,
// the loss terms' and index checks' ops follow). Returns how many adds it folded.
int fold_matmul_adds(OpGraph& g);

}  // namespace tilerun::graph
