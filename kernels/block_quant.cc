// over 600 lines: quantize and dequantize share their block geometry, scale rule and fp4 byte
// packing; their references, three kernels and test cases stay beside them in one family file.
// quantize(x; format, block, scale) -> q, s and dequantize(q, s; to) -> y: block-scaled
// low-precision tensors stored as their codes, the V4/DeepSeek recipe's storage (FP8 activations
// per 1×128 and weights per 128×128 with f32 or power-of-two scales, MXFP4 per 1×32 with E8M0
// scales, NVFP4 per 1×16 with E4M3 scales). fake_quant (kernels/quantize.cc) is the same rounding
// kept in x's dtype; dequantize(quantize(x)) gives fake_quant's bits with f32 scales and with e8m0
// ones (fake_quant's ue8m0: the same powers of two, kept within [2^-127, 2^127]).
//
// A block is 1×B along the last axis (block: [B]) or R×B over the last two (block: [R, B]).
// Per block:
//   amax = max |x| (NaN if any element is NaN); a = amax / max_finite(format) in f32
//   s    = f32:    a (1 when amax = 0)
//          e8m0:   the smallest power of two >= a, within e8m0's [2^-127, 2^127] (1 when amax = 0)
//          f8e4m3: a rounded to nearest e4m3, at least 2^-9 (its smallest subnormal), saturating
//                  at 448 (1 when amax = 0)
//   q    = encode(x / s) in format, rounded to nearest even (narrow_float.h: e4m3 and e2m1
//          saturate, e5m2 overflows to inf, e2m1 has no NaN: a NaN quotient gives +6)
// and dequantize gives y = decode(q) · s, one f32 multiply, rounded to `to`. The division uses
// the scale as stored, so the pair is exact to its own definition whatever the scale.
// fp4e2m1 packs two codes a byte, the even element in the low nibble (the safetensors and PyTorch
// convention); its kernels read and write the bytes (u8), two codes a thread, so no two threads
// share a byte. No gradient flows back through either op (both detach, as stop_gradient does):
// codes are storage; for training through a rounding use fake_quant, whose gradient is
// straight-through.
//
// Kernels. quantize with 1×B blocks up to kTileElems: a CUDA block takes R = kTileElems / B
// consecutive blocks; every thread folds magnitudes into a padded shared tile, one thread a block
// computes and stores its scale, then every thread encodes (x read again, from L2). (A warp per
// block, the amax by shuffles and every lane computing the scale, measured slower on the H200 at
// 1×32 and power-of-two scales: bench/RESULTS.md, 2026-12-04.) R×B blocks,
// or longer rows: one CUDA block a scale block, its threads striding over it. dequantize: one
// thread per code (a byte of two codes for fp4), the scale read per element from L1.
#include <cmath>

#include "compiler/transforms/narrow_float.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/quant_format.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;
using quant::f32;
using quant::Format;
using quant::i32;

constexpr int kThreads = 128;
constexpr int64_t kTileElems = 4096;
constexpr double kMinE4M3 = 0x1p-9;  // e4m3's smallest subnormal

// The scale's storage: f32, e8m0 (powers of two) or f8e4m3, named by attribute `scale`.
DType scale_dtype(const Attrs& attrs) {
  const std::string& name = attr_string(attrs, "scale");
  if (name == "f32") return DType::F32;
  if (name == "e8m0") return DType::E8M0;
  if (name == "f8e4m3") return DType::F8E4M3;
  throw ShapeError("attribute 'scale' is '" + name + "', expected f32, e8m0 or f8e4m3");
}

// The tensor as rows × cols (all leading axes folded into the rows, for 1×B blocks every axis
// but the last) and the block's extent along each.
struct Blocks {
  int64_t rows = 1, cols = 1;  // of x (or q, y)
  int64_t br = 1, bc = 1;      // a block's extents
  int64_t row_blocks() const { return rows / br; }
  int64_t col_blocks() const { return cols / bc; }
};

Blocks blocks_of(const std::vector<int64_t>& shape, int64_t br, int64_t bc) {
  Blocks b{.br = br, .bc = bc};
  b.cols = shape.back();
  for (size_t i = 0; i + 1 < shape.size(); ++i) b.rows *= shape[i];
  return b;
}

