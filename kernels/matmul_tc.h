// The bf16/f16 matmul kernels on the tensor cores (ir.h Gemm): a constant 128 x 128 x 64 tiling
// (two warpgroups), so a row's bits never depend on M. kernels/matmul.cc picks one by the
// transposes and the operands' row alignment (K and N), never by M.
#pragma once

#include <string>

#include "compiler/ir/kernel.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

// Tiles staged through registers: any transposes, any K and N.
std::string tc_matmul_name(bool ta, bool tb);
compiler::Kernel build_tc_matmul(DType dtype, bool ta, bool tb);

// Tiles staged by copy_async (cp.async), five buffers deep: a not transposed, K (and N when b
// is not transposed) multiples of 8.
std::string tc_async_name(bool tb);
compiler::Kernel build_tc_matmul_async(DType dtype, bool tb);

}  // namespace tilerun::kernels
