// Small helpers for the op families' kernel expansions (OpSchema::expand).
#pragma once

#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace tilerun::kernels {

using ExpandFn = decltype(OpSchema::expand);

// Bindings of a kernel buffer parameter to the op's input, output or scratch slot i.
inline KernelArg input_slot(int i) { return {KernelArg::Kind::Input, i}; }
inline KernelArg output_slot(int i) { return {KernelArg::Kind::Output, i}; }
inline KernelArg scratch_slot(int i) { return {KernelArg::Kind::Scratch, i}; }

inline int64_t numel(const TensorType& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// The cache key of a family's kernel `name` for element type `dtype`: "silu.f32".
inline std::string kernel_key(const std::string& name, DType dtype) {
  return name + "." + std::string(dtype_name(dtype));
}

}  // namespace tilerun::kernels
