// Quantisation epilogues: before expansion, a fake_quant whose input is output 0 of an op that
// can quantise in its own kernel (OpSchema::quant_epilogue: the fixed-row rmsnorm and
// rmsnorm_rope kernels, which stage their rows in shared memory, and swiglu's) and is read by
// nothing else becomes that op with the fake_quant's attributes (quant_format, quant_block,
// quant_scale, quant_extent), writing the fake_quant's output: V4's "norm + RoPE + FP8 quant" of
// the query latent, the KV head and the compressed KV, and the experts' SwiGLU + FP8, in one
// kernel each instead of two, the rows read once.
// The bits are the fake_quant's (the row rounded to its dtype first, as stored, then quantised
// per block as fake_quant's kernel does); its gradient is straight-through (an alias of dy), so
// the backward is unchanged. The unquantised product must not outlive the step (an output, a
// loss value) and must share the op's layer and direction.
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// Folds every such pair in `g`, the fused op at the op's place; the op ids after a removed
// fake_quant shift down. Returns how many it folded.
int fold_quant_epilogues(OpGraph& g);

}  // namespace tilerun::graph
