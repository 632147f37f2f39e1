// FP4 weights in the grouped GEMMs: before expansion, a fake_quant of a weight to fp4e2m1 with
// ue8m0 scales (V4's MoE experts, trained through the rounding) whose output only grouped_matmuls
// read, as their w (the forward's product and the backward's dx), becomes a quantize to codes and
// e8m0 scales, and each of those grouped_matmuls a grouped_matmul_fp4 of the codes. The rounded
// weights were written in bf16 and read twice; now a quarter of those bytes are written, and the
// GEMMs decode them in shared memory. The bits are the same: quantize's e8m0 scales are
// fake_quant's ue8m0 ones, and a code times its scale is exact in bf16. The gradient is
// unchanged (the weight's is the wgrad's, straight through the fake_quant; no reader of the
// rounded weights is left, so its bytes are never written).
// Applies where every reader runs grouped_matmul_fp4's decoding kernel (kernels/
// grouped_matmul_tc.h grouped_fp4_decodes), else the pair stays. Only on request
// (SessionOptions::fp4_weights, `--fp4-weights on`): the decoding kernels measured slower than
// the bf16 ones on the H100 (bench/RESULTS.md, fortieth session).
#pragma once

#include "graph/op_graph.h"

namespace tilerun::graph {

// Folds every such fake_quant in `g` (in place: no op is added or removed). Returns how many.
int fold_fp4_weights(OpGraph& g);

}  // namespace tilerun::graph
