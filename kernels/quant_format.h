// The low-precision formats of the quantize family (kernels/quantize.cc: fake_quant,
// kernels/block_quant.cc: quantize, dequantize): a format's rounding for the double references,
// and the Tile IR pieces every kernel of the family builds its block scales from. One definition,
// so a quantize followed by a dequantize gives fake_quant's bits wherever their scales agree.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "kernels/op_registry.h"

namespace tilerun::kernels::quant {

namespace cc = tilerun::compiler;

// A format's rounding in the reference: significand digits, smallest normal exponent, largest
// finite magnitude, and whether an overflow saturates (else it is inf).
struct Format {
  DType dtype;
  int digits, emin;
  double max;
  bool saturates;
};

// "f8e4m3", "f8e5m2" or "fp4e2m1"; anything else is a ShapeError naming attribute `attr`.
Format format_named(const std::string& name, const std::string& attr = "format");

// ---- References (double arithmetic rounded to f32 where the kernels round) ------------------

inline double f32(double v) { return static_cast<double>(static_cast<float>(v)); }
// v (an f32 value) rounded to the format: nearest even, subnormals below 2^emin. e2m1 has no
// NaN: a NaN gives +max, as the kernels' rounding (narrow_float.h) and the fp4 store do.
double round_format(double v, const Format& f);
// The smallest power of two >= s (s finite and > 0).
double ceil_pow2(double s);
// UE8M0's scale for a quotient s >= 0 (not NaN): ceil_pow2(s) within [2^-127, 2^127].
double clamp_pow2(double s);
// max |x| over x[begin, end) with a stride: NaN if any element is NaN.
double amax(const double* x, int64_t count, int64_t stride = 1);

// ---- Kernel pieces ---------------------------------------------------------------------------

inline cc::Val bits(const cc::Val& x) { return cc::bitcast(cc::Type::I32, x); }
inline cc::Val from_bits(const cc::Val& b) { return cc::bitcast(cc::Type::F32, b); }
inline cc::Val i32(int64_t v) { return cc::literal(cc::Type::I32, v); }

// The smallest power of two >= s for a finite s > 0 (inf and NaN pass through).
cc::Val ceil_pow2(cc::Scope& s, const cc::Val& x);
// |x| as i32 bits. Non-negative floats order as their bits and a NaN's bits are above every one
// of them, so an integer max of these is max |x| with NaN sticking (any NaN gives a NaN).
inline cc::Val magnitude(const cc::Val& x) { return bits(x) & i32(0x7fffffff); }
// span_max(r, g) = max of mag(r, g·span + k) over k < span, for each of rows × spans (i32
// magnitudes staged in shared memory, the maxima shared too), a thread each, then a barrier: the
// first step of the tiled kernels' block amax (`fragment` names the thread's running max).
void fold_spans(cc::Scope& s, const cc::Buf& mag, const cc::Buf& span_max, int64_t rows,
                int64_t spans, int64_t span, const std::string& fragment);
// amax / max_finite(format) in f32 (1 when amax = 0); pow2: the next power of two up, within
// UE8M0's [2^-127, 2^127].
cc::Val block_scale(cc::Scope& s, const cc::Val& amax, const Format& f, bool pow2);

// A row's x / scale. With a power-of-two scale it is (x * pre) * post, one rounding, the same
// bits, two multiplies instead of a division per element: for a normal scale, pre = 1 and post =
// 1/scale is exact (2^-127, a subnormal, for 2^127); for a subnormal one (its reciprocal beyond
// f32), pre = 2^64 is exact on x (|x| <= amax < 2^-117 there) and post = 1/(scale * 2^64) is
// exact; a scale of 0, inf or NaN gives post = inf, 0 or NaN, so x * post is x / scale.
struct Divisor {
  cc::Val scale, pre, post;
  bool pow2;
  cc::Val divide(const cc::Val& x) const { return pow2 ? x * pre * post : x / scale; }
};
Divisor divisor(cc::Scope& s, const cc::Val& scale, bool pow2);

// ---- A fake_quant in a row kernel's epilogue (graph/fold_quant.h) --------------------------

// fake_quant's parameters as a row kernel takes them: the format, power-of-two scales or not,
// the block, and how many of a row's `per_row` blocks are rounded (the first `rounded`; the rest
// copied, fake_quant's `extent`).
struct RowQuant {
  std::string format;
  Format f;
  bool pow2;
  int64_t block, per_row, rounded;
  bool all() const { return rounded == per_row; }
  // "_fq_f8e4m3_b128" (with "_ue8m0" after the format and "_x7of8" at the end where they apply):
  // every parameter, so two epilogues never share a kernel name.
  std::string name() const;
};

// The attributes a fold gives the op (quant_format, quant_block, quant_scale, quant_extent:
// the fake_quant's format, block, scale and extent), for the schemas of the ops that take them.
std::vector<AttrSpec> row_quant_attrs();
// The op's epilogue for rows of `row` elements: nullopt when quant_format is empty; a ShapeError
// naming the attribute as fake_quant's inference would otherwise.
std::optional<RowQuant> row_quant_of(const Attrs& attrs, int64_t row);
// The fake_quant attributes as the epilogue's (format -> quant_format, ...), added to `attrs`.
void add_row_quant(Attrs& attrs, const Attrs& fake_quant_attrs);

// The double reference: fake_quant of each row of the last axis of y, in place.
void ref_quantize_rows(RefTensor& y, const RowQuant& q);

// The kernel piece: each block's scale of the rows of a shared tile [rows, d] holding the values
// as stored (rounded to the output dtype), computed as fake_quant's tiled kernel does (the
// magnitudes folded in spans of 8, then a block's spans by one thread); ready after the call's
// last barrier. value(r, j, x) is then what fake_quant writes for the element x at (r, j).
struct RowScales {
  RowQuant q;
  compiler::Buf scales, pres, posts;  // shared f32 [rows, per_row]
  cc::Val value(cc::Scope& s, const cc::Idx& r, const cc::Idx& j, const cc::Val& x) const;
};
RowScales row_scales(cc::Scope& s, const compiler::Buf& tile, int64_t rows, int64_t d,
                     const RowQuant& q);
// The shared bytes row_scales allocates for `rows` rows of d.
int64_t row_scales_bytes(int64_t rows, int64_t d, const RowQuant& q);

}  // namespace tilerun::kernels::quant