// The scales' shape: x's with the last axis divided by the block's width, and for R×B blocks the
// second-last by its height.
std::vector<int64_t> scale_shape(std::vector<int64_t> shape, const std::vector<int64_t>& block) {
  shape.back() /= block.back();
  if (block.size() == 2) shape[shape.size() - 2] /= block[0];
  return shape;
}

std::vector<int64_t> block_attr(const Attrs& attrs, const TensorType& x, DType format) {
  const auto& block = std::get<std::vector<int64_t>>(attrs.at("block"));
  auto text = [&] {
    std::string s = "[";
    for (size_t i = 0; i < block.size(); ++i) s += (i ? ", " : "") + std::to_string(block[i]);
    return s + "]";
  };
  if (block.empty() || block.size() > 2)
    throw ShapeError("attribute 'block' is " + text() +
                     ", expected [B] (1×B along the last axis) or [R, B] (over the last two)");
  for (int64_t b : block)
    if (b < 1) throw ShapeError("attribute 'block' is " + text() + ", expected extents >= 1");
  if (x.shape.size() < block.size())
    throw ShapeError("input 'x' is " + to_string(x) +
                     ", expected rank >= " + std::to_string(block.size()) + " for block " + text());
  for (size_t i = 0; i < block.size(); ++i) {
    const int64_t extent = x.shape[x.shape.size() - block.size() + i];
    if (extent % block[i] != 0)
      throw ShapeError("attribute 'block' is " + text() + ", expected extents dividing input 'x' " +
                       to_string(x) + "'s last " + std::to_string(block.size()) + " axes");
  }
  if (format == DType::FP4E2M1 && block.back() % 2 != 0)
    throw ShapeError("attribute 'block' is " + text() +
                     ": fp4e2m1 packs two codes a byte, so a block's width must be even");
  return block;
}

std::vector<TensorType> infer_quantize(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const Format f = quant::format_named(attr_string(attrs, "format"));
  const DType sd = scale_dtype(attrs);
  const std::vector<int64_t> block = block_attr(attrs, in[0], f.dtype);
  return {{f.dtype, in[0].shape}, {sd, scale_shape(in[0].shape, block)}};
}

// dequantize's block, from the shapes of q and its scales.
std::vector<int64_t> dequant_block(const TensorType& q, const TensorType& s) {
  auto bad = [&](const std::string& why) {
    return ShapeError("input 'scale' is " + to_string(s) + ", expected " + why + " for input 'q' " +
                      to_string(q));
  };
  if (q.shape.empty() || s.shape.size() != q.shape.size())
    throw bad("the same rank (>= 1) as q, one scale per block");
  const size_t n = q.shape.size();
  for (size_t i = 0; i + 2 < n; ++i)
    if (s.shape[i] != q.shape[i]) throw bad("q's extents on every axis but the last two");
  auto ratio = [&](size_t i) {
    if (s.shape[i] < 1 || q.shape[i] % s.shape[i] != 0)
      throw bad("extents dividing q's (one scale per block)");
    return q.shape[i] / s.shape[i];
  };
  const int64_t bc = ratio(n - 1), br = n >= 2 ? ratio(n - 2) : 1;
  if (q.dtype == DType::FP4E2M1 && bc % 2 != 0)
    throw bad("blocks of an even width (fp4e2m1 packs two codes a byte)");
  return br == 1 ? std::vector<int64_t>{bc} : std::vector<int64_t>{br, bc};
}

std::vector<TensorType> infer_dequantize(const std::vector<TensorType>& in, const Attrs& attrs) {
  const DType to = float_dtype_attr(attrs, "to");
  if (in[0].dtype != DType::F8E4M3 && in[0].dtype != DType::F8E5M2 && in[0].dtype != DType::FP4E2M1)
    throw ShapeError("input 'q' is " + to_string(in[0]) +
                     ", expected codes of f8e4m3, f8e5m2 or fp4e2m1");
  if (in[1].dtype != DType::F32 && in[1].dtype != DType::E8M0 && in[1].dtype != DType::F8E4M3)
    throw ShapeError("input 'scale' is " + to_string(in[1]) +
                     ", expected scales of f32, e8m0 or f8e4m3");
  dequant_block(in[0], in[1]);
  return {{to, in[0].shape}};
}

