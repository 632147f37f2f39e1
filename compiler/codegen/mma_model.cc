#include "compiler/codegen/mma_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/codegen/gemm_desc.h"
#include "compiler/ir/layout.h"

namespace tilerun::compiler {
namespace {

// A finite term as sign * mag * 2^q (mag an integer), or a special value.
struct Term {
  bool neg = false, inf = false, nan = false, subnormal = false;
  uint64_t mag = 0;
  int q = 0;
};

Term decode16(uint16_t h, bool f16) {
  Term t;
  t.neg = h >> 15;
  const int mbits = f16 ? 10 : 7, ebits = f16 ? 5 : 8, bias = f16 ? 15 : 127;
  const int e = (h >> mbits) & ((1 << ebits) - 1), f = h & ((1 << mbits) - 1);
  if (e == (1 << ebits) - 1) {
    t.nan = f != 0;
    t.inf = f == 0;
    return t;
  }
  t.mag = e == 0 ? f : (f | (1 << mbits));
  t.q = (e == 0 ? 1 : e) - bias - mbits;
  t.subnormal = e == 0 && f != 0;
  return t;
}

// An FP8 code: e4m3 (bias 7, no infinities, S.1111.111 the only NaN) or e5m2 (bias 15, IEEE-like
// infinities and NaNs).
Term decode8(uint8_t h, MmaInput f) {
  Term t;
  t.neg = h >> 7;
  const bool e4 = f == MmaInput::E4M3;
  const int mbits = e4 ? 3 : 2, ebits = e4 ? 4 : 5, bias = e4 ? 7 : 15;
  const int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
  if (e4 ? (e == 15 && m == 7) : e == 31) {
    t.nan = e4 || m != 0;
    t.inf = !e4 && m == 0;
    return t;
  }
  t.mag = e == 0 ? m : (m | (1 << mbits));
  t.q = (e == 0 ? 1 : e) - bias - mbits;
  t.subnormal = e == 0 && m != 0;
  return t;
}

// An f32 read as tf32: sign, 8 exponent bits, the 10 leading fraction bits, the 13 low ones
// dropped (toward zero) or, with `round`, rounded to nearest with ties away from zero (a carry
// out of the fraction leaves mag = 2^11, which the alignment reads by its bit length). The
// exponent 255 is a NaN when the kept fraction bits are not all zero, else an infinity: an f32
// NaN whose payload lies in the 13 low bits only reads as an infinity (as the H100 does).
Term decode_tf32(uint32_t u, bool round) {
  Term t;
  t.neg = u >> 31;
  const int e = (u >> 23) & 255;
  const uint32_t f = u & 0x7fffff;
  if (e == 255) {
    t.nan = (f >> 13) != 0;
    t.inf = !t.nan;
    return t;
  }
  uint32_t kept = f >> 13;
  if (round && (f & 0x1000u)) ++kept;
  t.mag = e == 0 ? kept : (kept + (1u << 10));
  t.q = (e == 0 ? 1 : e) - 127 - 10;
  t.subnormal = e == 0 && f != 0;
  return t;
}

// An operand's element at `index` of a tile of format f (16-bit, 8-bit or f32 storage).
Term decode_at(const void* tile, int64_t index, MmaInput f, bool round_tf32) {
  if (f == MmaInput::TF32)
    return decode_tf32(static_cast<const uint32_t*>(tile)[index], round_tf32);
  if (mma_input_is_fp8(f)) return decode8(static_cast<const uint8_t*>(tile)[index], f);
  return decode16(static_cast<const uint16_t*>(tile)[index], f == MmaInput::F16);
}

// A finite value as mag * 2^q with mag odd (or 0), or a special value.
Term decode_double(double v) {
  Term t;
  t.neg = std::signbit(v);
  if (std::isnan(v) || std::isinf(v)) {
    t.nan = std::isnan(v);
    t.inf = std::isinf(v);
    return t;
  }
  if (v == 0) return t;
  int e = 0;
  const double f = std::frexp(std::fabs(v), &e);  // in [0.5, 1)
  uint64_t mag = static_cast<uint64_t>(std::ldexp(f, 53));
  int q = e - 53;
  while (!(mag & 1)) mag >>= 1, ++q;
  t.mag = mag;
  t.q = q;
  return t;
}

Term decode32(float c) {
  uint32_t u;
  std::memcpy(&u, &c, 4);
  Term t;
  t.neg = u >> 31;
  const int e = (u >> 23) & 255;
  const uint32_t f = u & 0x7fffff;
  if (e == 255) {
    t.nan = f != 0;
    t.inf = f == 0;
    return t;
  }
  t.mag = e == 0 ? f : (f | 0x800000u);
  t.q = (e == 0 ? 1 : e) - 127 - 23;
  return t;
}

int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

bool top_overflows(int lsb, int n) { return lsb + n - 1 > 127; }

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// sign * mag * 2^lsb rounded to f32 toward zero, or to nearest even when `nearest`.
float to_f32(bool neg, uint64_t mag, int lsb, bool nearest) {
  int n = bit_length(mag);
  // The bits f32 keeps: 24, fewer where the result is subnormal.
  const int keep = std::min(24, std::max(0, lsb + n - 1 + 149 + 1));
  if (nearest && n > keep) {
    if (keep == 0 && lsb + n - 1 < -150) return from_bits(neg ? 0x80000000u : 0u);
    const int drop = n - keep;
    const uint64_t half = drop >= 1 ? uint64_t{1} << (drop - 1) : 0;
    const uint64_t rest = drop >= 64 ? mag : mag & ((uint64_t{1} << drop) - 1);
    uint64_t kept = drop >= 64 ? 0 : mag >> drop;
    if (rest > half || (rest == half && (kept & 1))) ++kept;
    mag = kept;
    lsb += drop;
    n = bit_length(mag);
    if (top_overflows(lsb, n)) return from_bits(neg ? 0xff800000u : 0x7f800000u);
  }
  if (n > 24) {  // keep the leading 24 bits
    mag >>= n - 24;
    lsb += n - 24;
    n = 24;
  }
  const int top = lsb + n - 1;  // the leading bit's exponent
  uint32_t bits;
  if (top > 127) {
    // Toward zero an overflow stops at the largest finite value; to nearest it is infinite.
    bits = nearest ? 0x7f800000u : 0x7f7fffffu;
  } else if (top < -126) {
    // Subnormal: multiples of 2^-149; shift the rest away (toward zero). A nonzero sum that
    // vanishes comes out +0 whatever its sign (as the H200 does).
    const int shift = -149 - lsb;
    uint64_t m = shift >= 64 ? 0 : shift > 0 ? mag >> shift : mag << -shift;
    if (m == 0) return 0.0f;
    bits = static_cast<uint32_t>(m);
  } else {
    const uint64_t m = mag << (24 - n);  // 24 bits with the leading one
    bits = (static_cast<uint32_t>(top + 127) << 23) | (static_cast<uint32_t>(m) & 0x7fffffu);
  }
  return from_bits(bits | (neg ? 0x80000000u : 0u));
}

// A normal f32 cut toward zero to `bits` significant bits (subnormals, zeros, infinities and NaN
// pass through).
float keep_significant_bits(float v, int bits) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t e = (u >> 23) & 255;
  if (e == 0 || e == 255) return v;
  u &= ~((uint32_t{1} << (24 - bits)) - 1);
  return from_bits(u);
}

}  // namespace

