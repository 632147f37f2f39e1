// graph/model/safetensors: the .safetensors reader with a hook between the header and the data,
// so a caller can refuse a file by its header (names, dtypes, shapes) before any tensor data is
// allocated or read: a header that promises gigabytes costs nothing when it does not fit the
// model. read_safetensors (include/tilerun/tensor.h) is this without the hook.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tilerun/tensor.h"

namespace tilerun::graph {

// One tensor as the header describes it (dtype restored from tilerun's metadata).
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Parses and checks the header, calls `check_header` (when given) with every entry, then reads
// the data. Throws tilerun::Error naming the file, as read_safetensors does.
TensorMap read_safetensors_checked(
    const std::string& path, std::map<std::string, std::string>* metadata,
    const std::function<void(const std::vector<SafetensorsEntry>&)>& check_header);

}  // namespace tilerun::graph
