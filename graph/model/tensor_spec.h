// The parts of a tensor declaration ({shape: [T, D], dtype: bf16, init: ones}) and the named
// dims its shape refers to, read from located YAML with errors at the offending node.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/model/yaml_util.h"
#include "tilerun/model.h"

namespace tilerun::graph {

// Dims in declaration order, as Model::dims holds them.
using DimList = std::vector<std::pair<std::string, int64_t>>;

// dtype_bytes counts bits in an int64, so a 64-bit tensor may hold at most 2^57 - 1 elements.
constexpr int64_t kMaxNumel = (int64_t{1} << 57) - 1;

// `dims:` — a mapping of identifiers to positive integers.
DimList read_dims(const YamlNode& node);
// A dtype name; `what` says whose ("'dtype'", "the dtype of input 'x'").
DType read_dtype(const YamlNode& node, const std::string& what);
// A sequence of dim names and positive literals; the element count must stay within kMaxNumel.
// Appends each entry as written to `written`.
std::vector<int64_t> read_shape(const YamlNode& node, const std::string& tensor,
                                const DimList& dims, std::vector<std::string>& written);
// zeros | ones | normal | uniform | {normal: {mean, std}} | {uniform: {low, high}} | {constant: v}
Initializer read_init(const YamlNode& node, const std::string& tensor);
// Refuses (at `node`, the init as written) an initialiser whose values `dtype` cannot hold: a
// constant, uniform bounds or a normal's mean and std beyond the type's finite range (1e300 in
// f32 would be inf, 300 in u8 would saturate to 255).
void check_init_range(const YamlNode& node, const Initializer& init, DType dtype,
                      const std::string& tensor);

}  // namespace tilerun::graph