// Fitted to the H200 (bench/RESULTS.md, "Tensor-core model"): every one of 163840 bf16 and
// 163840 f16 outputs of tests/cuda/tensor_core_gpu_test.cc's inputs reproduced.
MmaModel hopper_mma_model() {
  return MmaModel{.group = 16,
                  .frac_bits = 25,
                  .floor_terms = false,
                  .nearest_final = false,
                  .lead_from_exponents = true,
                  .flush_subnormal_inputs = false};
}

// Fitted to the H200 (bench/RESULTS.md, thirty-sixth session) from the 16-bit scheme: the first
// guess (32 products a group, 13 bits below the largest term) missed 4% of the outputs, each by
// bits below the result's 14th significant one; cutting each group's result to 14 significant bits
// reproduced all of them, and no other candidate did.
MmaModel hopper_mma_model_fp8() {
  MmaModel m = hopper_mma_model();
  m.group = 32;
  m.frac_bits = 13;
  m.sum_bits = 14;
  return m;
}

// Fitted on the H100 (bench/RESULTS.md, thirty-ninth session; tests/cuda/tensor_core_gpu_test.cc,
// Tf32ModelMatchesTheGpu): the 16-bit scheme with the k8 instruction's 8 products a group and
// inputs truncated to tf32 (their 13 low bits dropped, a NaN's too) reproduces all 327680 outputs;
// the next candidates (the alignment from the products' own leading bits, or 26 bits kept) miss
// 82 and 775 of 5120.
MmaModel hopper_mma_model_tf32() {
  MmaModel m = hopper_mma_model();
  m.group = 8;
  m.round_tf32_inputs = false;
  return m;
}

