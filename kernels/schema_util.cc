#include "kernels/schema_util.h"

namespace tilerun::kernels {

void expect_float(const TensorType& t, const std::string& slot) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw ShapeError("input '" + slot + "' is " + to_string(t) +
                     ", expected a floating-point tensor (f32, bf16 or f16)");
}

DType float_dtype_attr(const Attrs& attrs, const std::string& attr) {
  const std::string& name = attr_string(attrs, attr);
  std::optional<DType> d = parse_dtype(name);
  if (!d || (*d != DType::F32 && *d != DType::BF16 && *d != DType::F16))
    throw ShapeError("attribute '" + attr + "' is '" + name + "', expected f32, bf16 or f16");
  return *d;
}

void expect_rank(const TensorType& t, size_t rank, const std::string& slot) {
  if (t.shape.size() != rank)
    throw ShapeError("input '" + slot + "' is " + to_string(t) + ", expected rank " +
                     std::to_string(rank));
}

void expect_same(const TensorType& t, const std::string& slot, const TensorType& ref,
                 const std::string& ref_slot) {
  if (!(t == ref))
    throw ShapeError("input '" + slot + "' is " + to_string(t) + ", expected " + to_string(ref) +
                     " like '" + ref_slot + "'");
}

}  // namespace tilerun::kernels
