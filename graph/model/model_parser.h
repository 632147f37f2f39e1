// The model parser behind load_model/parse_model, with the op registry as a parameter so that
// tests can check models written against ops of their own.
#pragma once

#include <string>

#include "kernels/op_registry.h"
#include "tilerun/model.h"

namespace tilerun::graph {

// Parses and checks a model written in YAML (docs/model-format.md) against the ops of
// `registry`. Throws tilerun::Error "file:line:col: error: ..." for every mistake.
Model parse_model(const std::string& yaml_text, const std::string& file_name,
                  const kernels::OpRegistry& registry, const ModelOptions& options = {});

// The largest model text accepted, in bytes; load_model refuses bigger files before reading.
constexpr size_t kMaxModelBytes = size_t{16} << 20;

}  // namespace tilerun::graph
