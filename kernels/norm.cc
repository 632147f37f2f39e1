// over 600 lines: rmsnorm and rmsnorm_grad share the fixed-row tiles (and the fused fake_quant that
// rides on the forward one), and the test cases that pin each kernel variant.
// Normalisations over the last axis (rows), or over groups of `group` elements of it (per-head
// norms: each group is a row of its own, so a grouped norm is the plain one over the [numel /
// group, group] view, and its weights have `group` elements): rmsnorm, one block per row; and its
// backward op rmsnorm_grad, dx fused with per-RB-row dgamma partial sums (RB = 1 up to 256 rows,
// doubling to 16), then a column sum in 16 fixed row groups (layernorm.cc follows the same plan).
// With D constant (and a multiple of 8) the dx kernel stages its rows in shared memory first.
// rmsnorm's `to` rounds y to another dtype as it is stored (an f32 residual stream's norm feeding
// bf16 GEMMs): the bits of a cast after it, one kernel fewer; its gradient reads that dtype's dy,
// widening it as it loads (the bits of a cast back first).
// rmsnorm_grad's optional cos and sin (rmsnorm_rope's gradient, rope.cc): dy is first turned back
// by rope's inverse rotation, rounded to dy's dtype as rope's kernel rounds it; in the staged dx
// kernel the turn happens on the staged rows (one kernel where rope and rmsnorm_grad took two,
// the same bits), elsewhere rope's own kernel runs first into scratch.
#include <algorithm>
#include <cmath>
#include <optional>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/norm_util.h"
#include "kernels/op_registry.h"
#include "kernels/quant_format.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * gamma, rows over the last axis (or its
// groups).
// y's dtype: `to`, or x's when it is empty or absent (a rule's attributes before defaults).
DType y_dtype(const TensorType& x, const Attrs& attrs) {
  return !attrs.count("to") || attr_string(attrs, "to").empty() ? x.dtype
                                                                : float_dtype_attr(attrs, "to");
}

// The fixed kernel's tile: about 2048 elements, at most 16 rows (the sums' tree holds 128 floats
// a row), the rows and gamma within 32 KB.
constexpr int64_t kFixedRowElems = 2048, kFixedRows = 16, kFixedRowBytes = 32 * 1024;
// With a fake_quant in it, the staged output rows and the block scales too, within 64 KB.
constexpr int64_t kFixedQuantBytes = 64 * 1024;

// The fixed kernel's rows per block for x seen as [rows, cols], or 0 when it does not serve them
// (cols not a multiple of 8, or the tile beyond its shared memory).
int64_t fixed_rows(DType dt, int64_t rows, int64_t cols) {
  const int64_t rb = std::max<int64_t>(1, std::min({rows, kFixedRowElems / cols, kFixedRows}));
  const bool fits = (rb + 1) * cols * static_cast<int64_t>(dtype_bytes(dt, 1)) <= kFixedRowBytes;
  return cols % 8 == 0 && fits ? rb : 0;
}

// Whether rmsnorm's fixed kernel takes the fake_quant its attributes name (quant_format):
// rows over the whole last axis (its blocks lie along it), the fixed kernel, and its tile of
// output rows and block scales beside the staged ones within kFixedQuantBytes.
bool quant_tile(const TensorType& x, const TensorType& y, const Attrs& attrs) {
  auto q = quant::row_quant_of(attrs, x.shape.back());
  auto [rows, cols] = norm_rows(x, attrs);
  const int64_t rb = fixed_rows(x.dtype, rows, cols);
  if (!q || cols != x.shape.back() || rb == 0) return false;
  const int64_t bytes = (rb + 1) * cols * static_cast<int64_t>(dtype_bytes(x.dtype, 1)) +
                        rb * cols * static_cast<int64_t>(dtype_bytes(y.dtype, 1)) +
                        quant::row_scales_bytes(rb, cols, *q);
  return bytes <= kFixedQuantBytes;
}

std::vector<TensorType> infer_rmsnorm(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  int64_t g = norm_group(in[0], attrs);
  TensorType gamma{in[0].dtype, {g}};
  expect_same(in[1], "gamma", gamma, norm_extent_name(attrs));
  TensorType y{y_dtype(in[0], attrs), in[0].shape};
  if (quant::row_quant_of(attrs, in[0].shape.back()) && !quant_tile(in[0], y, attrs))
    throw ShapeError("attribute 'quant_format': a fake_quant in rmsnorm's kernel needs x " +
                     to_string(in[0]) +
                     " normalised over its whole last axis, a multiple of 8 elements whose "
                     "tile of rows fits the fixed kernel's shared memory");
  return {y};
}

