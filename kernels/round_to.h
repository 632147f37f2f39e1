// A value rounded to a storage dtype inside a kernel, as a store and a load of it would round it:
// for fused ops that must give the bits of an op that stores its result and a later op that reads
// it back (swiglu's weight, gather_sum's addend).
#pragma once

#include <string>

#include "compiler/ir/builder.h"
#include "compiler/transforms/strict_math.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

// v rounded to dtype (f32: v itself); `prefix` names the temporaries.
inline compiler::Val rounded(DType dtype, const compiler::Val& v, const std::string& prefix) {
  namespace cc = compiler;
  // bf16 through the rounding call every backend has (one cvt.rn.bf16.f32 on CUDA), as a store
  // of a bf16 rounds.
  if (dtype == DType::BF16)
    return cc::Val(cc::bf16_bits_to_f32(cc::Call::make(cc::CallOp::Bf16Bits, {v.expr()})));
  if (dtype == DType::F16)
    return cc::Val(cc::f16_bits_to_f32(cc::f32_to_f16_bits(v.expr(), prefix), prefix + "h"));
  return v;
}

}  // namespace tilerun::kernels