// ---- References ------------------------------------------------------------------------------

// The block's scale as stored, from its amax.
double stored_scale(double amax, const Format& f, DType sd) {
  if (amax == 0) return 1.0;
  const double a = f32(amax / f.max);
  if (std::isnan(a)) return a;
  switch (sd) {
    case DType::E8M0:
      return quant::clamp_pow2(a);
    case DType::F8E4M3:
      return quant::round_format(std::max(a, kMinE4M3), quant::format_named("f8e4m3"));
    default:
      return a;
  }
}

std::vector<RefTensor> ref_quantize(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const Format f = quant::format_named(attr_string(attrs, "format"));
  const DType sd = scale_dtype(attrs);
  const std::vector<int64_t> block = std::get<std::vector<int64_t>>(attrs.at("block"));
  const Blocks b = blocks_of(in[0].shape, block.size() == 2 ? block[0] : 1, block.back());
  RefTensor q{.shape = in[0].shape, .data = std::vector<double>(in[0].data.size())};
  RefTensor s{.shape = scale_shape(in[0].shape, block)};
  s.data.resize(static_cast<size_t>(b.row_blocks() * b.col_blocks()));
  for (int64_t rb = 0; rb < b.row_blocks(); ++rb)
    for (int64_t cb = 0; cb < b.col_blocks(); ++cb) {
      const int64_t origin = rb * b.br * b.cols + cb * b.bc;
      double amax = 0;
      for (int64_t i = 0; i < b.br; ++i) {
        const double row = quant::amax(&in[0].data[origin + i * b.cols], b.bc);
        amax = std::isnan(row) || std::isnan(amax) ? kNaN() : std::max(amax, row);
      }
      const double scale = stored_scale(amax, f, sd);
      s.data[rb * b.col_blocks() + cb] = scale;
      for (int64_t i = 0; i < b.br; ++i)
        for (int64_t j = 0; j < b.bc; ++j) {
          const int64_t at = origin + i * b.cols + j;
          q.data[at] = quant::round_format(f32(in[0].data[at] / scale), f);
        }
    }
  return {q, s};
}

std::vector<RefTensor> ref_dequantize(const std::vector<RefTensor>& in, const Attrs&) {
  const std::vector<int64_t> block =
      dequant_block({DType::F8E4M3, in[0].shape}, {DType::F32, in[1].shape});
  const Blocks b = blocks_of(in[0].shape, block.size() == 2 ? block[0] : 1, block.back());
  RefTensor y = in[0];
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t c = 0; c < b.cols; ++c)
      y.data[r * b.cols + c] =
          f32(in[0].data[r * b.cols + c] * in[1].data[(r / b.br) * b.col_blocks() + c / b.bc]);
  return {y};
}

// ---- Kernels ---------------------------------------------------------------------------------

// The scale of a block whose max |x| is amax, as its storage holds it (see the top).
cc::Val stored_scale(cc::Scope& s, const cc::Val& amax, const Format& f, DType sd) {
  // e8m0: fake_quant's power-of-two scale (within e8m0's range), so that dequantize(quantize(x))
  // is fake_quant(x) bit for bit.
  if (sd == DType::E8M0) return quant::block_scale(s, amax, f, /*pow2=*/true);
  cc::Val a = s.let(amax / static_cast<float>(f.max), "a");
  cc::Val scale;
  if (sd == DType::F8E4M3) {
    cc::Val floor = cc::select(a < static_cast<float>(kMinE4M3), cc::Val(float(kMinE4M3)), a);
    scale = cc::Val(cc::round_to_narrow_float(DType::F8E4M3, floor.expr(), "se"));
  } else {
    scale = a;
  }
  return s.let(cc::select(amax == 0.0f, cc::Val(1.0f), scale), "scale");
}

// The f32 value's code in the format (the low 4 or 8 bits of an i32).
cc::Val code(DType format, const cc::Val& v) {
  return cc::Val(cc::f32_to_narrow_float(format, v.expr(), "c"));
}

