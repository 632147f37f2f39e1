#include "kernels/quant_format.h"

#include <algorithm>
#include <cmath>

#include "compiler/transforms/narrow_float.h"
#include "kernels/ref_values.h"

namespace tilerun::kernels::quant {

Format format_named(const std::string& name, const std::string& attr) {
  if (name == "f8e4m3") return {DType::F8E4M3, 4, -6, 448.0, true};
  if (name == "f8e5m2") return {DType::F8E5M2, 3, -14, 57344.0, false};
  if (name == "fp4e2m1") return {DType::FP4E2M1, 2, 0, 6.0, true};
  throw ShapeError("attribute '" + attr + "' is '" + name +
                   "', expected one of f8e4m3, f8e5m2, fp4e2m1");
}

double round_format(double v, const Format& f) {
  if (std::isnan(v) && f.dtype == DType::FP4E2M1) return f.max;
  if (!std::isfinite(v) || v == 0) {
    if (std::isinf(v) && f.saturates) return std::copysign(f.max, v);
    return v;
  }
  int e = std::max(std::ilogb(v), f.emin);
  double quantum = std::ldexp(1.0, e - (f.digits - 1));
  double r = std::nearbyint(v / quantum) * quantum;
  if (std::abs(r) > f.max) return f.saturates ? std::copysign(f.max, v) : std::copysign(kInf(), v);
  return r;
}

double ceil_pow2(double s) {
  int e = 0;
  double m = std::frexp(s, &e);  // s = m·2^e, m in [0.5, 1)
  return m == 0.5 ? s : std::ldexp(1.0, e);
}

double clamp_pow2(double s) {
  if (s <= 0x1p-127) return 0x1p-127;  // also a quotient that underflowed to 0
  return s >= 0x1p127 ? 0x1p127 : ceil_pow2(s);
}

double amax(const double* x, int64_t count, int64_t stride) {
  double m = 0;
  for (int64_t j = 0; j < count; ++j) {
    double a = std::abs(x[j * stride]);
    m = std::isnan(a) || std::isnan(m) ? kNaN() : std::max(m, a);
  }
  return m;
}

// A normal s with a fraction moves to the next exponent; a subnormal one is scaled by 2^64
// first (exact).
cc::Val ceil_pow2(cc::Scope& s, const cc::Val& x) {
  cc::Val e = s.let(cc::shr_logical(bits(x), i32(23)) & i32(0xff), "se");
  cc::Val t = s.let(cc::select(e == i32(0), x * 0x1p64f, x), "st");
  cc::Val tb = s.let(bits(t), "stb");
  cc::Val up = from_bits(cc::shl((cc::shr_logical(tb, i32(23)) & i32(0xff)) + i32(1), i32(23)));
  cc::Val r = s.let(cc::select((tb & i32(0x7fffff)) == i32(0), t, up), "sr");
  cc::Val back = cc::select(e == i32(0), r * 0x1p-64f, r);
  return cc::select(e == i32(0xff) || x == 0.0f, x, back);
}

void fold_spans(cc::Scope& s, const cc::Buf& mag, const cc::Buf& span_max, int64_t rows,
                int64_t spans, int64_t span, const std::string& fragment) {
  cc::Buf m = s.alloc_fragment(fragment, DType::I32, {rows, spans});
  s.annotate_layout(1);
  s.parallel(rows, spans, [&](cc::Idx r, cc::Idx g) {
    m(r, g) = i32(0);
    s.serial(span, [&](cc::Idx k) { m(r, g) = cc::max(m(r, g), mag(r, g * span + k)); });
    span_max(r, g) = m(r, g);
  });
  s.barrier();
}

cc::Val block_scale(cc::Scope& s, const cc::Val& amax, const Format& f, bool pow2) {
  cc::Val q = s.let(amax / static_cast<float>(f.max), "q");
  cc::Val scale = s.let(cc::select(amax == 0.0f, cc::Val(1.0f), q), "scale");
  if (!pow2) return scale;
  // Within UE8M0's [2^-127, 2^127] (a quotient that underflowed to 0 too), so that the scale is
  // one a stored e8m0 holds: quantize's e8m0 scales are these, and its codes times them are
  // this rounding's values (graph/fold_fp4_weights.h). NaN passes through.
  cc::Val p = s.let(ceil_pow2(s, scale), "scale2");
  cc::Val lo = cc::select(p < 0x1p-127f, cc::Val(0x1p-127f), p);
  return s.let(cc::select(p > 0x1p127f, cc::Val(0x1p127f), lo), "scale3");
}

Divisor divisor(cc::Scope& s, const cc::Val& scale, bool pow2) {
  if (!pow2) return {scale, cc::Val(), cc::Val(), false};
  cc::Val subnormal = (bits(scale) & i32(0x7f800000)) == i32(0);
  cc::Val pre = s.let(cc::select(subnormal, cc::Val(0x1p64f), cc::Val(1.0f)), "pre");
  return {scale, pre, s.let(1.0f / (scale * pre), "post"), true};
}

}  // namespace tilerun::kernels::quant