namespace {

// One group: the accumulator c and the products x[i] * y[i], i < n, of decoded inputs.
float group_decoded(const MmaModel& model, float c, const Term* x, const Term* y, int n) {
  uint64_t mag[65];
  int q[65], lead[65];  // lead: the exponent alignment uses for the term
  bool neg[65];
  const Term acc = decode32(c);
  bool nan = acc.nan, pos_inf = acc.inf && !acc.neg, neg_inf = acc.inf && acc.neg;
  bool all_neg = acc.neg;  // for a sum of zeros
  mag[0] = acc.mag, q[0] = acc.q, neg[0] = acc.neg;
  lead[0] = acc.q + bit_length(acc.mag) - 1;
  int count = 1;
  for (int i = 0; i < n; ++i) {
    const Term &u = x[i], &w = y[i];
    const bool sign = u.neg != w.neg;
    if (u.nan || w.nan || u.inf || w.inf) {
      const bool u_zero = !u.inf && !u.nan && u.mag == 0, w_zero = !w.inf && !w.nan && w.mag == 0;
      if (u.nan || w.nan || (u.inf && w_zero) || (w.inf && u_zero)) {
        nan = true;
      } else {
        (sign ? neg_inf : pos_inf) = true;
      }
      continue;
    }
    all_neg = all_neg && sign;
    const bool flushed = model.flush_subnormal_inputs && (u.subnormal || w.subnormal);
    mag[count] = flushed ? 0 : u.mag * w.mag, q[count] = u.q + w.q, neg[count] = sign;
    lead[count] = model.lead_from_exponents
                      ? (u.q + bit_length(u.mag) - 1) + (w.q + bit_length(w.mag) - 1)
                      : q[count] + bit_length(mag[count]) - 1;
    ++count;
  }
  if (nan || (pos_inf && neg_inf)) return from_bits(0x7fc00000u);
  if (pos_inf) return from_bits(0x7f800000u);
  if (neg_inf) return from_bits(0xff800000u);
  int emax = std::numeric_limits<int>::min();
  for (int i = 0; i < count; ++i)
    if (mag[i]) emax = std::max(emax, lead[i]);
  // Every term a zero: the IEEE sum's sign (-0 only when all are -0).
  if (emax == std::numeric_limits<int>::min()) return all_neg ? -0.0f : 0.0f;
  // Each term as an integer multiple of 2^lsb, truncated toward zero, summed exactly.
  const int lsb = emax - model.frac_bits;
  int64_t sum = 0;
  for (int i = 0; i < count; ++i) {
    if (!mag[i]) continue;
    const int shift = lsb - q[i];
    const uint64_t m = shift >= 64 ? 0 : shift >= 0 ? mag[i] >> shift : mag[i] << -shift;
    // Floor: a negative term that lost nonzero bits moves one unit further down.
    const bool lost = shift > 0 && (shift >= 64 || (mag[i] & ((uint64_t{1} << shift) - 1)));
    const int64_t v = static_cast<int64_t>(m);
    sum += neg[i] ? -v - (model.floor_terms && lost ? 1 : 0) : v;
  }
  if (sum == 0) return 0.0f;
  const float r =
      to_f32(sum < 0, static_cast<uint64_t>(sum < 0 ? -sum : sum), lsb, model.nearest_final);
  return model.sum_bits < 24 ? keep_significant_bits(r, model.sum_bits) : r;
}

float dot_decoded(const MmaModel& model, float c, const Term* x, const Term* y, int64_t k) {
  for (int64_t k0 = 0; k0 < k; k0 += model.group)
    c = group_decoded(model, c, x + k0, y + k0,
                      static_cast<int>(std::min<int64_t>(model.group, k - k0)));
  return c;
}

}  // namespace

float mma_group(const MmaModel& model, float c, const uint16_t* a, const uint16_t* b, int n,
                bool f16) {
  Term x[64], y[64];
  for (int i = 0; i < n; ++i) x[i] = decode16(a[i], f16), y[i] = decode16(b[i], f16);
  return group_decoded(model, c, x, y, n);
}

