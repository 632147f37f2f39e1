// Element types of tensors, with their names as written in YAML and in .safetensors files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tilerun {

enum class DType : uint8_t {
  F32,
  BF16,
  F16,
  F8E4M3,  // 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities
  I32,
  I64,
  U8,
  FP4E2M1,  // two E2M1 values per byte, even element in the low nibble; stored as uint8
  E8M0,     // power-of-two scale 2^(e-127), 0xFF = NaN; one byte
  F8E5M2,   // 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like: infinities and NaNs
  Bool,     // false or true, one byte each (0 or 1 as written; any nonzero byte reads as true)
};

// The YAML name: "f32", "bf16", "f16", "f8e4m3", "i32", "i64", "u8", "fp4e2m1", "e8m0", "f8e5m2",
// "bool".
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);
// Bits per element (4 for FP4E2M1).
int dtype_bits(DType t);
bool dtype_is_float(DType t);
// The 8-bit floats the tensor cores multiply: f8e4m3 and f8e5m2.
inline bool dtype_is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }
// Whether tensors of the dtype carry gradients: f32, bf16 and f16. Integers and low-precision
// codes and scales (f8e4m3, f8e5m2, fp4e2m1, e8m0: quantize's outputs, FP4 weights) do not.
bool dtype_is_differentiable(DType t);
// Bytes needed for n elements (packed FP4 rounds up to whole bytes).
int64_t dtype_bytes(DType t, int64_t n);

}  // namespace tilerun
