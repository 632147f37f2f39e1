// When a kernel may launch before its producer finishes (programmatic dependent launch), decided
// in one place from facts the compiler and the device give about each node.
#pragma once

#include "compiler/analysis/launch_geometry.h"
#include "compiler/ir/kernel.h"

namespace tilerun::graph {

struct PdlFacts {
  // Its whole grid is resident at once (blocks <= blocks per SM x SMs): a dependent parked
  // behind a producer with blocks still queued would take their slots.
  bool one_wave = false;
  // No block barriers in the author's program (compiler::launch_traits): only such a kernel is
  // launched early. One with barriers and few, heavy blocks (a matmul tile, a row reduction)
  // placed while its producer still fills the SMs lands several blocks per SM and runs that much
  // slower (the tiny model's forward layers: 20 -> 40 us on the H200 with every edge
  // programmatic).
  bool light = false;
};

// `blocks_per_sm`: the occupancy the driver reports for the kernel at its block size.
PdlFacts pdl_facts(const compiler::Kernel& kernel, const compiler::LaunchGeometry& geometry,
                   int blocks_per_sm, int sms);

// An edge producer -> dependent is programmatic when PDL is on, the producer fits in one wave
// and the dependent is light. Outputs are bit-identical either way (griddepcontrol.wait).
bool programmatic_edge(bool pdl_on, const PdlFacts& producer, const PdlFacts& dependent);

}  // namespace tilerun::graph
