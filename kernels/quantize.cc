// fake_quant(x; format, block, scale): x rounded through a low-precision format with one scale
// per block of `block` consecutive elements along the last axis — the quantise-dequantise step
// of the V4 recipe (FP8 activations per 1×128, MXFP4 per 1×32 with power-of-two scales) kept in
// x's dtype. Per block:
//   amax = max |x| (NaN if any element is NaN)
//   s    = amax / max_finite(format) in f32 (1 when amax = 0); with scale: ue8m0 the smallest
//          power of two >= that quotient, so no element can overflow the format, kept within
//          UE8M0's [2^-127, 2^127] (quantize's e8m0 scales: its codes give these values)
//   y    = decode(encode(x / s)) · s, encode rounding to nearest even (compiler/transforms/
//          narrow_float.h: e4m3 and e2m1 saturate, e5m2 overflows to inf; e2m1 has no NaN, so a
//          NaN quotient gives +6)
// With `extent` (a multiple of block), only the first `extent` elements of each row of the last
// axis are rounded, the rest copied: V4's KV rounds its non-RoPE dims and keeps the RoPE ones,
// one kernel where a split, a rounding and a concat took three.
// Each step is one IEEE f32 operation, so the double reference rounds to f32 at the same points
// and the kernel matches it bit for bit (x / s of a power-of-two s is computed as multiplies that
// give the same bits: Divisor below). The gradient is straight-through: dx = dy.
// Layout: for a block size up to kTileElems, a CUDA block takes a tile of R = kTileElems / block
// consecutive blocks, loaded coalesced (16-byte vectors) into registers; their magnitudes go to a
// padded shared tile, where each thread folds a span of 8 of them, one thread per row folds the
// spans' maxima and computes the scale, and every element is rounded from its registers. Larger
// blocks fall back to one thread per block (two passes over it). amax is a max, exact and
// order-independent, so both give the same bits.
#include <cmath>

#include "compiler/ir/builder.h"
#include "compiler/transforms/narrow_float.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/quant_format.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;
// Elements of one tiled CUDA block (16 KiB of f32 staging): 128 blocks of 32, 32 of 128.
constexpr int64_t kTileElems = 4096;

using quant::Divisor;
using quant::f32;
using quant::Format;
using quant::format_named;
using quant::from_bits;
using quant::i32;
using quant::magnitude;

bool pow2_scale(const Attrs& attrs) {
  const std::string& s = attr_string(attrs, "scale");
  if (s != "f32" && s != "ue8m0")
    throw ShapeError("attribute 'scale' is '" + s + "', expected f32 or ue8m0");
  return s == "ue8m0";
}

std::vector<TensorType> infer_fake_quant(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  format_named(attr_string(attrs, "format"));
  pow2_scale(attrs);
  const int64_t block = attr_int(attrs, "block");
  if (in[0].shape.empty())
    throw ShapeError("input 'x' is " + to_string(in[0]) + ", expected rank >= 1");
  const int64_t last = in[0].shape.back();
  if (block < 1 || last % block != 0)
    throw ShapeError("attribute 'block' is " + std::to_string(block) + ", expected a divisor of " +
                     "input 'x' " + to_string(in[0]) + "'s last extent " + std::to_string(last));
  const int64_t extent = attr_int(attrs, "extent");
  if (extent < 0 || extent > last || extent % block != 0)
    throw ShapeError("attribute 'extent' is " + std::to_string(extent) +
                     ", expected a multiple of block " + std::to_string(block) +
                     " up to input 'x' " + to_string(in[0]) + "'s last extent " +
                     std::to_string(last) + " (0: all of it)");
  return {in[0]};
}

// The blocks of a row of the last axis, and how many of them (the first) are rounded.
struct RoundedBlocks {
  int64_t per_row, rounded;
  bool all() const { return rounded == per_row; }
};
RoundedBlocks rounded_blocks(const TensorType& x, const Attrs& attrs) {
  const int64_t block = attr_int(attrs, "block"), extent = attr_int(attrs, "extent");
  const int64_t per_row = x.shape.back() / block;
  return {per_row, extent == 0 ? per_row : extent / block};
}

// ---- Reference: double arithmetic rounded to f32 where the kernel rounds ------------------

