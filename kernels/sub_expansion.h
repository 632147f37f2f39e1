// Composing an op's expansion from other ops' expansions (linear_fp8 from quantize and
// matmul_fp8; matmul's tf32 forms from the transposing copies and its own a·b^T).
#pragma once

#include <vector>

#include "kernels/expand_util.h"

namespace tilerun::kernels {

// Appends `sub` (an op's expansion) to `ex`: its scratch after ex's, its inputs and outputs bound
// to the given arguments (slot i of `sub` to inputs[i] / outputs[i]).
inline void append_expansion(OpExpansion& ex, const OpExpansion& sub,
                             const std::vector<KernelArg>& inputs,
                             const std::vector<KernelArg>& outputs) {
  const int base = static_cast<int>(ex.scratch.size());
  ex.scratch.insert(ex.scratch.end(), sub.scratch.begin(), sub.scratch.end());
  for (KernelCall call : sub.calls) {
    for (KernelArg& arg : call.buffers)
      arg = arg.kind == KernelArg::Kind::Scratch  ? scratch_slot(base + arg.index)
            : arg.kind == KernelArg::Kind::Output ? outputs.at(arg.index)
                                                  : inputs.at(arg.index);
    ex.calls.push_back(call);
  }
}

}  // namespace tilerun::kernels
