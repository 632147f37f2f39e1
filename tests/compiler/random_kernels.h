// Random Tile IR programs for property tests (the parser's round trip): a seeded generator that
// drives the builder (compiler/ir/builder.h) through every statement form and most expression
// forms; each seed gives one valid kernel (the same one on every run of one build).
#pragma once

#include <cstdint>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler::testing {

Kernel random_kernel(uint32_t seed);

}  // namespace tilerun::compiler::testing
