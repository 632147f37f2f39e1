// Small checks shared by the op families' inference functions; each throws ShapeError with a
// message naming the input slot and what was expected.
#pragma once

#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace tilerun::kernels {

// Input `slot` must be a floating-point tensor.
void expect_float(const TensorType& t, const std::string& slot);
// Input `slot` must have exactly `rank` dims.
void expect_rank(const TensorType& t, size_t rank, const std::string& slot);
// The float dtype named by String attribute `attr` ("f32", "bf16", "f16").
DType float_dtype_attr(const Attrs& attrs, const std::string& attr);
// Input `slot` must have the same dtype and shape as `ref` (named `ref_slot`).
void expect_same(const TensorType& t, const std::string& slot, const TensorType& ref,
                 const std::string& ref_slot);

}  // namespace tilerun::kernels
