// Pass (SIMT IR, last): a kernel whose index math fits 32 bits only at the shape it is launched at
// gets its dims pinned to that shape, so that the CUDA backend computes its index values as ints
// (analysis/index_width.h says when they fit).
//
// Most kernels are written for any dims up to 2^31 - 1 (some up to 2^40), where products of dims
// and offsets past them need 64 bits. The runtime knows the dims of every launch of a kernel when
// they all agree (AnalysisOptions::concrete); if every i64 value is proved within [-2^31, 2^31) at
// those values, and not at the declared bounds, the dims' bounds become those values: the
// signature then says the truth about the code. The runtime launches it at that shape only (the
// shape is passed only when every launch of the kernel agrees), and a launch through the lowered
// kernel's own signature at another shape is refused by its dims check (launch_geometry.h
// check_dims) instead of running index math that could wrap. A kernel that
// fits at its declared bounds, or does not fit even at the concrete dims (a tensor past 2^31
// elements, an index loaded from memory), or whose dims are not all known, is left as it is. Only
// the signature changes: the program, its layouts and its bits are the same.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

SimtKernel pin_index_width(const SimtKernel& kernel,
                           const std::map<std::string, int64_t>& concrete);

}  // namespace tilerun::compiler
