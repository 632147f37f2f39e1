#include "tilerun/tensor.h"

#include <algorithm>
#include <limits>

#include "tilerun/error.h"

namespace tilerun {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
    throw Error("shape " + shape_str(shape) + " has a negative dimension");
  // An empty tensor is empty whatever its other dims are, so a zero anywhere wins over overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (n > std::numeric_limits<int64_t>::max() / d)
      throw Error("shape " + shape_str(shape) + " has more elements than fit in int64");
    n *= d;
  }
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t HostTensor::numel() const { return shape_numel(shape); }

}  // namespace tilerun
