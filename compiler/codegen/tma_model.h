// The CPU backend's tensor memory accelerator (ir.h TmaCopy): the box copy a tensor map
// describes, done at once by the thread that issues it, with the swizzle the hardware applies to
// shared addresses applied to the tile's element offsets instead (the same thing for a tile at
// whole periods of it, which tile_verifier asks).
#pragma once

#include <cstdint>

namespace tilerun::compiler {

// The words the CPU backend passes for one copy (all int64): element bytes, rank R, the
// swizzle's bits, base and shift (layout.h Swizzle, on element offsets), then R tensor dims, R
// box extents and R box coordinates, each outermost first. kTmaDescHeader words precede them.
constexpr int kTmaDescHeader = 5;

// Writes the box element by element to dst (the tile's first element): box element i (row-major
// over the box) at swizzle(i), src's element at the coordinates, or zero outside the tensor
// (any coordinate < 0 or >= its dim).
extern "C" void tilerun_cpu_tma_copy(void* dst, const void* src, const int64_t* desc);

}  // namespace tilerun::compiler
