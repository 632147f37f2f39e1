// The registry as text, one row of cells per op: `tilerun --list-ops` prints it and a test holds
// the op table of docs/model-format.md to it.
#pragma once

#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace tilerun::kernels {

struct OpCatalogRow {
  std::string op;
  std::string inputs;   // "x, gamma"; an optional trailing input ends in '?': "bias?"
  std::string outputs;  // "dx, dgamma"
  std::string attrs;    // "eps: number = 1e-06; axis: integer" (no default: required), or "none"
  std::string dtypes;   // "f32, bf16, f16"
  std::string doc;
};

// One row per op of `registry`, in name order.
std::vector<OpCatalogRow> op_catalog(const OpRegistry& registry);

// An attribute value as a model would write it: 1e-06, true, 3, "name", [1, 2].
std::string attr_value_text(const AttrValue& value);

}  // namespace tilerun::kernels