std::vector<RefTensor> ref_fake_quant(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const Format f = format_named(attr_string(attrs, "format"));
  const bool pow2 = pow2_scale(attrs);
  const int64_t block = attr_int(attrs, "block");
  const RoundedBlocks rb = rounded_blocks({DType::F32, in[0].shape}, attrs);
  RefTensor y = in[0];
  quant::ref_quantize_rows(y, {.format = attr_string(attrs, "format"),
                               .f = f,
                               .pow2 = pow2,
                               .block = block,
                               .per_row = rb.per_row,
                               .rounded = rb.rounded});
  return {y};
}

// ---- Kernel ----------------------------------------------------------------------------------

cc::Val quantize(const Format& f, const cc::Val& v, const cc::Val& scale) {
  // The code's value, rounded on the f32 bits (narrow_float.h: the same bits as encoding and
  // decoding, in a third of the operations).
  return cc::Val(cc::round_to_narrow_float(f.dtype, v.expr(), "q")) * scale;
}

// Parameters x, y [NB, block] with `block` fixed (<= kTileElems): R = kTileElems / block rows of
// the tile per CUDA block. x stays in registers (a fragment) from its load to the rounding; only
// its magnitudes go through shared memory, folded in spans (of 8) by every thread, then a row's
// spans by one thread, which computes the row's scale (and, for power-of-two scales, the
// multipliers that stand for the division). Folding in spans, the dependent chain is 8 + B / 8
// steps long, not B, with every thread busy.
cc::Kernel build_fake_quant_tiled(DType dtype, const Format& f, bool pow2, int64_t block,
                                  RoundedBlocks rb, const std::string& name) {
  const int64_t rows = kTileElems / block;
  // Eight consecutive elements a thread (16 bytes of bf16) where a block divides by 8, so the
  // global accesses of a whole tile (all but the last) go as vectors (a guard inside the loop
  // keeps them scalar); the last tile keeps the row guard. A span of the amax fold is 8 elements
  // then, unless a tile has a row for every thread (block <= 32): a whole row a thread is as
  // short a chain and skips the spans' shared round trip.
  const int width = block % 8 == 0 ? 8 : 1;
  const int64_t span = block % 8 == 0 && rows < kThreads ? 8 : block, spans = block / span;
  cc::KernelBuilder kb(name);
  cc::Dim nb = kb.dim("NB");
  cc::Buf x = kb.input("x", dtype, {nb, cc::Val(block)});
  cc::Buf y = kb.output("y", dtype, {nb, cc::Val(block)});
  kb.body({cc::ceildiv(nb, rows)}, kThreads, [&](cc::Scope& s) {
    cc::Idx r0 = s.let(s.block_idx(0) * rows, "r0");
    // Rows B + 1 apart: the 8-element runs of a warp's threads start in distinct banks.
    cc::Buf mag = s.alloc_shared("mag", DType::I32, {rows, block + 1});
    cc::Buf span_max = s.alloc_shared("span_max", DType::I32, {rows, spans});
    cc::Buf scales = s.alloc_shared("scales", DType::F32, {rows});
    cc::Buf pres = s.alloc_shared("pres", DType::F32, {rows});
    cc::Buf posts = s.alloc_shared("posts", DType::F32, {rows});
    cc::Buf xf = s.alloc_fragment("xf", DType::F32, {rows, block});
    // Rows past the tensor's end get magnitude 0, so the folds below need no guard.
    whole_or_guarded(s, r0 + rows <= nb, [&](bool guarded) {
      s.annotate_layout(width);
      s.parallel(rows, block, [&](cc::Idx r, cc::Idx j) {
        auto load = [&] {
          xf(r, j) = x(r0 + r, j);
          mag(r, j) = magnitude(xf(r, j));
        };
        if (guarded)
          s.if_then_else(r0 + r < nb, load, [&] { mag(r, j) = i32(0); });
        else
          load();
      });
    });
    s.barrier();
    quant::fold_spans(s, mag, span_max, rows, spans, span, "m");
    cc::Buf amax = s.alloc_fragment("amax", DType::I32, {rows});
    s.annotate_layout(1);
    s.parallel(rows, [&](cc::Idx r) {
      amax(r) = i32(0);
      s.serial(spans, [&](cc::Idx g) { amax(r) = cc::max(amax(r), span_max(r, g)); });
      Divisor d = quant::divisor(s, quant::block_scale(s, from_bits(amax(r)), f, pow2), pow2);
      scales(r) = d.scale;
      if (pow2) {
        pres(r) = d.pre;
        posts(r) = d.post;
      }
    });
    s.barrier();
    whole_or_guarded(s, r0 + rows <= nb, [&](bool guarded) {
      s.annotate_layout(width);
      s.parallel(rows, block, [&](cc::Idx r, cc::Idx j) {
        auto write = [&] {
          const Divisor d{s.let(scales(r), "scale"), pres(r), posts(r), pow2};
          cc::Val q = quantize(f, s.let(d.divide(xf(r, j)), "v"), d.scale);
          // Past extent, the block is copied (a select: the tile stays one vector loop).
          y(r0 + r, j) = rb.all() ? q : cc::select((r0 + r) % rb.per_row < rb.rounded, q, xf(r, j));
        };
        if (guarded)
          s.if_then(r0 + r < nb, write);
        else
          write();
      });
    });
  });
  return kb.build();
}