namespace {
// The dot product of k input pairs, pair(i) giving the decoded a[i] and b[i]: what the three
// entry points below share (they differ only in how an input is read).
template <class Pair>
float dot_of(const MmaModel& model, float c, int64_t k, const Pair& pair) {
  std::vector<Term> x(static_cast<size_t>(k)), y(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) std::tie(x[i], y[i]) = pair(i);
  return dot_decoded(model, c, x.data(), y.data(), k);
}
}  // namespace

float mma_dot(const MmaModel& model, float c, const uint16_t* a, int64_t a_stride,
              const uint16_t* b, int64_t b_stride, int64_t k, bool f16) {
  return dot_of(model, c, k, [&](int64_t i) {
    return std::pair{decode16(a[i * a_stride], f16), decode16(b[i * b_stride], f16)};
  });
}

float mma_dot8(const MmaModel& model, float c, const uint8_t* a, int64_t a_stride, MmaInput fa,
               const uint8_t* b, int64_t b_stride, MmaInput fb, int64_t k) {
  return dot_of(model, c, k, [&](int64_t i) {
    return std::pair{decode8(a[i * a_stride], fa), decode8(b[i * b_stride], fb)};
  });
}

float mma_dot_tf32(const MmaModel& model, float c, const float* a, int64_t a_stride, const float* b,
                   int64_t b_stride, int64_t k) {
  auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  return dot_of(model, c, k, [&](int64_t i) {
    return std::pair{decode_tf32(bits(a[i * a_stride]), model.round_tf32_inputs),
                     decode_tf32(bits(b[i * b_stride]), model.round_tf32_inputs)};
  });
}

float mma_dot_values(const MmaModel& model, float c, const double* a, int64_t a_stride,
                     const double* b, int64_t b_stride, int64_t k) {
  return dot_of(model, c, k, [&](int64_t i) {
    return std::pair{decode_double(a[i * a_stride]), decode_double(b[i * b_stride])};
  });
}

}  // namespace tilerun::compiler

extern "C" void tilerun_cpu_gemm(float* acc, const void* a, const void* b, const int64_t* desc) {
  using namespace tilerun::compiler;
  const GemmDesc g = GemmDesc::decode(desc);
  const Layout tv = wgmma_accumulator_layout(g.m, g.n, g.threads);
  const ComposedLayout la{g.a_swizzle, g.a_layout}, lb{g.b_swizzle, g.b_layout};
  const MmaModel model = hopper_mma_model_for(g.a_input);
  const int64_t values = g.m * g.n / g.threads;
  // The tiles as op(a) rows [m][k] and op(b) columns [n][k], each k-contiguous: the tile's 2-d
  // layout, then its swizzle.
  auto offset = [](const ComposedLayout& l, int64_t r, int64_t c) {
    return l.swizzle(r * l.layout.stride[0] + c * l.layout.stride[1]);
  };
  // A transposed a: [k, m], or m's panels [m / w, k, w] laid out as [m / w * k, w] (gemm_desc's
  // a_layout then has w < m columns): element (kk, i) is row (i / w) k + kk, column i % w.
  const int64_t a_width = g.a_layout.shape[1];
  auto a_row = [&](int64_t i, int64_t kk) { return (i / a_width) * g.k + kk; };
  std::vector<Term> rows(static_cast<size_t>(g.m * g.k)), cols(static_cast<size_t>(g.n * g.k));
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t kk = 0; kk < g.k; ++kk)
      rows[i * g.k + kk] =
          decode_at(a, g.trans_a ? offset(la, a_row(i, kk), i % a_width) : offset(la, i, kk),
                    g.a_input, model.round_tf32_inputs);
  // An N-major b: [k, n], or n's panels [n / w, k, w] laid out as [n / w * k, w].
  const int64_t b_width = g.b_layout.shape[1];
  auto b_row = [&](int64_t j, int64_t kk) { return (j / b_width) * g.k + kk; };
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t kk = 0; kk < g.k; ++kk)
      cols[j * g.k + kk] =
          decode_at(b, g.trans_b ? offset(lb, j, kk) : offset(lb, b_row(j, kk), j % b_width),
                    g.b_input, model.round_tf32_inputs);
  for (int64_t t = 0; t < g.threads; ++t)
    for (int64_t v = 0; v < values; ++v) {
      const int64_t lin = tv(t + g.threads * v), i = lin / g.n, j = lin % g.n;
      float& c = acc[t * values + v];
      c = dot_decoded(model, c, &rows[i * g.k], &cols[j * g.k], g.k);
    }
}
