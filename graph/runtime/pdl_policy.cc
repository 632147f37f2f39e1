#include "graph/runtime/pdl_policy.h"

#include "compiler/analysis/launch_traits.h"

namespace tilerun::graph {

PdlFacts pdl_facts(const compiler::Kernel& kernel, const compiler::LaunchGeometry& geometry,
                   int blocks_per_sm, int sms) {
  const int64_t blocks = geometry.grid[0] * geometry.grid[1] * geometry.grid[2];
  return PdlFacts{
      .one_wave = !geometry.empty() && blocks <= int64_t{blocks_per_sm} * sms,
      .light = !compiler::launch_traits(kernel).block_barriers,
  };
}

bool programmatic_edge(bool pdl_on, const PdlFacts& producer, const PdlFacts& dependent) {
  return pdl_on && producer.one_wave && dependent.light;
}

}  // namespace tilerun::graph