// (x, gamma, dy[, cos, sin]) -> (dx, dgamma); dy of x's shape, of x's dtype or of rmsnorm's
// `to`; rope's tables [T, R/2] (of dy's dtype, 2·R/2 <= D) over the whole last axis.
std::vector<TensorType> infer_rmsnorm_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  Attrs plain = attrs;
  plain["to"] = std::string();
  infer_rmsnorm({in[0], in[1]}, plain);
  expect_same(in[2], "dy", {y_dtype(in[0], attrs), in[0].shape}, "y");
  if (in.size() > 3) {
    const TensorType& x = in[0];
    if (x.shape.size() < 2 || norm_group(x, attrs) != x.shape.back())
      throw ShapeError(
          "input 'cos' (dy turned back by rope) needs x [T, ..., D] normalised over "
          "its whole last axis; x is " +
          to_string(x));
    const int64_t half = in[3].shape.size() == 2 ? in[3].shape[1] : 0;
    if (half < 1 || 2 * half > x.shape.back())
      throw ShapeError("input 'cos' is " + to_string(in[3]) + ", expected [" +
                       std::to_string(x.shape[0]) +
                       ", R/2] with 1 <= R <= " + std::to_string(x.shape.back()));
    expect_same(in[3], "cos", {in[2].dtype, {x.shape[0], half}}, "rope's table for dy");
    expect_same(in[4], "sin", in[3], "cos");
  }
  return {in[0], in[1]};
}

const AttrSpec kTo{.name = "to",
                   .kind = AttrKind::String,
                   .default_value = AttrValue{std::string()},
                   .doc = "y's dtype (f32, bf16 or f16), rounded as stored; empty: x's"};

const AttrSpec kEps{.name = "eps",
                    .kind = AttrKind::Float,
                    .default_value = AttrValue{1e-6},
                    .doc = "added to the mean square",
                    .positive = true};

// 1 / sqrt(mean(x[r, :]^2) + eps) of each row r.
std::vector<double> inv_rms(const RefTensor& x, double eps) {
  auto [rows, cols] = rows_cols(x.shape);
  std::vector<double> inv(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x.data[r * cols + c] * x.data[r * cols + c];
    inv[r] = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
  }
  return inv;
}

std::vector<RefTensor> ref_rmsnorm(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor x = as_norm_rows(in[0], attrs), &gamma = in[1];
  auto [rows, cols] = rows_cols(x.shape);
  std::vector<double> inv = inv_rms(x, attr_float(attrs, "eps"));
  RefTensor y = ref_zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y.data[r * cols + c] = x.data[r * cols + c] * inv[r] * gamma.data[c];
  y.shape = in[0].shape;
  if (auto q = quant::row_quant_of(attrs, y.shape.back())) quant::ref_quantize_rows(y, *q);
  return {y};
}

// With n = cols, i = inv_rms, g = gamma * dy (per element):
//   dx[r, c]   = i * g[c] - i^3 * x[r, c] * sum_k(g[k] * x[r, k]) / n
//   dgamma[c]  = sum_r dy[r, c] * x[r, c] * i[r]
// dy [T, ..., D] turned back by rope's tables [T, R/2] (the last R dims in interleaved pairs).
RefTensor ref_rope_back(const RefTensor& dy, const RefTensor& cos, const RefTensor& sin) {
  RefTensor out = dy;
  const int64_t t = dy.shape[0], d = dy.shape.back(), rows = dy.numel() / d, half = cos.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < half; ++i) {
      const int64_t e = r * d + d - 2 * half + 2 * i, at = (r / (rows / t)) * half + i;
      const double a = dy.data[e], b = dy.data[e + 1], c = cos.data[at], sn = sin.data[at];
      out.data[e] = a * c + b * sn;
      out.data[e + 1] = b * c - a * sn;
    }
  return out;
}

std::vector<RefTensor> ref_rmsnorm_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor turned = in.size() > 3 ? ref_rope_back(in[2], in[3], in[4]) : RefTensor{};
  const RefTensor x = as_norm_rows(in[0], attrs), &gamma = in[1];
  const RefTensor& dy = in.size() > 3 ? turned : in[2];
  auto [rows, cols] = rows_cols(x.shape);
  std::vector<double> inv = inv_rms(x, attr_float(attrs, "eps"));
  RefTensor dx = ref_zeros(x.shape), dgamma = ref_zeros(gamma.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x.data[r * cols];
    const double* dyr = &dy.data[r * cols];
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += gamma.data[c] * dyr[c] * xr[c];
    double i = inv[r], k = i * i * i * dot / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      dx.data[r * cols + c] = i * gamma.data[c] * dyr[c] - k * xr[c];
      dgamma.data[c] += dyr[c] * xr[c] * i;
    }
  }
  dx.shape = in[0].shape;
  return {dx, dgamma};
}

