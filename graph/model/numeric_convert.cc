#include "graph/model/numeric_convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "compiler/base/check.h"

namespace tilerun::graph {

namespace {

constexpr uint64_t kSignBit = uint64_t{1} << 63;
constexpr uint64_t kDoubleInf = 0x7FF0000000000000;

// m >> shift (shift > 0), rounded to nearest, ties to even.
uint64_t shift_right_rne(uint64_t m, int shift) {
  if (shift > 63) return 0;  // m < 2^53 stays below half of the last kept bit's weight
  uint64_t kept = m >> shift;
  uint64_t rest = m & ((uint64_t{1} << shift) - 1);
  uint64_t half = uint64_t{1} << (shift - 1);
  if (rest > half || (rest == half && (kept & 1))) ++kept;
  return kept;
}

// A binary float format: `man` fraction bits; normal exponents emin..emax, subnormals below.
struct Format {
  int man;
  int emin;
  int emax;
};

// Rounds a finite nonzero-or-zero magnitude (double bits without the sign) onto the format's
// grid. Returns (biased exponent << man) | fraction, with biased exponent 0 for subnormals and
// emin ↦ 1; or -1 when the rounded value's exponent exceeds emax.
int64_t round_magnitude(uint64_t abs_bits, Format f) {
  if (abs_bits == 0) return 0;
  // |x| = m · 2^e exactly, m < 2^53.
  int biased_in = static_cast<int>(abs_bits >> 52);
  uint64_t m = abs_bits & ((uint64_t{1} << 52) - 1);
  int e = -1074;
  if (biased_in != 0) {
    m |= uint64_t{1} << 52;
    e = biased_in - 1075;
  }
  int log2_floor = e + 63 - std::countl_zero(m);
  // q is the weight of the result's last bit: fixed at emin - man below the normal range,
  // which is what makes underflow gradual.
  int q = std::max(log2_floor, f.emin) - f.man;
  uint64_t n = q <= e ? m << (e - q) : shift_right_rne(m, q - e);
  if (n >> (f.man + 1)) {  // rounding carried into the next binade (n == 2^(man+1), exact)
    n >>= 1;
    ++q;
  }
  uint64_t implicit = uint64_t{1} << f.man;
  if (n < implicit) return static_cast<int64_t>(n);  // subnormal (or rounded to zero)
  int exp = q + f.man;
  if (exp > f.emax) return -1;
  int64_t biased = exp - f.emin + 1;
  return (biased << f.man) | static_cast<int64_t>(n - implicit);
}

// How a format treats what it cannot hold.
struct Encoding {
  Format format;
  int sign_shift;
  uint32_t max_code;     // largest finite magnitude code
  uint32_t on_overflow;  // magnitude code for values above it: infinity, or max_code to saturate
  uint32_t nan;          // the whole code for NaN
};

uint32_t encode(double x, const Encoding& enc) {
  uint64_t bits = std::bit_cast<uint64_t>(x);
  uint64_t abs_bits = bits & ~kSignBit;
  if (abs_bits > kDoubleInf) return enc.nan;
  uint32_t sign = static_cast<uint32_t>(bits >> 63) << enc.sign_shift;
  if (abs_bits == kDoubleInf) return sign | enc.on_overflow;
  int64_t r = round_magnitude(abs_bits, enc.format);
  if (r < 0 || r > enc.max_code) return sign | enc.on_overflow;
  return sign | static_cast<uint32_t>(r);
}

constexpr Encoding kF32 = {{23, -126, 127}, 31, 0x7F7FFFFF, 0x7F800000, 0x7FC00000};
constexpr Encoding kBF16 = {{7, -126, 127}, 15, 0x7F7F, 0x7F80, 0x7FC0};
constexpr Encoding kF16 = {{10, -14, 15}, 15, 0x7BFF, 0x7C00, 0x7E00};
// 0x7F would be exponent 8 with fraction 7, which e4m3 spends on NaN: max_code stops below it.
constexpr Encoding kF8E4M3 = {{3, -6, 8}, 7, 0x7E, 0x7E, 0x7F};
// e5m2 is f16 with 8 fewer fraction bits: overflow gives infinity, NaN is canonical (0x7E).
constexpr Encoding kF8E5M2 = {{2, -14, 15}, 7, 0x7B, 0x7C, 0x7E};
constexpr Encoding kFP4E2M1 = {{1, 0, 2}, 3, 0x7, 0x7, 0x7};

// The finite value of an IEEE-like code (sign bit above `exp_bits` exponent bits).
double decode_finite(uint32_t code, int man, int exp_bits, int bias) {
  uint32_t frac = code & ((1u << man) - 1);
  int biased = static_cast<int>((code >> man) & ((1u << exp_bits) - 1));
  double mag = biased == 0 ? std::ldexp(frac, 1 - bias - man)
                           : std::ldexp(frac + (1u << man), biased - bias - man);
  return (code >> (man + exp_bits)) & 1 ? -mag : mag;
}

void put_le(uint8_t* p, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

uint32_t round_to_f32_bits(double x) { return encode(x, kF32); }
uint16_t round_to_bf16(double x) { return static_cast<uint16_t>(encode(x, kBF16)); }
uint16_t round_to_f16(double x) { return static_cast<uint16_t>(encode(x, kF16)); }
uint8_t round_to_f8e4m3(double x) { return static_cast<uint8_t>(encode(x, kF8E4M3)); }
uint8_t round_to_f8e5m2(double x) { return static_cast<uint8_t>(encode(x, kF8E5M2)); }
uint8_t round_to_fp4e2m1(double x) { return static_cast<uint8_t>(encode(x, kFP4E2M1)); }

uint8_t round_to_e8m0(double x) {
  if (std::isnan(x)) return 0xFF;
  if (!(x > 0)) return 0x00;
  if (std::isinf(x)) return 0xFE;
  // With no fraction bits, "round to nearest" picks between 2^k and 2^(k+1); the grid code is
  // the exponent + 128 (0 when x rounds below 2^-127).
  int64_t r = round_magnitude(std::bit_cast<uint64_t>(x), {0, -127, 127});
  if (r < 0) return 0xFE;
  return static_cast<uint8_t>(std::max<int64_t>(r - 1, 0));
}

int64_t round_to_integer(double x, int64_t lo, int64_t hi) {
  if (std::isnan(x)) return 0;
  // double(hi) may round up (2^63 for int64): anything at or above it is out of range anyway.
  if (x >= static_cast<double>(hi)) return hi;
  if (x <= static_cast<double>(lo)) return lo;
  uint64_t abs_bits = std::bit_cast<uint64_t>(x) & ~kSignBit;
  if (abs_bits == 0) return 0;
  int biased = static_cast<int>(abs_bits >> 52);
  uint64_t m = abs_bits & ((uint64_t{1} << 52) - 1);
  int e = -1074;
  if (biased != 0) {
    m |= uint64_t{1} << 52;
    e = biased - 1075;
  }
  // |x| < 2^63 here, so the left shift cannot overflow.
  uint64_t n = e >= 0 ? m << e : shift_right_rne(m, -e);
  int64_t v = static_cast<int64_t>(n);
  return std::clamp(x < 0 ? -v : v, lo, hi);
}

double f32_bits_to_double(uint32_t bits) { return std::bit_cast<float>(bits); }
double bf16_to_double(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

double f16_to_double(uint16_t bits) {
  if ((bits & 0x7C00) == 0x7C00) {
    double inf = std::numeric_limits<double>::infinity();
    if (bits & 0x3FF) return std::numeric_limits<double>::quiet_NaN();
    return bits & 0x8000 ? -inf : inf;
  }
  return decode_finite(bits, 10, 5, 15);
}

double f8e4m3_to_double(uint8_t bits) {
  if ((bits & 0x7F) == 0x7F) return std::numeric_limits<double>::quiet_NaN();
  return decode_finite(bits, 3, 4, 7);
}

double f8e5m2_to_double(uint8_t bits) {
  if ((bits & 0x7C) == 0x7C) {
    if (bits & 0x3) return std::numeric_limits<double>::quiet_NaN();
    return bits & 0x80 ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
  }
  return decode_finite(bits, 2, 5, 15);
}

double fp4e2m1_to_double(uint8_t code) { return decode_finite(code & 0xF, 1, 2, 1); }

double e8m0_to_double(uint8_t bits) {
  if (bits == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, bits - 127);
}

void store_element(DType dtype, uint8_t* data, int64_t index, double value) {
  switch (dtype) {
    case DType::F32:
      return put_le(data + 4 * index, round_to_f32_bits(value), 4);
    case DType::BF16:
      return put_le(data + 2 * index, round_to_bf16(value), 2);
    case DType::F16:
      return put_le(data + 2 * index, round_to_f16(value), 2);
    case DType::F8E4M3:
      data[index] = round_to_f8e4m3(value);
      return;
    case DType::F8E5M2:
      data[index] = round_to_f8e5m2(value);
      return;
    case DType::E8M0:
      data[index] = round_to_e8m0(value);
      return;
    case DType::I32: {
      int64_t v = round_to_integer(value, std::numeric_limits<int32_t>::min(),
                                   std::numeric_limits<int32_t>::max());
      return put_le(data + 4 * index, static_cast<uint64_t>(v), 4);
    }
    case DType::I64: {
      int64_t v = round_to_integer(value, std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max());
      return put_le(data + 8 * index, static_cast<uint64_t>(v), 8);
    }
    case DType::U8:
      data[index] = static_cast<uint8_t>(round_to_integer(value, 0, 255));
      return;
    case DType::Bool:  // rounded to an integer as the integer types are (ties to even), then
                       // nonzero (NaN included) is true: uniform [0, 1) gives fair coin flips
      data[index] = std::isnan(value) || std::nearbyint(value) != 0 ? 1 : 0;
      return;
    case DType::FP4E2M1: {
      uint8_t& byte = data[index / 2];
      int shift = index % 2 ? 4 : 0;
      byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | (round_to_fp4e2m1(value) << shift));
      return;
    }
  }
  TR_CHECK(false, "unhandled dtype");
}

double load_element(DType dtype, const uint8_t* data, int64_t index) {
  switch (dtype) {
    case DType::F32:
      return f32_bits_to_double(static_cast<uint32_t>(get_le(data + 4 * index, 4)));
    case DType::BF16:
      return bf16_to_double(static_cast<uint16_t>(get_le(data + 2 * index, 2)));
    case DType::F16:
      return f16_to_double(static_cast<uint16_t>(get_le(data + 2 * index, 2)));
    case DType::F8E4M3:
      return f8e4m3_to_double(data[index]);
    case DType::F8E5M2:
      return f8e5m2_to_double(data[index]);
    case DType::E8M0:
      return e8m0_to_double(data[index]);
    case DType::I32:
      return static_cast<int32_t>(static_cast<uint32_t>(get_le(data + 4 * index, 4)));
    case DType::I64:
      return static_cast<double>(static_cast<int64_t>(get_le(data + 8 * index, 8)));
    case DType::U8:
      return data[index];
    case DType::Bool:
      return data[index] != 0 ? 1 : 0;
    case DType::FP4E2M1:
      return fp4e2m1_to_double(static_cast<uint8_t>(data[index / 2] >> (index % 2 ? 4 : 0)));
  }
  TR_CHECK(false, "unhandled dtype");
  return 0;
}

}  // namespace tilerun::graph
