#include "compiler/analysis/launch_traits.h"

#include "compiler/ir/ir_visitor.h"

namespace tilerun::compiler {

LaunchTraits launch_traits(const Kernel& kernel) {
  return LaunchTraits{.block_barriers = contains_barrier(kernel.body)};
}

}  // namespace tilerun::compiler