// One rmsnorm_grad computes both gradients (they share the per-row statistics); an output whose
// input needs no gradient gets a rule-local name, so nothing accumulates it.
std::vector<GradOp> grad_rmsnorm(const std::vector<TensorType>&, const Attrs& attrs,
                                 const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1]) return {};
  return {{"rmsnorm_grad",
           {"x0", "x1", "dy0"},
           {needs[0] ? "dx0" : "unused_dx", needs[1] ? "dx1" : "unused_dgamma"},
           {{"eps", attr_float(attrs, "eps")},
            {"group", attr_int(attrs, "group")},
            {"to", attr_string(attrs, "to")}}}};
}

// ---- Tile kernels --------------------------------------------------------------------------
// Tensors are seen as [R, D]: R rows of the last axis D.

constexpr int kThreads = 128;
// 1 / sqrt(mean of squares + eps) of `row`: one rounding each for sqrt and division.
cc::Val inv_rms_of(cc::Scope& s, const cc::Buf& x, const cc::Idx& row, const cc::Dim& d,
                   const cc::Val& eps) {
  cc::Val ss = s.reduce_sum(d, [&](cc::Idx j) {
    cc::Val v = x(row, j);
    return v * v;
  });
  return s.let(1.0f / cc::sqrt(ss / cc::to_f32(d) + eps), "inv");
}

// With `vec` (D a multiple of 8) a thread's elements of the elementwise passes are 16 bytes
// of a row at a time: the dims' divisibility proves the vectors aligned, so their global
// accesses move as vectors. The reductions keep their order (each thread its columns t, t + T,
// ...), so the bits do not change.
std::string vec_name(const std::string& name, bool vec) { return vec ? name + "_vec" : name; }

// A kernel's name: x's dtype, then y's (or dy's) where it differs.
std::string typed(const std::string& name, DType dtype, DType other) {
  std::string n = name + "_" + std::string(dtype_name(dtype));
  return other == dtype ? n : n + "_" + std::string(dtype_name(other));
}

// One block per row. Parameters: x, gamma, y; R, D; eps.
cc::Kernel build_rmsnorm(DType dtype, DType ydt, bool vec) {
  cc::KernelBuilder kb(typed(vec_name("rmsnorm", vec), dtype, ydt));
  cc::Dim r = kb.dim("R"), d = kb.dim("D", {.divisible_by = vec ? 8 : 1});
  cc::Buf x = kb.input("x", dtype, {r, d}), g = kb.input("gamma", dtype, {d});
  cc::Buf y = kb.output("y", ydt, {r, d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val inv = inv_rms_of(s, x, row, d, eps);
    if (vec) s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
    s.parallel(d, [&](cc::Idx j) { y(row, j) = x(row, j) * inv * g(j); });
  });
  return kb.build();
}

// build_rmsnorm (vec) with D constant: a tile of `rb` rows per block staged in shared memory by
// asynchronous copies (zeros past R), the rows' sums of squares at once (row_sums: the order of
// the dx kernels' sums, not reduce_sum's, so the fixed rmsnorm_rope's norm and this one, which its
// gradient recomputes, agree bit for bit), then y from the staged rows. One row per block with a
// block reduction each left the V4-mini query's recomputed norm (16384 rows of 512) at three
// times its floor. Parameters x, gamma, y; dim R; eps.
std::string rmsnorm_fixed_name(int64_t rb, int64_t d) {
  return "rmsnorm_rb" + std::to_string(rb) + "_d" + std::to_string(d);
}