// Writes elements `j`, `j + 1`, .. `j + pack - 1` of row `row` of q (pack = 2 for fp4, whose
// buffer holds bytes: element pair jp at byte jp) from x / scale.
void encode_unit(const Format& f, const cc::Buf& q, const cc::Val& row, const cc::Val& unit,
                 const std::function<cc::Val(cc::Val)>& quotient) {
  if (f.dtype != DType::FP4E2M1) {
    q(row, unit) = quotient(unit);
    return;
  }
  cc::Val lo = code(f.dtype, quotient(unit * 2)), hi = code(f.dtype, quotient(unit * 2 + 1));
  q(row, unit) = lo | cc::shl(hi, i32(4));
}

// q's buffer: the format's codes, or for fp4 the bytes (two codes each).
cc::Buf q_buffer(cc::KernelBuilder& kb, const std::string& name, DType format, const cc::Val& rows,
                 const cc::Val& cols, bool output) {
  const bool packed = format == DType::FP4E2M1;
  const DType d = packed ? DType::U8 : format;
  const cc::Val c = packed ? cols / 2 : cols;
  return output ? kb.output(name, d, {rows, c}) : kb.input(name, d, {rows, c});
}

// Parameters x [NB, B], q [NB, B] (bytes [NB, B/2] for fp4), s [NB]: 1×B blocks, B <= kTileElems,
// R = kTileElems / B rows of blocks a CUDA block. For the 8-bit formats x stays in registers (a
// fragment) from its load to the encoding, and a whole tile (all but the last) moves without a
// row guard, so its loads and the codes' stores go as vectors (fake_quant's tiling); fp4 codes
// pair up into bytes, so that kernel reads x again (from L2) a byte at a time.
cc::Kernel build_quantize_rows(DType dtype, const Format& f, DType sd, int64_t block,
                               const std::string& name) {
  const int64_t rows = kTileElems / block;
  const bool packed = f.dtype == DType::FP4E2M1, pow2 = sd == DType::E8M0;
  const int width = block % 8 == 0 ? 8 : 1;
  const int64_t span = block % 8 == 0 && rows < kThreads ? 8 : block, spans = block / span;
  cc::KernelBuilder kb(name);
  cc::Dim nb = kb.dim("NB");
  cc::Buf x = kb.input("x", dtype, {nb, cc::Val(block)});
  cc::Buf q = q_buffer(kb, "q", f.dtype, nb, cc::Val(block), true);
  cc::Buf so = kb.output("s", sd, {nb});
  kb.body({cc::ceildiv(nb, rows)}, kThreads, [&](cc::Scope& s) {
    cc::Idx r0 = s.let(s.block_idx(0) * rows, "r0");
    cc::Buf mag = s.alloc_shared("mag", DType::I32, {rows, block + 1});
    cc::Buf span_max = s.alloc_shared("span_max", DType::I32, {rows, spans});
    cc::Buf scales = s.alloc_shared("scales", DType::F32, {rows});
    cc::Buf pres = s.alloc_shared("pres", DType::F32, {rows});
    cc::Buf posts = s.alloc_shared("posts", DType::F32, {rows});
    cc::Buf xf;
    if (!packed) xf = s.alloc_fragment("xf", DType::F32, {rows, block});
    // Rows past the tensor's end get magnitude 0, so the folds below need no guard.
    whole_or_guarded(s, r0 + rows <= nb, [&](bool guarded) {
      if (!packed) s.annotate_layout(width);  // fp4: the layout inference's choice
      s.parallel(rows, block, [&](cc::Idx r, cc::Idx j) {
        auto load = [&] {
          if (packed) {
            mag(r, j) = quant::magnitude(x(r0 + r, j));
            return;
          }
          xf(r, j) = x(r0 + r, j);
          mag(r, j) = quant::magnitude(xf(r, j));
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
      quant::Divisor d = quant::divisor(s, stored_scale(s, quant::from_bits(amax(r)), f, sd), pow2);
      scales(r) = d.scale;
      if (pow2) {
        pres(r) = d.pre;
        posts(r) = d.post;
      }
      s.if_then(r0 + r < nb, [&] { so(r0 + r) = d.scale; });
    });
    s.barrier();
    whole_or_guarded(s, r0 + rows <= nb, [&](bool guarded) {
      if (!packed) s.annotate_layout(width);  // fp4: the layout inference's choice
      s.parallel(rows, packed ? block / 2 : block, [&](cc::Idx r, cc::Idx u) {
        auto write = [&] {
          const quant::Divisor d{s.let(scales(r), "scale"), pres(r), posts(r), pow2};
          if (packed)
            encode_unit(f, q, r0 + r, u, [&](const cc::Val& j) { return d.divide(x(r0 + r, j)); });
          else
            q(r0 + r, u) = d.divide(xf(r, u));
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

// Parameters x [MB·R, NB·B], q (the same, bytes for fp4), s [MB, NB]: R×B blocks, one CUDA
// block each, its threads striding over the block's R·B elements (B/2 bytes a row for fp4).
cc::Kernel build_quantize_blocks(DType dtype, const Format& f, DType sd, int64_t br, int64_t bc,
                                 const std::string& name) {
  const int64_t pack = f.dtype == DType::FP4E2M1 ? 2 : 1, units = br * bc / pack;
  const bool pow2 = sd == DType::E8M0;
  cc::KernelBuilder kb(name);
  cc::Dim mb = kb.dim("MB"), nb = kb.dim("NB");
  cc::Buf x = kb.input("x", dtype, {mb * br, nb * bc});
  cc::Buf q = q_buffer(kb, "q", f.dtype, mb * br, nb * bc, true);
  cc::Buf so = kb.output("s", sd, {mb, nb});
  kb.body({mb, nb}, kThreads, [&](cc::Scope& s) {
    cc::Idx row0 = s.let(s.block_idx(0) * br, "row0"), col0 = s.let(s.block_idx(1) * bc, "col0");
    cc::Buf part = s.alloc_shared("part", DType::I32, {kThreads});
    cc::Buf scale_at = s.alloc_shared("scale_at", DType::F32, {3});
    cc::Buf m = s.alloc_fragment("m", DType::I32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      m(t) = i32(0);
      s.serial((br * bc + kThreads - 1) / kThreads, [&](cc::Idx k) {
        cc::Idx e = s.let(k * kThreads + t, "e");
        s.if_then(e < br * bc,
                  [&] { m(t) = cc::max(m(t), quant::magnitude(x(row0 + e / bc, col0 + e % bc))); });
      });
      part(t) = m(t);
    });
    s.barrier();
    cc::Buf amax = s.alloc_fragment("amax", DType::I32, {1});
    s.parallel(1, [&](cc::Idx t) {
      amax(t) = i32(0);
      s.serial(kThreads, [&](cc::Idx k) { amax(t) = cc::max(amax(t), part(k)); });
      quant::Divisor d = quant::divisor(s, stored_scale(s, quant::from_bits(amax(t)), f, sd), pow2);
      scale_at(0) = d.scale;
      if (pow2) {
        scale_at(1) = d.pre;
        scale_at(2) = d.post;
      }
      so(s.block_idx(0), s.block_idx(1)) = d.scale;
    });
    s.barrier();
    s.parallel(kThreads, [&](cc::Idx t) {
      const quant::Divisor d{s.let(scale_at(0), "scale"), scale_at(1), scale_at(2), pow2};
      s.serial((units + kThreads - 1) / kThreads, [&](cc::Idx k) {
        cc::Idx e = s.let(k * kThreads + t, "e");
        s.if_then(e < units, [&] {
          cc::Idx row = s.let(row0 + e / (bc / pack), "row");
          cc::Idx unit = s.let(s.block_idx(1) * (bc / pack) + e % (bc / pack), "unit");
          encode_unit(f, q, row, unit, [&](const cc::Val& j) { return d.divide(x(row, j)); });
        });
      });
    });
  });
  return kb.build();
}

constexpr int kDequantThreads = 256;

// Codes a dequantize thread takes: the widest of 16, 8, 4 that divides the block's width and
// whose CUDA block (256 threads) tiles a row exactly, so that no block of a row needs the guard
// that keeps its moves scalar (a row of 7168 codes: 4, 1024 a block); else the widest dividing
// the block's width (the row's last CUDA block guarded). fp4: 1 (a byte, two codes).
int dequant_width(DType format, int64_t bc, int64_t cols) {
  if (format == DType::FP4E2M1) return 1;
  for (int w : {16, 8, 4})
    if (bc % w == 0 && cols % (kDequantThreads * w) == 0) return w;
  for (int w : {16, 8, 4})
    if (bc % w == 0) return w;
  return 1;
}

// Parameters q [MB·R, NB·B] (bytes for fp4), s [MB, NB], y [MB·R, NB·B]. 8-bit codes: a thread
// takes W consecutive codes of a row (dequant_width), whole stretches of a row without a guard so
// that they move as vectors, a partial one guarded. fp4: a thread per byte, its two codes.
cc::Kernel build_dequantize(DType format, DType sd, DType to, int64_t br, int64_t bc, int width,
                            const std::string& name) {
  const bool packed = format == DType::FP4E2M1;
  const int64_t per_block = kDequantThreads * width;
  cc::KernelBuilder kb(name);
  cc::Dim mb = kb.dim("MB"), nb = kb.dim("NB");
  cc::Buf q = q_buffer(kb, "q", format, mb * br, nb * bc, false);
  cc::Buf sc = kb.input("s", sd, {mb, nb});
  cc::Buf y = kb.output("y", to, {mb * br, nb * bc});
  const cc::Val units = packed ? nb * (bc / 2) : nb * bc;
  kb.body({mb * br, cc::ceildiv(units, per_block)}, kDequantThreads, [&](cc::Scope& s) {
    cc::Idx row = s.let(s.block_idx(0), "row");
    cc::Idx u0 = s.let(s.block_idx(1) * per_block, "u0");
    auto unit = [&](const cc::Idx& u) {
      if (!packed) {
        y(row, u) = q(row, u) * sc(row / br, u / bc);
        return;
      }
      cc::Val scale = s.let(sc(row / br, u / (bc / 2)), "scale");
      cc::Val byte = s.let(q(row, u), "byte");
      for (int k = 0; k < 2; ++k) {
        cc::Val c = cc::shr_logical(byte, i32(4 * k)) & i32(0xf);
        y(row, u * 2 + k) = cc::Val(cc::narrow_float_to_f32(format, c.expr(), "d")) * scale;
      }
    };
    s.if_then_else(
        u0 + per_block <= units,
        [&] {
          s.annotate_layout(width);
          s.parallel(per_block, [&](cc::Idx i) { unit(u0 + i); });
        },
        [&] {
          s.annotate_layout(width);
          s.parallel(per_block,
                     [&](cc::Idx i) { s.if_then(u0 + i < units, [&] { unit(u0 + i); }); });
        });
  });
  return kb.build();
}

ExpandFn expand_quantize(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const std::string& fmt = attr_string(attrs, "format");
    const Format f = quant::format_named(fmt);
    const DType sd = scale_dtype(attrs);
    const std::vector<int64_t> block = block_attr(attrs, in[0], f.dtype);
    const Blocks b = blocks_of(in[0].shape, block.size() == 2 ? block[0] : 1, block.back());
    const std::string stem = "quantize_" + fmt + "_" + std::string(dtype_name(sd)) + "_b" +
                             std::to_string(b.br) + "x" + std::to_string(b.bc) + "_" +
                             std::string(dtype_name(in[0].dtype));
    const DType dtype = in[0].dtype;
    if (b.br == 1 && b.bc <= kTileElems) {
      KernelCall call{
          .kernel = cache->get(stem, [&] { return build_quantize_rows(dtype, f, sd, b.bc, stem); }),
          .buffers = {input_slot(0), output_slot(0), output_slot(1)},
          .dims = {b.rows * b.col_blocks()}};
      return OpExpansion{.calls = {call}};
    }
    const std::string name = stem + "_blocks";
    KernelCall call{
        .kernel =
            cache->get(name, [&] { return build_quantize_blocks(dtype, f, sd, b.br, b.bc, name); }),
        .buffers = {input_slot(0), output_slot(0), output_slot(1)},
        .dims = {b.row_blocks(), b.col_blocks()}};
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_dequantize(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs&) {
    const std::vector<int64_t> block = dequant_block(in[0], in[1]);
    const Blocks b = blocks_of(in[0].shape, block.size() == 2 ? block[0] : 1, block.back());
    const int width = dequant_width(in[0].dtype, b.bc, b.cols);
    const std::string name = "dequantize_" + std::string(dtype_name(in[0].dtype)) + "_" +
                             std::string(dtype_name(in[1].dtype)) + "_b" + std::to_string(b.br) +
                             "x" + std::to_string(b.bc) + "_" +
                             std::string(dtype_name(out[0].dtype)) + "_w" + std::to_string(width);
    KernelCall call{.kernel = cache->get(name,
                                         [&] {
                                           return build_dequantize(in[0].dtype, in[1].dtype,
                                                                   out[0].dtype, b.br, b.bc, width,
                                                                   name);
                                         }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {b.row_blocks(), b.col_blocks()}};
    return OpExpansion{.calls = {call}};
  };
}

// Codes and their scales are storage, not a differentiable function of x: both ops detach
// (graph/autodiff gives their outputs no gradient), and their rule says "zeros" for any input.
std::vector<GradOp> grad_detached(const std::vector<TensorType>& in, const Attrs&,
                                  const std::vector<bool>& needs) {
  std::vector<GradOp> rule;
  for (size_t i = 0; i < in.size(); ++i)
    if (needs[i])
      rule.push_back({"zeros", {"x" + std::to_string(i)}, {"dx" + std::to_string(i)}, {}});
  return rule;
}

Attrs qa(const char* format, std::vector<int64_t> block, const char* scale) {
  return {
      {"format", std::string(format)}, {"block", std::move(block)}, {"scale", std::string(scale)}};
}

// dequantize's scales: positive, spread over a few binades (a drawn value v in [lo, hi) becomes
// 2^(4v) · (1 + |v| / 8)), rounded to the scale dtype by the suite.
void positive_scales(std::vector<RefTensor>& in) {
  for (double& v : in[1].data) v = std::ldexp(1 + std::abs(v) / 8, static_cast<int>(4 * v));
}

}  // namespace

void register_block_quant(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const double nan = kNaN();
  registry.add(
      {.name = "quantize",
       .doc = "q, s = x as low-precision codes with one scale per block (1×B along the last "
              "axis, or R×B over the last two): s = amax/max_finite (e8m0: the next power of two "
              "up, f8e4m3: rounded to nearest), q = encode(x/s); fp4e2m1 two codes a byte; "
              "no gradient flows back (fake_quant is the trainable form)",
       .inputs = {"x"},
       .outputs = {"q", "scale"},
       .attrs = {{.name = "format",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("f8e4m3")},
                  .doc = "q's dtype: f8e4m3 (max 448, saturating), f8e5m2 (max 57344) or fp4e2m1 "
                         "(max 6, saturating)"},
                 {.name = "block",
                  .kind = AttrKind::IntList,
                  .default_value = AttrValue{std::vector<int64_t>{128}},
                  .doc = "[B]: 1×B blocks along the last axis; [R, B]: R×B blocks over the last "
                         "two (each divides its axis)"},
                 {.name = "scale",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("f32")},
                  .doc = "the scales' dtype: f32, e8m0 (powers of two, rounded up) or f8e4m3 "
                         "(NVFP4's)"}},
       .dtypes = kFloatTypes,
       .output_dtype_attrs = {{0, "format"}, {1, "scale"}},
       .infer = infer_quantize,
       .reference = ref_quantize,
       .gradient = grad_detached,
       .detaches = true,
       .expand = expand_quantize(cache),
       .tests = {.kernel = {{.shapes = {{33, 256}}, .attrs = qa("f8e4m3", {128}, "f32")},
                            {.shapes = {{7, 96}}, .attrs = qa("f8e5m2", {32}, "e8m0")},
                            // MXFP4 and NVFP4.
                            {.shapes = {{5, 3, 64}}, .attrs = qa("fp4e2m1", {32}, "e8m0")},
                            {.shapes = {{9, 48}}, .attrs = qa("fp4e2m1", {16}, "f8e4m3")},
                            // Several tiles of 128 blocks, the last one partial.
                            {.shapes = {{300, 64}}, .attrs = qa("fp4e2m1", {32}, "e8m0")},
                            // Weights: 128×128 blocks, with a leading axis.
                            {.shapes = {{2, 256, 384}}, .attrs = qa("f8e4m3", {128, 128}, "f32")},
                            {.shapes = {{96, 64}}, .attrs = qa("fp4e2m1", {32, 16}, "e8m0")},
                            // A row block longer than a tile.
                            {.shapes = {{3, 8192}}, .attrs = qa("f8e4m3", {8192}, "e8m0")},
                            // Blocks of 512: four rows a CUDA block's tile.
                            {.shapes = {{5, 1024}}, .attrs = qa("f8e4m3", {512}, "f32")}},
                 .examples = {{.inputs = {{{8}, {0.3, 6, -1.2, 2.6, 12, 5, -7, 0.9}}},
                               .attrs = qa("fp4e2m1", {4}, "e8m0"),
                               .outputs = {{{8}, {0.5, 6, -1, 3, 6, 2, -4, 0.5}}, {{2}, {1, 2}}}},
                              // 896 / 448 = 2; a zero block's scale is 1; a NaN's block is NaN.
                              {.inputs = {{{6}, {896, 3.3, -0.0, 0.0, 1, nan}}},
                               .attrs = qa("f8e4m3", {2}, "f32"),
                               .outputs = {{{6}, {448, 1.625, -0.0, 0.0, nan, nan}},
                                           {{3}, {2, 1, nan}}}}}}});
  registry.add(
      {.name = "dequantize",
       .doc = "y = decode(q) · scale of q's block, one f32 multiply rounded to the dtype to names; "
              "the block "
              "is read from the shapes (q's extents over scale's); q: f8e4m3, f8e5m2 or fp4e2m1 "
              "codes, scale: f32, e8m0 or f8e4m3; no gradient flows back (stored codes are frozen)",
       .inputs = {"q", "scale"},
       .outputs = {"y"},
       .attrs = {{.name = "to",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("f32")},
                  .doc = "y's dtype: f32, bf16 or f16"}},
       .dtypes = kFloatTypes,
       .dtype_attr = "to",
       .infer = infer_dequantize,
       .reference = ref_dequantize,
       .gradient = grad_detached,
       .detaches = true,
       .expand = expand_dequantize(cache),
       .tests = {.kernel = {{.shapes = {{33, 256}, {33, 2}},
                             .derive = positive_scales,
                             .input_dtypes = {{0, DType::F8E4M3}, {1, DType::F32}}},
                            {.shapes = {{5, 3, 64}, {5, 3, 2}},
                             .derive = positive_scales,
                             .input_dtypes = {{0, DType::FP4E2M1}, {1, DType::E8M0}}},
                            {.shapes = {{9, 48}, {9, 3}},
                             .derive = positive_scales,
                             .input_dtypes = {{0, DType::FP4E2M1}, {1, DType::F8E4M3}}},
                            // Rows a whole number of CUDA blocks: no guarded block.
                            {.shapes = {{5, 1024}, {5, 8}},
                             .derive = positive_scales,
                             .input_dtypes = {{0, DType::F8E4M3}, {1, DType::F32}}},
                            {.shapes = {{2, 256, 384}, {2, 2, 3}},
                             .derive = positive_scales,
                             .input_dtypes = {{0, DType::F8E5M2}, {1, DType::E8M0}}}},
                 .examples = {{.inputs = {{{8}, {0.5, 6, -1, 3, 6, 2, -4, 0.5}}, {{2}, {1, 2}}},
                               .outputs = {{{8}, {0.5, 6, -1, 3, 12, 4, -8, 1}}},
                               .input_dtypes = {{0, DType::FP4E2M1}, {1, DType::E8M0}}}}}});
}

}  // namespace tilerun::kernels
