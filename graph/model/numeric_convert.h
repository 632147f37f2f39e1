// Conversions between double and tilerun's element types, defined bit for bit so that every
// machine rounds the same way: round to nearest, ties to even, straight from double (never via
// float, which would round twice). Only integer and bit operations, no libm rounding modes.
//
//   f32, bf16, f16    IEEE: overflow to ±inf, NaN to the canonical quiet NaN, gradual underflow.
//   f8e4m3            no infinities: saturates to ±448 (±inf too); NaN to 0x7F.
//   f8e5m2            IEEE-like (f16 with 2 fraction bits): overflow to ±inf, NaN to 0x7E.
//   fp4e2m1           codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6, bit 3 the sign; saturates to ±6;
//                     NaN (which e2m1 cannot hold) to +6, like any out-of-range value.
//   e8m0              2^(e-127), 0xFF = NaN; positive values round to the nearest power of two
//                     (1.5·2^k, the tie, goes up); saturates to 2^-127 (zero and negatives
//                     included, it has neither) and 2^127.
//   i32, i64, u8      nearest integer, ties to even; saturates to the type's range; NaN to 0.
#pragma once

#include <cstdint>

#include "tilerun/dtype.h"

namespace tilerun::graph {

uint32_t round_to_f32_bits(double x);
uint16_t round_to_bf16(double x);
uint16_t round_to_f16(double x);
uint8_t round_to_f8e4m3(double x);
uint8_t round_to_f8e5m2(double x);
uint8_t round_to_fp4e2m1(double x);  // a 4-bit code in the low nibble
uint8_t round_to_e8m0(double x);
int64_t round_to_integer(double x, int64_t lo, int64_t hi);

// Exact values of the codes above.
double f32_bits_to_double(uint32_t bits);
double bf16_to_double(uint16_t bits);
double f16_to_double(uint16_t bits);
double f8e4m3_to_double(uint8_t bits);
double f8e5m2_to_double(uint8_t bits);
double fp4e2m1_to_double(uint8_t code);  // low nibble
double e8m0_to_double(uint8_t bits);

// Element `index` of a dense little-endian buffer of `dtype` (for FP4E2M1 the element, two per
// byte, even element in the low nibble). store_element rounds `value` as above; load_element is
// exact except for i64 values beyond 2^53.
void store_element(DType dtype, uint8_t* data, int64_t index, double value);
double load_element(DType dtype, const uint8_t* data, int64_t index);

}  // namespace tilerun::graph
