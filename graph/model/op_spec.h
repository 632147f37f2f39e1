// One op entry of a layer as written ({op: matmul, in: [h, w1], out: a, transpose_b: true}),
// checked against the op's schema: its input and output counts and its attributes (types
// checked, defaults filled). Tensor names are resolved later, once per repetition.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/model/yaml_util.h"
#include "kernels/op_registry.h"

namespace tilerun::graph {

struct OpSpec {
  const kernels::OpSchema* schema = nullptr;
  std::vector<const YamlNode*> inputs;   // scalars naming tensors, as written
  std::vector<const YamlNode*> outputs;  // scalars holding local identifiers
  Attrs attrs;                           // validated, defaults filled
  SourceLoc loc;                         // the op's mapping
};

// Reads `node` (op `index` of `layer`, both for error messages). An integer attribute may also
// be given as the name of one of `dims`.
OpSpec parse_op_spec(const YamlNode& node, size_t index, const std::string& layer,
                     const kernels::OpRegistry& registry,
                     const std::map<std::string, int64_t>& dims);

// How an op-like entry is written where it is not a layer's op (a loss term): messages say
// `prefix (type)suffix`; the type is under `type_key`; `extra_keys` are the caller's to read; an
// entry without outputs has no `out` key.
struct OpSpecForm {
  std::string prefix, suffix;
  std::string type_key = "op";
  std::vector<std::string> extra_keys = {};
  bool has_outputs = true;
};
OpSpec parse_op_spec(const YamlNode& node, const OpSpecForm& form,
                     const kernels::OpRegistry& registry,
                     const std::map<std::string, int64_t>& dims);

}  // namespace tilerun::graph
