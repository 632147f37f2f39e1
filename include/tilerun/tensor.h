// Host tensors and .safetensors files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tilerun/dtype.h"

namespace tilerun {

// A dense, row-major, little-endian tensor in host memory.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // exactly dtype_bytes(dtype, numel()) bytes

  int64_t numel() const;
  int64_t nbytes() const { return static_cast<int64_t>(data.size()); }
};

// Elements of a shape (1 for a scalar). Throws tilerun::Error on a negative dimension or a count
// that overflows int64.
int64_t shape_numel(const std::vector<int64_t>& shape);
// "[2, 3]", as shapes appear in messages.
std::string shape_str(const std::vector<int64_t>& shape);

// Tensors by name; ordered, so files and reports never depend on hash order.
using TensorMap = std::map<std::string, HostTensor>;

// Reads every tensor of a .safetensors file. Throws tilerun::Error naming the file and the
// tensor on a malformed header, an unsupported dtype, overlapping or out-of-range offsets, a
// shape that does not match its byte range, or truncated data.
TensorMap read_safetensors(const std::string& path);
// The same, also returning the file's "__metadata__" (without tilerun's own "tilerun.*" keys).
TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata);
// Writes tensors (and optional string metadata) as .safetensors; tensors laid out in name order,
// the same input always giving the same bytes. Packed FP4 is stored as "U8" (last dimension
// halved, so it must be even) and E8M0 as "F8_E8M0"; keys starting "tilerun." are reserved.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tilerun