namespace tilerun::kernels::quant {

namespace {

// An attribute of the epilogue, or `fallback` when the op has none (ops built by gradient rules).
const AttrValue* find(const Attrs& attrs, const std::string& name) {
  auto it = attrs.find(name);
  return it == attrs.end() ? nullptr : &it->second;
}

constexpr int64_t kSpan = 8;  // magnitudes one thread folds (fake_quant's tiled kernel's span)

int64_t span_of(const RowQuant& q) { return q.block % kSpan == 0 ? kSpan : q.block; }

}  // namespace

std::string RowQuant::name() const {
  return "_fq_" + format + (pow2 ? "_ue8m0" : "") + "_b" + std::to_string(block) +
         (all() ? "" : "_x" + std::to_string(rounded) + "of" + std::to_string(per_row));
}

std::vector<AttrSpec> row_quant_attrs() {
  return {{.name = "quant_format",
           .kind = AttrKind::String,
           .default_value = std::string(),
           .doc = "a fake_quant of the output in the same kernel (graph/fold_quant sets it from "
                  "a single-use fake_quant after the op): its format; empty: none"},
          {.name = "quant_block",
           .kind = AttrKind::Int,
           .default_value = int64_t{128},
           .doc = "the fused fake_quant's block"},
          {.name = "quant_scale",
           .kind = AttrKind::String,
           .default_value = std::string("f32"),
           .doc = "the fused fake_quant's scale (f32 or ue8m0)"},
          {.name = "quant_extent",
           .kind = AttrKind::Int,
           .default_value = int64_t{0},
           .doc = "the fused fake_quant's extent (0: the whole row)"}};
}

std::optional<RowQuant> row_quant_of(const Attrs& attrs, int64_t row) {
  const AttrValue* fmt = find(attrs, "quant_format");
  if (fmt == nullptr || std::get<std::string>(*fmt).empty()) return std::nullopt;
  RowQuant q{.format = std::get<std::string>(*fmt)};
  q.f = format_named(q.format, "quant_format");
  const std::string& scale = attr_string(attrs, "quant_scale");
  if (scale != "f32" && scale != "ue8m0")
    throw ShapeError("attribute 'quant_scale' is '" + scale + "', expected f32 or ue8m0");
  q.pow2 = scale == "ue8m0";
  q.block = attr_int(attrs, "quant_block");
  const int64_t extent = attr_int(attrs, "quant_extent");
  if (q.block < 1 || row % q.block != 0)
    throw ShapeError("attribute 'quant_block' is " + std::to_string(q.block) +
                     ", expected a divisor of the rows' " + std::to_string(row) + " elements");
  if (extent < 0 || extent > row || extent % q.block != 0)
    throw ShapeError("attribute 'quant_extent' is " + std::to_string(extent) +
                     ", expected a multiple of quant_block " + std::to_string(q.block) +
                     " up to the rows' " + std::to_string(row) + " elements (0: all of them)");
  q.per_row = row / q.block;
  q.rounded = extent == 0 ? q.per_row : extent / q.block;
  return q;
}

void add_row_quant(Attrs& attrs, const Attrs& fq) {
  attrs["quant_format"] = attr_string(fq, "format");
  attrs["quant_block"] = attr_int(fq, "block");
  attrs["quant_scale"] = attr_string(fq, "scale");
  attrs["quant_extent"] = attr_int(fq, "extent");
}

void ref_quantize_rows(RefTensor& y, const RowQuant& q) {
  for (int64_t b0 = 0; b0 < y.numel(); b0 += q.block) {
    if ((b0 / q.block) % q.per_row >= q.rounded) continue;  // past extent: kept
    const double a = amax(&y.data[b0], q.block);
    double s = a == 0 ? 1.0 : f32(a / q.f.max);
    if (q.pow2 && !std::isnan(s)) s = clamp_pow2(s);
    for (int64_t j = b0; j < b0 + q.block; ++j)
      y.data[j] = f32(round_format(f32(y.data[j] / s), q.f) * s);
  }
}

int64_t row_scales_bytes(int64_t rows, int64_t d, const RowQuant& q) {
  return rows * (d + 1) * 4 + rows * (d / span_of(q)) * 4 + 3 * rows * q.per_row * 4;
}

RowScales row_scales(cc::Scope& s, const cc::Buf& tile, int64_t rows, int64_t d,
                     const RowQuant& q) {
  const int64_t span = span_of(q), spans = d / span, per_block = q.block / span;
  cc::Buf span_max = s.alloc_shared("fq_span_max", DType::I32, {rows, spans});
  RowScales out{.q = q,
                .scales = s.alloc_shared("fq_scales", DType::F32, {rows, q.per_row}),
                .pres = s.alloc_shared("fq_pres", DType::F32, {rows, q.per_row}),
                .posts = s.alloc_shared("fq_posts", DType::F32, {rows, q.per_row})};
  // The magnitudes as i32s in rows d + 1 apart, as fake_quant's tiled kernel stages them: a
  // span's loads are then never provably 16-byte aligned, so NVRTC's load vectoriser leaves them
  // alone. Folding the tile's 8 adjacent 16-bit elements directly, it merged them into vectors
  // one way or another from one compilation to the next (NVRTC 13.0's PTX depends on where its
  // heap lies: with address randomisation off the same sequence of cubins recurs), so the cubin
  // was not a function of the source.
  cc::Buf mag = s.alloc_shared("fq_mag", DType::I32, {rows, d + 1});
  s.annotate_layout(1);
  s.parallel(rows, d, [&](cc::Idx r, cc::Idx j) { mag(r, j) = magnitude(tile(r, j)); });
  s.barrier();
  fold_spans(s, mag, span_max, rows, spans, span, "fq_m");
  cc::Buf a = s.alloc_fragment("fq_amax", DType::I32, {rows, q.per_row});
  s.annotate_layout(1);
  s.parallel(rows, q.per_row, [&](cc::Idx r, cc::Idx b) {
    a(r, b) = i32(0);
    s.serial(per_block,
             [&](cc::Idx g) { a(r, b) = cc::max(a(r, b), span_max(r, b * per_block + g)); });
    Divisor dv = divisor(s, block_scale(s, from_bits(a(r, b)), q.f, q.pow2), q.pow2);
    out.scales(r, b) = dv.scale;
    if (q.pow2) {
      out.pres(r, b) = dv.pre;
      out.posts(r, b) = dv.post;
    }
  });
  s.barrier();
  return out;
}

cc::Val RowScales::value(cc::Scope& s, const cc::Idx& r, const cc::Idx& j, const cc::Val& x) const {
  cc::Val b = s.let(j / q.block, "fq_block");
  const Divisor dv{s.let(scales(r, b), "fq_scale"), q.pow2 ? cc::Val(pres(r, b)) : cc::Val(),
                   q.pow2 ? cc::Val(posts(r, b)) : cc::Val(), q.pow2};
  cc::Val v = s.let(x, "fq_x");
  cc::Val rounded =
      cc::Val(cc::round_to_narrow_float(q.f.dtype, s.let(dv.divide(v), "fq_v").expr(), "q")) *
      dv.scale;
  return q.all() ? rounded : cc::select(b < q.rounded, rounded, v);
}

}  // namespace tilerun::kernels::quant
