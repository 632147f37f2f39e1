// Facts about a kernel that the runtime's launch policy needs, computed here so the runtime
// never walks IR itself.
#pragma once

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

struct LaunchTraits {
  // The author's program synchronises its block (a `barrier` in the Tile IR: shared-memory
  // tiles, double buffering). Reductions lowered later do not count. Programmatic dependent
  // launch pays only into kernels without one (a dependent parked at its first barrier holds
  // its SM slots while it waits).
  bool block_barriers = false;
};

LaunchTraits launch_traits(const Kernel& kernel);

}  // namespace tilerun::compiler
