// The CUDA spelling of a gemm (ir.h Gemm) on sm_90a: Hopper's warpgroup MMA, wgmma.mma_async,
// reading both tiles from shared memory through descriptors.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler::cuda {

// Device helpers the gemm lines use (shared-window address, descriptor), emitted once in a
// kernel with a gemm.
extern const char* const kWgmmaHelpers;

// Whether the tiles are laid out as the lowering reads them, k = 64 two-byte elements per
// 128-byte row under the 128B swizzle: a K-major ([m, k]) or, transposed, as m's panels
// ([m / 64, k, 64], or [k, 64] when m = 64); b K-major ([n, k], trans_b) or N-major ([k, 64]);
// empty when so, else why not.
std::string wgmma_unsupported(const SimtKernel& k, const Gemm& g);

// The statements of one gemm: a fence, per 64-row block of this warpgroup and per 16 of k one
// wgmma.mma_async m64nNk16 into the accumulator registers `acc`[...], then commit and wait until at
// most the gemm's `pending` newest groups run.
// `a`, `b` are the shared arrays' C names, `tid` the thread index's and `stage` the C text of
// the gemm's stage (empty when it reads whole arrays): tile `stage` of each stack is then
// `stage` tiles past the array's start.
std::vector<std::string> wgmma_lines(const SimtKernel& k, const Gemm& g, const std::string& acc,
                                     const std::string& a, const std::string& b,
                                     const std::string& tid, const std::string& stage = "");

}  // namespace tilerun::compiler::cuda
