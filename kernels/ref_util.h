// Small helpers shared by the op families' double-precision references and gradient rules.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/op_registry.h"

namespace tilerun::kernels {

// A zero tensor of the given shape.
inline RefTensor ref_zeros(std::vector<int64_t> shape) {
  RefTensor t{.shape = std::move(shape)};
  t.data.assign(t.numel(), 0.0);
  return t;
}

// A tensor seen as rows over its last axis: (rows, cols). A scalar is one row of one element.
inline std::pair<int64_t, int64_t> rows_cols(const std::vector<int64_t>& shape) {
  int64_t cols = shape.empty() ? 1 : shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return {rows, cols};
}

// Gradient-rule value names (see GradOp): forward input i, output i, and their gradients.
inline std::string x_name(int i) { return "x" + std::to_string(i); }
inline std::string y_name(int i) { return "y" + std::to_string(i); }
inline std::string dy_name(int i) { return "dy" + std::to_string(i); }
inline std::string dx_name(int i) { return "dx" + std::to_string(i); }

}  // namespace tilerun::kernels
