#include "tilerun/dtype.h"

#include <array>

namespace tilerun {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
  bool is_float;
};
constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {DType::F32, "f32", 32, true},
    {DType::BF16, "bf16", 16, true},
    {DType::F16, "f16", 16, true},
    {DType::F8E4M3, "f8e4m3", 8, true},
    {DType::I32, "i32", 32, false},
    {DType::I64, "i64", 64, false},
    {DType::U8, "u8", 8, false},
    {DType::FP4E2M1, "fp4e2m1", 4, true},
    {DType::E8M0, "e8m0", 8, true},
    {DType::F8E5M2, "f8e5m2", 8, true},
    {DType::Bool, "bool", 8, false},
}};
const DTypeInfo& info(DType t) { return kDTypes[static_cast<size_t>(t)]; }
}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
int dtype_bits(DType t) { return info(t).bits; }
bool dtype_is_float(DType t) { return info(t).is_float; }
bool dtype_is_differentiable(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}
int64_t dtype_bytes(DType t, int64_t n) { return (n * info(t).bits + 7) / 8; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

}  // namespace tilerun