// With `q`, the fake_quant after it in the same kernel: the tile's output rows rounded to y's
// dtype into shared memory, each block's scale from them (quant::row_scales), then y written as
// fake_quant writes it.
cc::Kernel build_rmsnorm_fixed(DType dtype, DType ydt, int64_t rb, int64_t dn,
                               const std::optional<quant::RowQuant>& q) {
  cc::KernelBuilder kb(typed(rmsnorm_fixed_name(rb, dn) + (q ? q->name() : ""), dtype, ydt));
  cc::Dim r = kb.dim("R");
  const cc::Val d(dn);
  cc::Buf x = kb.input("x", dtype, {r, d}), g = kb.input("gamma", dtype, {d});
  cc::Buf y = kb.output("y", ydt, {r, d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({cc::ceildiv(r, rb)}, kThreads, [&](cc::Scope& s) {
    cc::Idx r0 = s.let(s.block_idx(0) * rb, "r0");
    cc::Buf xs = s.alloc_shared("xs", dtype, {rb, dn});
    cc::Buf gs = s.alloc_shared("gs", dtype, {dn});
    s.copy_async(xs, x.region({r0, cc::Val(0)}, {rb, dn}));
    s.copy_async(gs, g.region({cc::Val(0)}, {dn}));
    s.async_commit();
    s.async_wait(0);
    s.barrier();
    cc::Buf inv = norm_inverses(s, xs, rb, dn, kThreads, eps);
    cc::Buf ys;
    std::optional<quant::RowScales> scales;
    if (q) {
      ys = s.alloc_shared("ys", ydt, {rb, dn});
      s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
      s.parallel(cc::Val(rb), d,
                 [&](cc::Idx t, cc::Idx j) { ys(t, j) = xs(t, j) * inv(t) * gs(j); });
      s.barrier();
      scales = quant::row_scales(s, ys, rb, dn, *q);
    }
    // The tile wholly inside R runs without a guard (a guard keeps accesses scalar).
    auto rows = [&](bool guarded) {
      s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
      s.parallel(cc::Val(rb), d, [&](cc::Idx t, cc::Idx j) {
        auto store = [&] {
          y(r0 + t, j) = q ? scales->value(s, t, j, ys(t, j)) : xs(t, j) * inv(t) * gs(j);
        };
        if (guarded)
          s.if_then(r0 + t < r, store);
        else
          store();
      });
    };
    s.if_then_else(
        r0 + rb <= r, [&] { rows(false); }, [&] { rows(true); });
  });
  return kb.build();
}

// dx for `rb` rows per block, fused with those rows' dgamma partial sums (f32, in row order),
// written owner-computes: the thread of column j owns partial[block, j]. A constant rb keeps
// the row index linear in the block index. Parameters: x, gamma, dy, dx, partial; R, D; eps.
std::string rmsnorm_grad_dx_name(int64_t rb, bool vec) {
  return vec_name(rb == 1 ? "rmsnorm_grad_dx" : "rmsnorm_grad_dx_rb" + std::to_string(rb), vec);
}

cc::Kernel build_rmsnorm_grad_dx(DType dtype, DType dydt, int64_t rb, bool vec) {
  cc::KernelBuilder kb(typed(rmsnorm_grad_dx_name(rb, vec), dtype, dydt));
  cc::Dim r = kb.dim("R"), d = kb.dim("D", {.divisible_by = vec ? 8 : 1});
  cc::Buf x = kb.input("x", dtype, {r, d}), g = kb.input("gamma", dtype, {d});
  cc::Buf dy = kb.input("dy", dydt, {r, d});
  cc::Buf dx = kb.output("dx", dtype, {r, d});
  cc::Buf partial = kb.output("partial", DType::F32, {cc::ceildiv(r, rb), d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({cc::ceildiv(r, rb)}, kThreads, [&](cc::Scope& s) {
    cc::Idx blk = s.block_idx(0), r0 = blk * rb;
    // The row's two sums (of x^2 and of gamma * dy * x) in one pass and one tree: the order of
    // reduce_sum (each thread its columns j = t, t + T, ... in order, then a tree over threads
    // in index order), for both values at once.
    cc::Buf ss_part = s.alloc_fragment("ss_part", DType::F32, {kThreads});
    cc::Buf dot_part = s.alloc_fragment("dot_part", DType::F32, {kThreads});
    cc::Buf tree = s.alloc_shared("tree", DType::F32, {2, kThreads});
    auto one_row = [&](const cc::Idx& t) {
      cc::Idx row = r0 + t;
      s.parallel(kThreads, [&](cc::Idx th) {
        ss_part(th) = -0.0f;
        dot_part(th) = -0.0f;
        s.serial(cc::ceildiv(d, cc::Val(kThreads)), [&](cc::Idx it) {
          cc::Idx j = it * kThreads + th;
          s.if_then(j < d, [&] {
            cc::Val xv = s.let(x(row, j), "x");
            ss_part(th) = ss_part(th) + xv * xv;
            dot_part(th) = dot_part(th) + g(j) * dy(row, j) * xv;
          });
        });
        tree(0, th) = ss_part(th);
        tree(1, th) = dot_part(th);
      });
      s.barrier();
      for (int64_t half = kThreads / 2; half >= 1; half /= 2) {
        s.parallel(2, half,
                   [&](cc::Idx v, cc::Idx th) { tree(v, th) = tree(v, th) + tree(v, th + half); });
        s.barrier();
      }
      cc::Val inv = s.let(1.0f / cc::sqrt(tree(0, 0) / cc::to_f32(d) + eps), "inv");
      cc::Val dot = s.let(tree(1, 0), "dot");
      s.barrier();  // every thread has read the sums before the next row rewrites `tree`
      // dx = inv * g * dy - inv^3 * x * dot / D.
      cc::Val k = s.let(inv * inv * inv * dot / cc::to_f32(d), "k");
      // first: whether this row starts the block's partial sums (false: adds to them; unset:
      // decided per element, as the scalar kernel does).
      auto dx_and_partial = [&](std::optional<bool> first) {
        s.parallel(d, [&](cc::Idx j) {
          cc::Val xv = s.let(x(row, j), "x"), dyv = s.let(dy(row, j), "dy");
          dx(row, j) = inv * g(j) * dyv - k * xv;
          cc::Val term = s.let(dyv * xv * inv, "term");
          if (rb == 1 || first == true)
            partial(blk, j) = term;
          else if (first == false)
            partial(blk, j) = partial(blk, j) + term;
          else
            s.if_then_else(
                t == 0, [&] { partial(blk, j) = term; },
                [&] { partial(blk, j) = partial(blk, j) + term; });
        });
      };
      if (rb == 1 || !vec) {
        dx_and_partial(std::nullopt);
        return;
      }
      // The row choice outside the loop (a branch inside it keeps the accesses scalar). The
      // f32 partials cap the vectors at 4 elements: 8 bytes of bf16 a thread.
      s.if_then_else(
          t == 0, [&] { dx_and_partial(true); }, [&] { dx_and_partial(false); });
    };
    if (rb == 1)
      one_row(cc::Idx(0));
    else
      s.serial(cc::min(cc::Val(rb), r - r0), one_row);
  });
  return kb.build();
}

// build_rmsnorm_grad_dx (vec) with D constant: the block's rows of x and dy and gamma staged in
// shared memory by asynchronous copies (all of the block's loads in flight at once; zeros past
// R), every row's two sums at once (row_sums: the general kernel's order, one barrier per tree
// level for all rows, not per row), then each row's dx and its dgamma terms, the partial sums
// kept in registers across the rows and written once. The general kernel reads each row after
// the previous row's stores (its loads wait behind them, as the inputs may alias the outputs),
// reduces each row with its own barriers and rewrites its partials each row. Same sums in the
// same order (the partials start from -0, which adds exactly): the same bits. Parameters as the
// general kernel's; dim R.
std::string rmsnorm_grad_dx_fixed_name(int64_t rb, int64_t d) {
  return rmsnorm_grad_dx_name(rb, true) + "_d" + std::to_string(d);
}

// `rope`: dy turned back by rope's tables first (rmsnorm_rope's gradient), `heads` rows a token.
struct RopeBack {
  int64_t heads = 0, pairs = 0;  // pairs 0: none
};
std::string rope_back_name(const RopeBack& rope) {
  return rope.pairs ? "_rope_h" + std::to_string(rope.heads) + "_r" + std::to_string(rope.pairs)
                    : "";
}

// With `rope` the rows are T·heads (dim T), cos and sin [T, pairs] follow dy.
cc::Kernel build_rmsnorm_grad_dx_fixed(DType dtype, DType dydt, int64_t rb, int64_t dn,
                                       RopeBack rope = {}) {
  cc::KernelBuilder kb(
      typed(rmsnorm_grad_dx_fixed_name(rb, dn) + rope_back_name(rope), dtype, dydt));
  const cc::Val r = rope.pairs ? cc::Val(kb.dim("T")) * rope.heads : cc::Val(kb.dim("R"));
  const cc::Val d(dn);
  cc::Buf x = kb.input("x", dtype, {r, d}), g = kb.input("gamma", dtype, {d});
  cc::Buf dy = kb.input("dy", dydt, {r, d});
  const cc::Val tokens = rope.pairs ? r / rope.heads : cc::Val();
  cc::Buf cos = rope.pairs ? kb.input("cos", dydt, {tokens, cc::Val(rope.pairs)}) : cc::Buf{};
  cc::Buf sin = rope.pairs ? kb.input("sin", dydt, {tokens, cc::Val(rope.pairs)}) : cc::Buf{};
  cc::Buf dx = kb.output("dx", dtype, {r, d});
  cc::Buf partial = kb.output("partial", DType::F32, {cc::ceildiv(r, rb), d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({cc::ceildiv(r, rb)}, kThreads, [&](cc::Scope& s) {
    cc::Idx blk = s.block_idx(0);
    cc::Idx r0 = s.let(blk * rb, "r0");
    cc::Buf xs = s.alloc_shared("xs", dtype, {rb, dn});
    cc::Buf dys = s.alloc_shared("dys", dydt, {rb, dn});
    cc::Buf gs = s.alloc_shared("gs", dtype, {dn});
    s.copy_async(xs, x.region({r0, cc::Val(0)}, {rb, dn}));
    s.copy_async(dys, dy.region({r0, cc::Val(0)}, {rb, dn}));
    s.copy_async(gs, g.region({cc::Val(0)}, {dn}));
    s.async_commit();
    cc::Buf pf = s.alloc_fragment("pf", DType::F32, {dn});
    s.annotate_layout(4);  // the f32 partials: 16 bytes a thread
    s.parallel(d, [&](cc::Idx j) { pf(j) = -0.0f; });
    s.async_wait(0);
    s.barrier();
    if (rope.pairs) {
      // dy's pairs turned back in place, rounded to its dtype (rope's kernel's values: a·c - b·sn,
      // a·sn + b·c with sn = -sin). A row past R (zeros) reads the last token's tables.
      const int64_t base = dn - 2 * rope.pairs;
      s.parallel(cc::Val(rb), cc::Val(rope.pairs), [&](cc::Idx t, cc::Idx i) {
        cc::Idx tok = s.let(cc::min(r0 + t, r - 1) / rope.heads, "tok");
        cc::Idx e = s.let(base + 2 * i, "e");
        cc::Val a = s.let(dys(t, e), "a"), b = s.let(dys(t, e + 1), "b");
        cc::Val c = s.let(cos(tok, i), "c"), sn = s.let(-cc::Val(sin(tok, i)), "sn");
        dys(t, e) = a * c - b * sn;
        dys(t, e + 1) = a * sn + b * c;
      });
      s.barrier();
    }
    // Per row: sum of x², sum of gamma·dy·x (build_rmsnorm_grad_dx's terms).
    cc::Buf tree = row_sums(s, rb, dn, 2, kThreads, [&](const cc::Idx& t, const cc::Idx& j) {
      cc::Val xv = s.let(xs(t, j), "x");
      return std::vector<cc::Val>{xv * xv, gs(j) * dys(t, j) * xv};
    });
    // coef[0, t] = inv, coef[1, t] = inv³·dot / D: dx = inv·g·dy - coef[1]·x.
    cc::Buf coef = s.alloc_shared("coef", DType::F32, {2, rb});
    s.parallel(cc::Val(rb), [&](cc::Idx t) {
      cc::Val inv = s.let(1.0f / cc::sqrt(tree(0, t, 0) / cc::to_f32(d) + eps), "inv");
      coef(0, t) = inv;
      coef(1, t) = inv * inv * inv * tree(1, t, 0) / cc::to_f32(d);
    });
    s.barrier();
    s.serial(cc::min(cc::Val(rb), r - r0), [&](cc::Idx t) {
      cc::Val inv = s.let(coef(0, t), "inv"), k = s.let(coef(1, t), "k");
      s.parallel(d, [&](cc::Idx j) {
        cc::Val xv = s.let(xs(t, j), "x"), dyv = s.let(dys(t, j), "dy");
        dx(r0 + t, j) = inv * gs(j) * dyv - k * xv;
        pf(j) = pf(j) + dyv * xv * inv;
      });
    });
    s.parallel(d, [&](cc::Idx j) { partial(blk, j) = pf(j); });
  });
  return kb.build();
}

// The fixed kernel's shared tiles (x and dy rows, gamma) stay within 40 KB (with the sums' tree,
// 56 KB at most: 4 blocks an SM).
constexpr int64_t kFixedDxBytes = 40 * 1024;

ExpandFn expand_rmsnorm(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    const DType dt = in[0].dtype, ydt = out[0].dtype;
    auto [rows, cols] = norm_rows(in[0], attrs);
    const bool vec = cols % 8 == 0;
    const int64_t rb = fixed_rows(dt, rows, cols);
    const std::optional<quant::RowQuant> q = quant::row_quant_of(attrs, in[0].shape.back());
    if (q && !quant_tile(in[0], out[0], attrs))
      throw ShapeError("rmsnorm's fake_quant (quant_format) does not fit its kernel");
    if (rb > 0)
      return OpExpansion{
          .calls = {{.kernel = cache->get(
                         typed(rmsnorm_fixed_name(rb, cols) + (q ? q->name() : ""), dt, ydt),
                         [&] { return build_rmsnorm_fixed(dt, ydt, rb, cols, q); }),
                     .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                     .dims = {rows},
                     .scalars = {attr_float(attrs, "eps")}}}};
    KernelCall call{.kernel = cache->get(typed(vec_name("rmsnorm", vec), dt, ydt),
                                         [&] { return build_rmsnorm(dt, ydt, vec); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {rows, cols},
                    .scalars = {attr_float(attrs, "eps")}};
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_rmsnorm_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    const DType dt = out[0].dtype, dydt = in[2].dtype;
    auto [rows, cols] = norm_rows(in[0], attrs);
    const bool vec = cols % 8 == 0;
    // The staged kernel's tiles: rb rows of x and of dy, and gamma.
    auto staged_bytes = [&](int64_t rb) {
      return (rb * static_cast<int64_t>(dtype_bytes(dt, 1) + dtype_bytes(dydt, 1)) +
              static_cast<int64_t>(dtype_bytes(dt, 1))) *
             cols;
    };
    // Where rows_per_block's rows would not fit, the staged kernel takes fewer a block, down to a
    // quarter of them (each halving doubles the f32 partials dgamma reads back): on the H100 the
    // general kernel ran a [4096, 2048] bf16 dx in 60.1 us (256 blocks of 16 rows, each row's sums
    // behind the last row's stores), 6x its memory floor.
    int64_t rb = rows_per_block(rows);
    const int64_t least_rb = std::max<int64_t>(1, rb / 4);
    while (rb > least_rb && staged_bytes(rb) > kFixedDxBytes) rb /= 2;
    const bool fixed = vec && staged_bytes(rb) <= kFixedDxBytes;
    if (!fixed) rb = rows_per_block(rows);
    const int64_t blocks = (rows + rb - 1) / rb;
    const bool turn = in.size() > 3;
    const RopeBack rope = turn && fixed
                              ? RopeBack{.heads = rows / in[0].shape[0], .pairs = in[3].shape[1]}
                              : RopeBack{};
    OpExpansion ex{.scratch = {TensorType{DType::F32, {blocks, cols}}}};
    KernelArg dy = input_slot(2);
    if (turn && !fixed) {
      // rope's own kernel turns dy back into scratch 1 first.
      const OpSchema& rope_op = *op_registry().find("rope");
      const Attrs inverse = {{"inverse", true}};
      const std::vector<TensorType> rope_in = {in[2], in[3], in[4]};
      ex.scratch.push_back(in[2]);
      dy = scratch_slot(1);
      for (KernelCall call : rope_op.expand(rope_in, {in[2]}, inverse).calls) {
        for (KernelArg& arg : call.buffers)
          arg = arg.kind == KernelArg::Kind::Output ? dy : input_slot(2 + arg.index);
        ex.calls.push_back(call);
      }
    }
    KernelCall dx{
        .kernel = fixed ? cache->get(
                              typed(rmsnorm_grad_dx_fixed_name(rb, cols) + rope_back_name(rope), dt,
                                    dydt),
                              [&] { return build_rmsnorm_grad_dx_fixed(dt, dydt, rb, cols, rope); })
                        : cache->get(typed(rmsnorm_grad_dx_name(rb, vec), dt, dydt),
                                     [&] { return build_rmsnorm_grad_dx(dt, dydt, rb, vec); }),
        .buffers = {input_slot(0), input_slot(1), dy, output_slot(0), scratch_slot(0)},
        .dims = fixed ? std::vector<int64_t>{rope.pairs ? in[0].shape[0] : rows}
                      : std::vector<int64_t>{rows, cols},
        .scalars = {attr_float(attrs, "eps")}};
    if (rope.pairs)
      dx.buffers = {input_slot(0),  input_slot(1),  dy, input_slot(3), input_slot(4),
                    output_slot(0), scratch_slot(0)};
    KernelCall dgamma{.kernel = cache->get(kernel_key("rmsnorm_grad_dgamma", dt),
                                           [&] { return build_partial_column_sum(dt); }),
                      .buffers = {scratch_slot(0), output_slot(1)},
                      .dims = {blocks, cols}};
    ex.calls.push_back(dx);
    ex.calls.push_back(dgamma);
    return ex;
  };
}

std::vector<AttrSpec> with_quant(std::vector<AttrSpec> attrs) {
  for (AttrSpec& a : quant::row_quant_attrs()) attrs.push_back(std::move(a));
  return attrs;
}

}  // namespace

void register_norm(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "rmsnorm",
       .doc = "y = x * rsqrt(mean(x^2, last axis) + eps) * gamma, rounded to the dtype named by to "
              "(x's if empty); with quant_format, then a fake_quant of y in the same kernel",
       .inputs = {"x", "gamma"},
       .outputs = {"y"},
       .attrs = with_quant({kEps, kNormGroup, kTo}),
       .infer = infer_rmsnorm,
       .reference = ref_rmsnorm,
       .gradient = grad_rmsnorm,
       .expand = expand_rmsnorm(cache),
       .quant_epilogue = [](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                            const Attrs& attrs) { return quant_tile(in[0], out[0], attrs); },
       .tests = {.kernel = {{{{1, 1}, {1}}},
                            {{{7, 33}, {33}}},
                            {{{130, 7}, {7}}, {{"eps", 1e-5}}},
                            {{{2, 3, 130}, {130}}},
                            {{{5, 64}, {16}}, {{"group", int64_t{16}}}},  // per-head: 4 groups
                            {{{3, 1032}, {1032}}},  // vectors: 8 rounds and a partial one
                            {{{37, 512}, {512}}},   // tiles of 4 rows, the last one guarded
                            // A fake_quant in the kernel (graph/fold_quant): FP8 per 128, and
                            // FP4 with power-of-two scales on the first 3 of 4 blocks of 32.
                            // In 16 bits: Session.FoldedQuantEpiloguesGiveTheSameBits.
                            {.shapes = {{37, 512}, {512}},
                             .attrs = {{"quant_format", std::string("f8e4m3")},
                                       {"quant_block", int64_t{128}}},
                             .reference_dtypes = {DType::F32}},
                            {.shapes = {{21, 128}, {128}},
                             .attrs = {{"quant_format", std::string("fp4e2m1")},
                                       {"quant_block", int64_t{32}},
                                       {"quant_scale", std::string("ue8m0")},
                                       {"quant_extent", int64_t{96}}},
                             .reference_dtypes = {DType::F32}}},
                 .gradient = {{{{5, 7}, {7}}},
                              {{{2, 8}, {4}}, {{"group", int64_t{4}}, {"eps", 0.1}}},
                              {{{2, 3, 9}, {9}}, {{"eps", 0.5}}},
                              {{{1}, {1}}, {{"eps", 0.1}}}},
                 // rms([3, 4]) = sqrt(12.5).
                 .examples = {{.inputs = {{{1, 2}, {3, 4}}, {{2}, {1, 2}}},
                               .attrs = {{"eps", 0.0}},
                               .outputs = {{{1, 2}, {0.848528137423857, 2.262741699796952}}}}}}});
  registry.add(
      {.name = "rmsnorm_grad",
       .doc = "(dx, dgamma) of rmsnorm from (x, gamma, dy) (the backward op of rmsnorm); with "
              "cos and sin, dy first turned back by rope's inverse rotation (rmsnorm_rope's)",
       .inputs = {"x", "gamma", "dy", "cos", "sin"},
       .optional_inputs = 2,
       .outputs = {"dx", "dgamma"},
       .attrs = {kEps, kNormGroup, kTo},
       .infer = infer_rmsnorm_grad,
       .reference = ref_rmsnorm_grad,
       .expand = expand_rmsnorm_grad(cache),
       .tests = {.kernel =
                     {
                         {{{1, 1}, {1}, {1, 1}}, {{"eps", 0.1}}},
                         {{{7, 33}, {33}, {7, 33}}},
                         {{{33, 130}, {130}, {33, 130}}},  // 33 row partials, 9 column blocks
                         {{{130, 7}, {7}, {130, 7}}, {{"eps", 1e-5}}},
                         {{{1001, 33}, {33}, {1001, 33}}},  // 4 rows per partial, last ragged
                         {{{6, 32}, {8}, {6, 32}}, {{"group", int64_t{8}}}},
                         {{{1001, 40}, {40}, {1001, 40}}},  // vectors, 4 rows per partial
                         {{{5, 1032}, {1032}, {5, 1032}}},  // vectors, a partial round
                         {{{1030, 64}, {64}, {1030, 64}}},  // 8 rows per partial, last ragged
                         // staged with fewer rows a block than rows_per_block's 8 (f32 2, bf16
                         // 4), last ragged
                         {{{1203, 1544}, {1544}, {1203, 1544}}},
                         // dy turned back by rope first: on the staged rows (3 heads a token,
                         // 8 pairs of 64 dims), and by rope's kernel (D = 33: no staged kernel)
                         {{{5, 3, 64}, {64}, {5, 3, 64}, {5, 8}, {5, 8}}},
                         {{{70, 64}, {64}, {70, 64}, {70, 32}, {70, 32}}},
                         {{{4, 2, 33}, {33}, {4, 2, 33}, {4, 4}, {4, 4}}},
                     },
                 // x = [3, 4], i = 1/sqrt(12.5): dx = [16/25, -12/25] i, dgamma = [3i, 0].
                 .examples = {{.inputs = {{{1, 2}, {3, 4}}, {{2}, {1, 1}}, {{1, 2}, {1, 0}}},
                               .attrs = {{"eps", 0.0}},
                               .outputs = {{{1, 2}, {0.18101933598375616, -0.13576450198781712}},
                                           {{2}, {0.848528137423857, 0}}}}}}});
}

}  // namespace tilerun::kernels