// Parameters x, y [NB, B]: NB blocks of B elements; one thread per block (any block size).
cc::Kernel build_fake_quant(DType dtype, const Format& f, bool pow2, RoundedBlocks rb,
                            const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim nb = kb.dim("NB"), b = kb.dim("B", {.min = 1, .max = 1 << 20});
  cc::Buf x = kb.input("x", dtype, {nb, b});
  cc::Buf y = kb.output("y", dtype, {nb, b});
  kb.body({cc::ceildiv(nb, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Buf amax = s.alloc_fragment("amax", DType::I32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx r = base + t;
      auto round = [&] {
        amax(t) = i32(0);
        s.serial(b, [&](cc::Idx j) { amax(t) = cc::max(amax(t), magnitude(x(r, j))); });
        Divisor d = quant::divisor(s, quant::block_scale(s, from_bits(amax(t)), f, pow2), pow2);
        s.serial(b,
                 [&](cc::Idx j) { y(r, j) = quantize(f, s.let(d.divide(x(r, j)), "v"), d.scale); });
      };
      s.if_then(r < nb, [&] {
        if (rb.all())
          round();
        else
          s.if_then_else(r % rb.per_row < rb.rounded, round,
                         [&] { s.serial(b, [&](cc::Idx j) { y(r, j) = x(r, j); }); });
      });
    });
  });
  return kb.build();
}

ExpandFn expand_fake_quant(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const std::string& fmt = attr_string(attrs, "format");
    const Format f = format_named(fmt);
    const bool pow2 = pow2_scale(attrs);
    const int64_t block = attr_int(attrs, "block");
    const DType dtype = in[0].dtype;
    const RoundedBlocks rb = rounded_blocks(in[0], attrs);
    const std::string stem = "fake_quant_" + fmt + (pow2 ? "_ue8m0_" : "_");
    // "_x7of8": the first 7 blocks of each row of 8 rounded.
    const std::string suffix =
        (rb.all() ? ""
                  : "x" + std::to_string(rb.rounded) + "of" + std::to_string(rb.per_row) + "_") +
        std::string(dtype_name(dtype));
    if (block <= kTileElems) {
      const std::string name = stem + "b" + std::to_string(block) + "_" + suffix;
      KernelCall call{
          .kernel = cache->get(
              name, [&] { return build_fake_quant_tiled(dtype, f, pow2, block, rb, name); }),
          .buffers = {input_slot(0), output_slot(0)},
          .dims = {numel(in[0]) / block}};
      return OpExpansion{.calls = {call}};
    }
    const std::string name = stem + suffix;
    KernelCall call{
        .kernel = cache->get(name, [&] { return build_fake_quant(dtype, f, pow2, rb, name); }),
        .buffers = {input_slot(0), output_slot(0)},
        .dims = {numel(in[0]) / block, block}};
    return OpExpansion{.calls = {call}};
  };
}

// Straight-through: the rounding's derivative is taken as 1.
std::vector<GradOp> grad_fake_quant(const std::vector<TensorType>&, const Attrs&,
                                    const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"alias", {"dy0"}, {"dx0"}, {}}};
}

Attrs fq(const char* format, int64_t block, const char* scale = "f32") {
  return {{"format", std::string(format)}, {"block", block}, {"scale", std::string(scale)}};
}
Attrs with_extent(Attrs a, int64_t extent) {
  a["extent"] = extent;
  return a;
}

}  // namespace

void register_quantize(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const double nan = kNaN(), inf = kInf();
  registry.add(
      {.name = "fake_quant",
       .doc = "y = x rounded through format with one scale per block of the last axis: s = "
              "amax/max_finite (ue8m0: the next power of two, within e8m0's [2^-127, 2^127]), y = "
              "decode(encode(x/s))·s in f32; "
              "gradient straight-through (dx = dy)",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {{.name = "format",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("f8e4m3")},
                  .doc = "f8e4m3 (max 448, saturating), f8e5m2 (max 57344) or fp4e2m1 (max 6, "
                         "saturating)"},
                 {.name = "block",
                  .kind = AttrKind::Int,
                  .default_value = AttrValue{int64_t{128}},
                  .doc = "elements per scale along the last axis (divides it)"},
                 {.name = "scale",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("f32")},
                  .doc = "f32, or ue8m0 (power-of-two scales rounded up)"},
                 int_attr("extent", 0,
                          "how many leading elements of each row of the last axis are rounded "
                          "(a multiple of block; the rest are copied; 0: all)")},
       .infer = infer_fake_quant,
       .reference = ref_fake_quant,
       .gradient = grad_fake_quant,
       .expand = expand_fake_quant(cache),
       .tests = {
           .kernel = {{.shapes = {{33, 256}}, .attrs = fq("f8e4m3", 128)},
                      {.shapes = {{7, 96}}, .attrs = fq("f8e5m2", 32, "ue8m0")},
                      {.shapes = {{5, 3, 64}}, .attrs = fq("fp4e2m1", 32, "ue8m0")},
                      {.shapes = {{9, 48}}, .attrs = fq("fp4e2m1", 16), .lo = -1e-3, .hi = 1e-3},
                      {.shapes = {{1, 7}}, .attrs = fq("f8e4m3", 7), .lo = -300, .hi = 300},
                      // Several tiles of 128 blocks, the last one partial.
                      {.shapes = {{300, 64}}, .attrs = fq("fp4e2m1", 32, "ue8m0")},
                      // A block larger than a tile: the one-thread-per-block kernel.
                      {.shapes = {{3, 8192}}, .attrs = fq("f8e5m2", 8192)},
                      // Scales below f32's normal range (the ue8m0 rounding's scaled path).
                      {.shapes = {{4, 32}},
                       .attrs = fq("f8e4m3", 32, "ue8m0"),
                       .lo = -1e-36,
                       .hi = 1e-36},
                      // Only the first 7 blocks of each row of 8 rounded (several tiles, the last
                      // partial), on the tiled and the one-thread-per-block kernels.
                      {.shapes = {{75, 512}}, .attrs = with_extent(fq("f8e4m3", 64), 448)},
                      {.shapes = {{3, 2, 96}},
                       .attrs = with_extent(fq("fp4e2m1", 32, "ue8m0"), 32)},
                      {.shapes = {{2, 3 * 5000}}, .attrs = with_extent(fq("f8e5m2", 5000), 10000)}},
           // A worked rounding on each format; zeros, NaN and infinity in a block (s = inf: x/s is
           // 0 or NaN and 0·inf is NaN, so the whole block is NaN).
           .examples = {{.inputs = {{{8}, {0.3, 6, -1.2, 2.6, 12, 5, -7, 0.9}}},
                         .attrs = fq("fp4e2m1", 4, "ue8m0"),
                         .outputs = {{{8}, {0.5, 6, -1, 3, 12, 4, -8, 1}}}},
                        {.inputs = {{{4}, {896, 3.3, -0.0, 0.0}}},
                         .attrs = fq("f8e4m3", 2),
                         .outputs = {{{4}, {896, 3.25, -0.0, 0.0}}}},
                        {.inputs = {{{4}, {1, nan, 2, -inf}}},
                         .attrs = fq("f8e5m2", 2),
                         .outputs = {{{4}, {nan, nan, nan, nan}}}},
                        // extent: the first block of each row rounded, the second copied.
                        {.inputs = {{{2, 4}, {0.3, 6, 0.3, 6, -1.2, 2.6, -1.2, 2.6}}},
                         .attrs = with_extent(fq("fp4e2m1", 2, "ue8m0"), 2),
                         .outputs = {{{2, 4}, {0.5, 6, 0.3, 6, -1, 3, -1.2, 2.6}}}}},
           .straight_through = true}});
}

}  // namespace tilerun::kernels
