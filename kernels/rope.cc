// over 600 lines: rope, rope_grad and rmsnorm_rope share their rotation and row helpers, and each
// has a general kernel and one specialised on the row's shape beside it.
// Rotary position embedding on the last R dims of each head, and RMSNorm fused with it (the V4
// query and KV paths, V4_LAYER.md steps 2 and 3: RMSNorm, then RoPE on the last 64 dims).
//   rope(x, cos, sin): x [T, ..., D], tables [T, R/2] (R <= D, from the model: exact tables, so
//   positions and frequency scaling are the model's choice); pair i of a row is the dims
//   (D - R + 2i, D - R + 2i + 1) (interleaved, as DeepSeek's complex view of x):
//     y[e] = a·cos - b·sin, y[e + 1] = a·sin + b·cos, a = x[e], b = x[e + 1]; other dims copied.
//   rmsnorm_rope(x, gamma, cos, sin) = rope(rmsnorm(x, gamma), cos, sin), over the last axis.
// Kernels: rope and rmsnorm_rope one block per row (a token's head), the norm's sum of squares a
// block reduction (with the row's shape constant: a tile of heads per block, rmsnorm_rope's rows
// staged in shared memory); rope_grad one block per token: dx rotated back, then one thread per
// table entry summing over the heads in order. rmsnorm_rope's gradient is rmsnorm_grad with the
// tables (it turns dy back itself; where the tables need gradients, the norm recomputed and
// rope_grad turn it first): no atomics, fixed orders.
#include <algorithm>
#include <cmath>
#include <functional>
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

constexpr int kThreads = 128;

// ---- Inference -------------------------------------------------------------------------------

// x [T, ..., D] and its tables [T, R/2], 2·(R/2) <= D.
void check_rope(const TensorType& x, const TensorType& cos, const TensorType& sin) {
  expect_float(x, "x");
  if (x.shape.size() < 2)
    throw ShapeError("input 'x' is " + to_string(x) + ", expected [T, ..., D]");
  expect_rank(cos, 2, "cos");
  if (cos.dtype != x.dtype || cos.shape[0] != x.shape[0] || 2 * cos.shape[1] > x.shape.back() ||
      cos.shape[1] < 1)
    throw ShapeError("input 'cos' is " + to_string(cos) + ", expected " +
                     std::string(dtype_name(x.dtype)) + "[" + std::to_string(x.shape[0]) +
                     ", R/2] with 1 <= R <= " + std::to_string(x.shape.back()) + " like 'x'");
  expect_same(sin, "sin", cos, "cos");
}

std::vector<TensorType> infer_rope(const std::vector<TensorType>& in, const Attrs&) {
  check_rope(in[0], in[1], in[2]);
  return {in[0]};
}

// (x, cos, sin, dy) -> (dx, dcos, dsin)
std::vector<TensorType> infer_rope_grad(const std::vector<TensorType>& in, const Attrs&) {
  check_rope(in[0], in[1], in[2]);
  expect_same(in[3], "dy", in[0], "x");
  return {in[0], in[1], in[2]};
}

bool quant_tile(const std::vector<TensorType>& in, const Attrs& attrs);

std::vector<TensorType> infer_rmsnorm_rope(const std::vector<TensorType>& in, const Attrs& attrs) {
  check_rope(in[0], in[2], in[3]);
  expect_same(in[1], "gamma", TensorType{in[0].dtype, {in[0].shape.back()}}, "the last axis of x");
  if (quant::row_quant_of(attrs, in[0].shape.back()) && !quant_tile(in, attrs))
    throw ShapeError("attribute 'quant_format': a fake_quant in rmsnorm_rope's kernel needs x " +
                     to_string(in[0]) +
                     " with the copied dims and the pairs in whole vectors (the fixed kernel) "
                     "and its tile within its shared memory");
  return {in[0]};
}

// ---- Reference (double) ----------------------------------------------------------------------

// x as [T, H, D] with R/2 pairs per row.
struct RopeView {
  int64_t t, h, d, half;
};
RopeView view_of(const RefTensor& x, const RefTensor& cos) {
  const int64_t t = x.shape[0], d = x.shape.back();
  return {t, x.numel() / (t * d), d, cos.shape[1]};
}

RefTensor ref_rope_of(const RefTensor& x, const RefTensor& cos, const RefTensor& sin) {
  const RopeView v = view_of(x, cos);
  RefTensor y = x;
  for (int64_t t = 0; t < v.t; ++t)
    for (int64_t h = 0; h < v.h; ++h)
      for (int64_t i = 0; i < v.half; ++i) {
        const int64_t e = (t * v.h + h) * v.d + v.d - 2 * v.half + 2 * i;
        const double a = x.data[e], b = x.data[e + 1];
        const double c = cos.data[t * v.half + i], s = sin.data[t * v.half + i];
        y.data[e] = a * c - b * s;
        y.data[e + 1] = a * s + b * c;
      }
  return y;
}

std::vector<RefTensor> ref_rope(const std::vector<RefTensor>& in, const Attrs& attrs) {
  if (!attr_bool(attrs, "inverse")) return {ref_rope_of(in[0], in[1], in[2])};
  RefTensor nsin = in[2];
  for (double& v : nsin.data) v = -v;
  return {ref_rope_of(in[0], in[1], nsin)};
}

// dx = the rotation back; dcos[t, i] = Σ_h dya·a + dyb·b; dsin[t, i] = Σ_h dyb·a - dya·b.
std::vector<RefTensor> ref_rope_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &x = in[0], &cos = in[1], &sin = in[2], &dy = in[3];
  const RopeView v = view_of(x, cos);
  RefTensor dx = dy, dcos = ref_zeros(cos.shape), dsin = ref_zeros(sin.shape);
  for (int64_t t = 0; t < v.t; ++t)
    for (int64_t h = 0; h < v.h; ++h)
      for (int64_t i = 0; i < v.half; ++i) {
        const int64_t e = (t * v.h + h) * v.d + v.d - 2 * v.half + 2 * i, at = t * v.half + i;
        const double a = x.data[e], b = x.data[e + 1], ga = dy.data[e], gb = dy.data[e + 1];
        const double c = cos.data[at], s = sin.data[at];
        dx.data[e] = ga * c + gb * s;
        dx.data[e + 1] = gb * c - ga * s;
        dcos.data[at] += ga * a + gb * b;
        dsin.data[at] += gb * a - ga * b;
      }
  return {dx, dcos, dsin};
}

std::vector<RefTensor> ref_rmsnorm_rope(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &gamma = in[1];
  const int64_t d = x.shape.back(), rows = x.numel() / d;
  RefTensor z = x;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += x.data[r * d + c] * x.data[r * d + c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + attr_float(attrs, "eps"));
    for (int64_t c = 0; c < d; ++c) z.data[r * d + c] = x.data[r * d + c] * inv * gamma.data[c];
  }
  RefTensor y = ref_rope_of(z, in[2], in[3]);
  if (auto q = quant::row_quant_of(attrs, d)) quant::ref_quantize_rows(y, *q);
  return {y};
}

// ---- Gradient rules ----------------------------------------------------------------------------

std::string grad_name(const std::vector<bool>& needs, int i) {
  return needs[i] ? "dx" + std::to_string(i) : "unused" + std::to_string(i);
}

// With no gradient for the tables (the usual case: they are constants), dx is dy rotated back:
// the opposite rope, one light kernel. Otherwise rope_grad; for an inverse rope it runs on the
// negated sin, and sin's gradient is the negated one it gives.
std::vector<GradOp> grad_rope(const std::vector<TensorType>&, const Attrs& attrs,
                              const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1] && !needs[2]) return {};
  const bool inverse = attr_bool(attrs, "inverse");
  if (!needs[1] && !needs[2])
    return {{"rope", {"dy0", "x1", "x2"}, {"dx0"}, {{"inverse", !inverse}}}};
  if (!inverse)
    return {{"rope_grad",
             {"x0", "x1", "x2", "dy0"},
             {grad_name(needs, 0), grad_name(needs, 1), grad_name(needs, 2)},
             {}}};
  std::vector<GradOp> ops = {
      {"neg", {"x2"}, {"nsin"}, {}},
      {"rope_grad",
       {"x0", "x1", "nsin", "dy0"},
       {grad_name(needs, 0), grad_name(needs, 1), needs[2] ? "dnsin" : "unused2"},
       {}}};
  if (needs[2]) ops.push_back({"neg", {"dnsin"}, {"dx2"}, {}});
  return ops;
}

// dy rotated back, then the norm's own backward; the norm's output is recomputed only where the
// tables need gradients (theirs read it).
std::vector<GradOp> grad_rmsnorm_rope(const std::vector<TensorType>&, const Attrs& attrs,
                                      const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1] && !needs[2] && !needs[3]) return {};
  const Attrs eps = {{"eps", attr_float(attrs, "eps")}};
  // Constant tables: dy rotated back needs no recomputed norm (only the tables' gradients read it).
  // rmsnorm_grad turns dy back itself (with the staged rows, in the same kernel).
  if (!needs[2] && !needs[3])
    return {{"rmsnorm_grad",
             {"x0", "x1", "dy0", "x2", "x3"},
             {grad_name(needs, 0), grad_name(needs, 1)},
             eps}};
  return {
      {"rmsnorm", {"x0", "x1"}, {"z"}, eps},
      {"rope_grad", {"z", "x2", "x3", "dy0"}, {"dz", grad_name(needs, 2), grad_name(needs, 3)}, {}},
      {"rmsnorm_grad", {"x0", "x1", "dz"}, {grad_name(needs, 0), grad_name(needs, 1)}, eps}};
}

// ---- Kernels ---------------------------------------------------------------------------------

// The rotation of element j of a row whose (normalised) values are value(k): the first D - R
// dims copied, then pairs. The even member e = j - (j - base) % 2.
cc::Val rotated(cc::Scope& s, const std::function<cc::Val(cc::Val)>& value, const cc::Idx& j,
                const cc::Val& base, const cc::Val& c, const cc::Val& sn) {
  cc::Idx odd = s.let((j - base) % 2, "odd");
  cc::Idx e = s.let(j - odd, "e");
  cc::Val a = s.let(value(e), "a"), b = s.let(value(e + 1), "b");
  return cc::select(odd == 0, a * c - b * sn, a * sn + b * c);
}

// The rows are D = D0 + 2·R2 long (D0 dims copied, R2 pairs), written so that the analysis
// knows the pairs fit in the row.
// With `vec` (D0 a multiple of 8, R2 of 4) the copied dims have a loop of their own with no
// branch in it, 16 bytes a thread at a time, so their global accesses move as vectors (a branch
// inside the loop keeps them scalar); the rotated pairs read each other's element, which no
// vector covers, and stay scalar.
std::string rope_name(const std::string& name, bool vec) { return vec ? name + "_vec" : name; }

// One block per row (t, h). Parameters x [T, H, D], (gamma [D],) cos, sin [T, R2], y; dims T, H,
// D0, R2; (scalar eps).
cc::Kernel build_rope(DType dtype, bool norm, bool vec, bool inverse) {
  cc::KernelBuilder kb(rope_name(norm ? "rmsnorm_rope" : "rope", vec) + (inverse ? "_inv_" : "_") +
                       std::string(dtype_name(dtype)));
  cc::Dim t = kb.dim("T"), h = kb.dim("H");
  cc::Dim d0 = kb.dim("D0", {.min = 0, .divisible_by = vec ? 8 : 1});  // 0: every dim rotated
  cc::Dim r2 = kb.dim("R2", {.divisible_by = vec ? 4 : 1});
  cc::Val d = d0 + 2 * r2;
  cc::Buf x = kb.input("x", dtype, {t, h, d});
  cc::Buf g = norm ? kb.input("gamma", dtype, {d}) : cc::Buf();
  cc::Buf cos = kb.input("cos", dtype, {t, r2}), sin = kb.input("sin", dtype, {t, r2});
  cc::Buf y = kb.output("y", dtype, {t, h, d});
  cc::Val eps = norm ? kb.scalar_f32("eps") : cc::Val();
  kb.body({t, h}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0), head = s.block_idx(1);
    cc::Val inv;
    if (norm) {
      cc::Val ss = s.reduce_sum(d, [&](cc::Idx j) {
        cc::Val v = x(tok, head, j);
        return v * v;
      });
      inv = s.let(1.0f / cc::sqrt(ss / cc::to_f32(d) + eps), "inv");
    }
    auto value = [&](cc::Val k) {
      return norm ? cc::Val(x(tok, head, k) * inv * g(k)) : cc::Val(x(tok, head, k));
    };
    // The inverse rotation turns by minus the angle (negation is exact).
    auto sn = [&](const cc::Idx& i) {
      return inverse ? -cc::Val(sin(tok, i)) : cc::Val(sin(tok, i));
    };
    cc::Val base = d0;
    if (vec) {
      s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
      s.parallel(d0, [&](cc::Idx j) { y(tok, head, j) = value(j); });
      s.parallel(2 * r2, [&](cc::Idx k) {
        cc::Idx j = s.let(base + k, "j");
        cc::Idx i = s.let((j - base) / 2, "pair");
        y(tok, head, j) = rotated(s, value, j, base, cos(tok, i), sn(i));
      });
      return;
    }
    s.parallel(d, [&](cc::Idx j) {
      s.if_then_else(
          j < base, [&] { y(tok, head, j) = value(j); },
          [&] {
            cc::Idx i = s.let((j - base) / 2, "pair");
            y(tok, head, j) = rotated(s, value, j, base, cos(tok, i), sn(i));
          });
    });
  });
  return kb.build();
}

// rope_grad's parameters in order: x, cos, sin, dy, dx, dcos, dsin; x [T, H, D], tables [T, R2].
struct RopeGradParams {
  cc::Buf x, cos, sin, dy, dx, dcos, dsin;
};
RopeGradParams rope_grad_params(cc::KernelBuilder& kb, DType dtype, const cc::Val& t,
                                const cc::Val& h, const cc::Val& d, const cc::Val& r2) {
  RopeGradParams p;
  p.x = kb.input("x", dtype, {t, h, d});
  p.cos = kb.input("cos", dtype, {t, r2});
  p.sin = kb.input("sin", dtype, {t, r2});
  p.dy = kb.input("dy", dtype, {t, h, d});
  p.dx = kb.output("dx", dtype, {t, h, d});
  p.dcos = kb.output("dcos", dtype, {t, r2});
  p.dsin = kb.output("dsin", dtype, {t, r2});
  return p;
}

// One block per token: dx rotated back; then one thread per pair i, its table gradients summed
// over the heads in order (f32). Parameters x, cos, sin, dy, dx, dcos, dsin; dims T, H, D0, R2.
// `vec` as for build_rope.
cc::Kernel build_rope_grad(DType dtype, bool vec) {
  cc::KernelBuilder kb(rope_name("rope_grad", vec) + "_" + std::string(dtype_name(dtype)));
  cc::Dim t = kb.dim("T"), h = kb.dim("H");
  cc::Dim d0 = kb.dim("D0", {.min = 0, .divisible_by = vec ? 8 : 1});  // 0: every dim rotated
  cc::Dim r2 = kb.dim("R2", {.divisible_by = vec ? 4 : 1});
  cc::Val d = d0 + 2 * r2;
  const auto [x, cos, sin, dy, dx, dcos, dsin] = rope_grad_params(kb, dtype, t, h, d, r2);
  kb.body({t}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    cc::Val base = d0;
    // The rotation back is the rotation by -θ.
    auto rotate_back = [&](const cc::Idx& head, const cc::Idx& j) {
      cc::Idx i = s.let((j - base) / 2, "pair");
      auto value = [&](cc::Val k) { return cc::Val(dy(tok, head, k)); };
      dx(tok, head, j) = rotated(s, value, j, base, cos(tok, i), -sin(tok, i));
    };
    if (vec) {
      s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
      s.parallel(h, d0, [&](cc::Idx head, cc::Idx j) { dx(tok, head, j) = dy(tok, head, j); });
      s.parallel(h, 2 * r2,
                 [&](cc::Idx head, cc::Idx k) { rotate_back(head, s.let(base + k, "j")); });
    } else {
      s.parallel(h, d, [&](cc::Idx head, cc::Idx j) {
        s.if_then_else(
            j < base, [&] { dx(tok, head, j) = dy(tok, head, j); }, [&] { rotate_back(head, j); });
      });
    }
    cc::Buf ac = s.alloc_fragment("ac", DType::F32, {kThreads});
    cc::Buf as = s.alloc_fragment("as", DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx th) {
      s.serial(cc::ceildiv(r2, cc::Val(kThreads)), [&](cc::Idx it) {
        cc::Idx i = it * kThreads + th;
        s.if_then(i < r2, [&] {
          cc::Idx e = s.let(base + 2 * i, "e");
          ac(th) = -0.0f;
          as(th) = -0.0f;
          s.serial(h, [&](cc::Idx head) {
            cc::Val a = s.let(x(tok, head, e), "a"), b = s.let(x(tok, head, e + 1), "b");
            cc::Val ga = s.let(dy(tok, head, e), "ga"), gb = s.let(dy(tok, head, e + 1), "gb");
            ac(th) = ac(th) + (ga * a + gb * b);
            as(th) = as(th) + (gb * a - ga * b);
          });
          dcos(tok, i) = ac(th);
          dsin(tok, i) = as(th);
        });
      });
    });
  });
  return kb.build();
}

// ---- The same, specialised on the row's shape ---------------------------------------------
// With D0 (copied dims) and R2 (pairs) constants, and a tile of heads per block, no element
// divides by a run-time size (the kernels above divide by D0 or 2·R2 per element, and the 64-bit
// division's fast-path branch puts every element in a basic block of its own), and each thread
// first loads all of its elements into registers (fragments), then stores them: the hardware
// keeps a global load waiting behind any earlier store (the inputs may alias the outputs, as far
// as it knows), so loads interleaved with stores cost a round trip each; at T = 1024 a V4-mini
// rope ran ~20 us a call, ten times its bytes. Same operations per element, and for rope_grad
// the same head-order sums from -0: the same bits as the kernels above.
constexpr int64_t kFixedElems = 4096;      // a block's elements (rope: the heads of a tile)
constexpr int64_t kFixedGradPairs = 4096;  // rope_grad: H·R2 terms staged in shared memory

// The specialised kernels' names (less the dtype), for their builders and the cache keys.
std::string rope_fixed_name(int64_t d0, int64_t r2, int64_t hb) {
  return "rope_d" + std::to_string(d0) + "_r" + std::to_string(r2) + "_hb" + std::to_string(hb);
}
std::string rope_grad_fixed_name(int64_t h, int64_t d0, int64_t r2) {
  return "rope_grad_h" + std::to_string(h) + "_d" + std::to_string(d0) + "_r" + std::to_string(r2);
}

// rmsnorm_rope: a block's tile of rows staged in shared memory, about 2048 elements and at most
// 16 rows (the sums' tree holds 128 floats a row), at most 32 KB.
constexpr int64_t kFixedNormElems = 2048, kFixedNormRows = 16;
constexpr int64_t kFixedNormBytes = 32 * 1024;
int64_t norm_heads_per_block(int64_t h, int64_t d) {
  return std::max<int64_t>(1, std::min({h, kFixedNormElems / d, kFixedNormRows}));
}

// Heads a block of rope takes: about kFixedElems elements, at most H.
int64_t heads_per_block(int64_t h, int64_t d) {
  return std::max<int64_t>(1, std::min<int64_t>(h, kFixedElems / d));
}

// Rows [rows, D0 + 2·R2] of one token with their loads first: copy[r, j] = src(r, j) for the
// D0 copied dims, rot[r, k] the rotation of pair k / 2 by (c, sn); then dst(r, j) written from
// them. `each(r, body)` runs body(head) for row r (guarded or not). The fragments are allocated
// once, so rope's guarded and unguarded tiles share them.
struct RowsFixed {
  cc::Scope& s;
  DType dtype;
  int64_t rows, d0, r2;
  cc::Buf copy, rot;
  using Each = std::function<void(const cc::Idx&, const std::function<void(const cc::Idx&)>&)>;
  using Src = std::function<cc::Val(const cc::Idx&, const cc::Val&)>;
  using At = std::function<cc::Ref(const cc::Idx&, const cc::Val&)>;

  RowsFixed(cc::Scope& scope, DType dt, int64_t n_rows, int64_t copied, int64_t pairs)
      : s(scope), dtype(dt), rows(n_rows), d0(copied), r2(pairs) {
    if (d0 > 0) copy = s.alloc_fragment("copy", dtype, {rows, d0});
    rot = s.alloc_fragment("rot", DType::F32, {rows, 2 * r2});
  }

  void run(const Each& each, const Src& src, const At& dst,
           const std::function<cc::Val(const cc::Idx&)>& c,
           const std::function<cc::Val(const cc::Idx&)>& sn) {
    const cc::Val base(d0);
    const int width = static_cast<int>(16 / dtype_bytes(dtype, 1));
    if (d0 > 0) {
      s.annotate_layout(width);
      s.parallel(cc::Val(rows), base, [&](cc::Idx r, cc::Idx j) {
        each(r, [&](const cc::Idx& head) { copy(r, j) = src(head, j); });
      });
    }
    s.parallel(cc::Val(rows), cc::Val(2 * r2), [&](cc::Idx r, cc::Idx k) {
      each(r, [&](const cc::Idx& head) {
        cc::Idx j = s.let(base + k, "j");
        cc::Idx i = s.let(k / 2, "pair");
        auto value = [&](cc::Val e) { return cc::Val(src(head, e)); };
        rot(r, k) = rotated(s, value, j, base, c(i), sn(i));
      });
    });
    if (d0 > 0) {
      s.annotate_layout(width);
      s.parallel(cc::Val(rows), base, [&](cc::Idx r, cc::Idx j) {
        each(r, [&](const cc::Idx& head) { dst(head, j) = copy(r, j); });
      });
    }
    s.parallel(cc::Val(rows), cc::Val(2 * r2), [&](cc::Idx r, cc::Idx k) {
      each(r, [&](const cc::Idx& head) { dst(head, base + k) = rot(r, k); });
    });
  }
};

// Blocks (t, head tile) of `hb` heads. Parameters x [T, H, D], cos, sin [T, R2], y; dims T, H.
cc::Kernel build_rope_fixed(DType dtype, int64_t d0, int64_t r2, int64_t hb, bool inverse) {
  cc::KernelBuilder kb(rope_fixed_name(d0, r2, hb) + (inverse ? "_inv_" : "_") +
                       std::string(dtype_name(dtype)));
  cc::Dim t = kb.dim("T"), h = kb.dim("H");
  const cc::Val d(d0 + 2 * r2);
  cc::Buf x = kb.input("x", dtype, {t, h, d});
  cc::Buf cos = kb.input("cos", dtype, {t, cc::Val(r2)});
  cc::Buf sin = kb.input("sin", dtype, {t, cc::Val(r2)});
  cc::Buf y = kb.output("y", dtype, {t, h, d});
  kb.body({t, cc::ceildiv(h, hb)}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    cc::Idx h0 = s.let(s.block_idx(1) * hb, "h0");
    // The head tile wholly inside H runs without a guard (a guard keeps accesses scalar).
    RowsFixed rows(s, dtype, hb, d0, r2);
    auto tile = [&](bool guarded) {
      rows.run(
          [&](const cc::Idx& r, const std::function<void(const cc::Idx&)>& body) {
            cc::Idx head = s.let(h0 + r, "head");
            if (guarded)
              s.if_then(head < h, [&] { body(head); });
            else
              body(head);
          },
          [&](const cc::Idx& head, const cc::Val& j) { return x(tok, head, j); },
          [&](const cc::Idx& head, const cc::Val& j) { return y(tok, head, j); },
          [&](const cc::Idx& i) { return cc::Val(cos(tok, i)); },
          [&](const cc::Idx& i) { return inverse ? -cc::Val(sin(tok, i)) : cc::Val(sin(tok, i)); });
    };
    s.if_then_else(
        h0 + hb <= h, [&] { tile(false); }, [&] { tile(true); });
  });
  return kb.build();
}

// rmsnorm_rope with the row's shape constant: a tile of `hb` rows (heads) per block staged into
// shared memory by asynchronous copies (all of the tile's loads in flight at once; zeros past H),
// the rows' sums of squares at once (norm_inverses: the fixed rmsnorm's order, so that the
// gradient's recomputed norm gives the same bits), then the rows rotated through RowsFixed (loads
// first). At T = 1024 the V4-mini query's rmsnorm_rope (one row per block, a block reduction and
// three dependent round trips a row) ran 26.8 us against a 7 us floor.
// Parameters x [T, H, D], gamma [D], cos, sin [T, R2], y; dims T, H; scalar eps.
// With `q`, the fake_quant after it in the same kernel: every row of the tile (zeros past H)
// rotated into a shared tile of y's dtype, each block's scale from it (quant::row_scales), then y
// written as fake_quant writes it (V4's KV path: norm, RoPE and FP8 quant, one kernel).
cc::Kernel build_rmsnorm_rope_fixed(DType dtype, int64_t d0, int64_t r2, int64_t hb,
                                    const std::optional<quant::RowQuant>& q) {
  cc::KernelBuilder kb("rmsnorm_" + rope_fixed_name(d0, r2, hb) + (q ? q->name() : "") + "_" +
                       std::string(dtype_name(dtype)));
  cc::Dim t = kb.dim("T"), h = kb.dim("H");
  const int64_t dn = d0 + 2 * r2;
  const cc::Val d(dn);
  cc::Buf x = kb.input("x", dtype, {t, h, d});
  cc::Buf g = kb.input("gamma", dtype, {d});
  cc::Buf cos = kb.input("cos", dtype, {t, cc::Val(r2)});
  cc::Buf sin = kb.input("sin", dtype, {t, cc::Val(r2)});
  cc::Buf y = kb.output("y", dtype, {t, h, d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({t, cc::ceildiv(h, hb)}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    cc::Idx h0 = s.let(s.block_idx(1) * hb, "h0");
    cc::Buf xs = s.alloc_shared("xs", dtype, {hb, dn});
    s.copy_async(xs, x.region({tok, h0, cc::Val(0)}, {1, hb, dn}));
    s.async_commit();
    s.async_wait(0);
    s.barrier();
    cc::Buf inv = norm_inverses(s, xs, hb, dn, kThreads, eps);
    RowsFixed rows(s, dtype, hb, d0, r2);
    auto each = [&](bool guarded) {
      return [&, guarded](const cc::Idx& r, const std::function<void(const cc::Idx&)>& body) {
        if (guarded)
          s.if_then(h0 + r < h, [&] { body(r); });
        else
          body(r);
      };
    };
    auto src = [&](const cc::Idx& r, const cc::Val& j) { return xs(r, j) * inv(r) * g(j); };
    auto c = [&](const cc::Idx& i) { return cc::Val(cos(tok, i)); };
    auto sn = [&](const cc::Idx& i) { return cc::Val(sin(tok, i)); };
    if (q) {
      cc::Buf ys = s.alloc_shared("ys", dtype, {hb, dn});
      rows.run(
          each(false), src, [&](const cc::Idx& r, const cc::Val& j) { return ys(r, j); }, c, sn);
      s.barrier();
      const quant::RowScales scales = quant::row_scales(s, ys, hb, dn, *q);
      auto store = [&](bool guarded) {
        s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
        s.parallel(cc::Val(hb), d, [&](cc::Idx r, cc::Idx j) {
          each(guarded)(
              r, [&](const cc::Idx&) { y(tok, h0 + r, j) = scales.value(s, r, j, ys(r, j)); });
        });
      };
      s.if_then_else(
          h0 + hb <= h, [&] { store(false); }, [&] { store(true); });
      return;
    }
    auto tile = [&](bool guarded) {
      rows.run(
          each(guarded), src, [&](const cc::Idx& r, const cc::Val& j) { return y(tok, h0 + r, j); },
          c, sn);
    };
    s.if_then_else(
        h0 + hb <= h, [&] { tile(false); }, [&] { tile(true); });
  });
  return kb.build();
}

// One block per token, H a constant too: dx rotated back (loads first, as rope's); the table
// gradients' terms per (head, pair) computed by all threads into shared memory, then one thread
// per pair adds them in head order from -0 (build_rope_grad's sums, term for term). Parameters
// x, cos, sin, dy, dx, dcos, dsin; dim T.
cc::Kernel build_rope_grad_fixed(DType dtype, int64_t h, int64_t d0, int64_t r2) {
  cc::KernelBuilder kb(rope_grad_fixed_name(h, d0, r2) + "_" + std::string(dtype_name(dtype)));
  cc::Dim t = kb.dim("T");
  const cc::Val hv(h), base(d0), pairs(r2);
  const auto [x, cos, sin, dy, dx, dcos, dsin] =
      rope_grad_params(kb, dtype, t, hv, cc::Val(d0 + 2 * r2), pairs);
  kb.body({t}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    cc::Buf tc = s.alloc_shared("tc", DType::F32, {h, r2});
    cc::Buf ts = s.alloc_shared("ts", DType::F32, {h, r2});
    s.parallel(hv, pairs, [&](cc::Idx head, cc::Idx i) {
      cc::Idx e = s.let(base + 2 * i, "e");
      cc::Val a = s.let(x(tok, head, e), "a"), b = s.let(x(tok, head, e + 1), "b");
      cc::Val ga = s.let(dy(tok, head, e), "ga"), gb = s.let(dy(tok, head, e + 1), "gb");
      tc(head, i) = ga * a + gb * b;
      ts(head, i) = gb * a - ga * b;
    });
    RowsFixed rows(s, dtype, h, d0, r2);
    rows.run([&](const cc::Idx& r, const std::function<void(const cc::Idx&)>& body) { body(r); },
             [&](const cc::Idx& head, const cc::Val& j) { return dy(tok, head, j); },
             [&](const cc::Idx& head, const cc::Val& j) { return dx(tok, head, j); },
             [&](const cc::Idx& i) { return cc::Val(cos(tok, i)); },
             [&](const cc::Idx& i) { return -cc::Val(sin(tok, i)); });
    s.barrier();
    cc::Buf ac = s.alloc_fragment("ac", DType::F32, {r2});
    cc::Buf as = s.alloc_fragment("as", DType::F32, {r2});
    s.parallel(pairs, [&](cc::Idx i) {
      ac(i) = -0.0f;
      as(i) = -0.0f;
      s.serial(hv, [&](cc::Idx head) {
        ac(i) = ac(i) + tc(head, i);
        as(i) = as(i) + ts(head, i);
      });
      dcos(tok, i) = ac(i);
      dsin(tok, i) = as(i);
    });
  });
  return kb.build();
}

// With a fake_quant in it, the staged output rows and the block scales too, within 96 KB.
constexpr int64_t kFixedQuantBytes = 96 * 1024;

// Whether rmsnorm_rope's fixed kernel takes the fake_quant its attributes name (quant_format):
// the fixed kernel serves x, and its tile of output rows and block scales fits beside the staged
// rows.
bool quant_tile(const std::vector<TensorType>& in, const Attrs& attrs) {
  const TensorType& x = in[0];
  const int64_t d = x.shape.back();
  const std::optional<quant::RowQuant> q = quant::row_quant_of(attrs, d);
  if (!q || x.shape.size() < 2 || in[2].shape.size() != 2) return false;
  const int64_t t = x.shape[0], h = numel(x) / (t * d), r2 = in[2].shape[1];
  const bool vec = (d - 2 * r2) % 8 == 0 && r2 % 4 == 0;
  const int64_t hb = norm_heads_per_block(h, d);
  const int64_t bytes = hb * d * static_cast<int64_t>(dtype_bytes(x.dtype, 1));
  return vec && bytes <= kFixedNormBytes &&
         2 * bytes + quant::row_scales_bytes(hb, d, *q) <= kFixedQuantBytes;
}

// Kinds of expansion: 0 rope, 1 rmsnorm_rope, 2 rope_grad.
ExpandFn expand(std::shared_ptr<KernelCache> cache, int kind) {
  return [cache, kind](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                       const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const bool inverse = kind == 0 && attr_bool(attrs, "inverse");
    const std::string inv = inverse ? "_inv" : "";
    const int64_t t = in[0].shape[0], d = in[0].shape.back(), h = numel(in[0]) / (t * d);
    const int64_t r2 = in[kind == 1 ? 2 : 1].shape[1];
    const bool vec = (d - 2 * r2) % 8 == 0 && r2 % 4 == 0;
    const int64_t d0 = d - 2 * r2;
    if (vec && kind == 0) {
      const int64_t hb = heads_per_block(h, d);
      return OpExpansion{
          .calls = {
              {.kernel = cache->get(kernel_key(rope_fixed_name(d0, r2, hb) + inv, dt),
                                    [&] { return build_rope_fixed(dt, d0, r2, hb, inverse); }),
               .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)},
               .dims = {t, h}}}};
    }
    const std::optional<quant::RowQuant> q =
        kind == 1 ? quant::row_quant_of(attrs, d) : std::nullopt;
    if (q && !quant_tile(in, attrs))
      throw ShapeError("rmsnorm_rope's fake_quant (quant_format) does not fit its kernel");
    if (vec && kind == 1) {
      const int64_t hb = norm_heads_per_block(h, d);
      if (hb * d * static_cast<int64_t>(dtype_bytes(dt, 1)) <= kFixedNormBytes)
        return OpExpansion{
            .calls = {{.kernel = cache->get(
                           kernel_key(
                               "rmsnorm_" + rope_fixed_name(d0, r2, hb) + (q ? q->name() : ""), dt),
                           [&] { return build_rmsnorm_rope_fixed(dt, d0, r2, hb, q); }),
                       .buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3),
                                   output_slot(0)},
                       .dims = {t, h},
                       .scalars = {attr_float(attrs, "eps")}}}};
    }
    if (vec && kind == 2 && h * r2 <= kFixedGradPairs) {
      return OpExpansion{
          .calls = {{.kernel = cache->get(kernel_key(rope_grad_fixed_name(h, d0, r2), dt),
                                          [&] { return build_rope_grad_fixed(dt, h, d0, r2); }),
                     .buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3),
                                 output_slot(0), output_slot(1), output_slot(2)},
                     .dims = {t}}}};
    }
    const std::string name = rope_name(kind == 0   ? "rope"
                                       : kind == 1 ? "rmsnorm_rope"
                                                   : "rope_grad",
                                       vec);
    KernelCall call{.kernel = cache->get(kernel_key(name + inv, dt),
                                         [&] {
                                           return kind == 2
                                                      ? build_rope_grad(dt, vec)
                                                      : build_rope(dt, kind == 1, vec, inverse);
                                         }),
                    .dims = {t, h, d - 2 * r2, r2}};
    if (kind == 0) call.buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)};
    if (kind == 1) {
      call.buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3), output_slot(0)};
      call.scalars = {attr_float(attrs, "eps")};
    }
    if (kind == 2)
      call.buffers = {input_slot(0),  input_slot(1),  input_slot(2), input_slot(3),
                      output_slot(0), output_slot(1), output_slot(2)};
    return OpExpansion{.calls = {call}};
  };
}

// Cases: x [T, H, D] with tables [T, R/2] (and gamma [D], dy like x).
std::vector<std::vector<int64_t>> rope_shapes(std::vector<int64_t> x, int64_t half, int kind) {
  std::vector<std::vector<int64_t>> s = {x};
  if (kind == 1) s.push_back({x.back()});
  s.push_back({x[0], half});
  s.push_back({x[0], half});
  if (kind == 2) s.push_back(x);
  return s;
}

OpTests tests_of(int kind) {
  OpTests t{.kernel = {{.shapes = rope_shapes({5, 3, 16}, 4, kind)},
                       {.shapes = rope_shapes({7, 64}, 32, kind)},
                       {.shapes = rope_shapes({2, 2, 130}, 32, kind)},
                       {.shapes = rope_shapes({33, 1, 1, 2}, 1, kind)},
                       // vectors: 1032 copied dims (a partial round), 4 pairs; every dim rotated
                       {.shapes = rope_shapes({3, 2, 1040}, 4, kind)},
                       {.shapes = rope_shapes({2, 3, 16}, 8, kind)},
                       // rope: tiles of 2 heads over 5 (the last one guarded); rope_grad: H·R2
                       // past what the specialised kernel stages (the general vector kernel)
                       {.shapes = rope_shapes({2, 5, 2048}, 4, kind)},
                       {.shapes = rope_shapes({2, 130, 72}, 32, kind)}}};
  if (kind != 2)
    t.gradient = {{.shapes = rope_shapes({2, 3, 6}, 2, kind)},
                  {.shapes = rope_shapes({3, 4}, 2, kind)}};
  if (kind == 0) {
    // The inverse rotation, on the general and the specialised kernels, and its gradients.
    const Attrs inverse = {{"inverse", true}};
    t.kernel.push_back({.shapes = rope_shapes({5, 3, 16}, 4, kind), .attrs = inverse});
    t.kernel.push_back({.shapes = rope_shapes({2, 5, 2048}, 4, kind), .attrs = inverse});
    t.gradient.push_back({.shapes = rope_shapes({2, 3, 6}, 2, kind), .attrs = inverse});
  }
  if (kind == 1) {
    // A fake_quant in the kernel (graph/fold_quant): V4's KV path (FP8 per 64 of the copied dims,
    // the rotated ones kept), and FP4 with power-of-two scales over whole rows, tiles of 3 rows
    // over 5 (the last one guarded). In 16 bits: Session.FoldedQuantEpiloguesGiveTheSameBits.
    t.kernel.push_back({.shapes = rope_shapes({9, 256}, 32, kind),
                        .attrs = {{"quant_format", std::string("f8e4m3")},
                                  {"quant_block", int64_t{64}},
                                  {"quant_extent", int64_t{192}}},
                        .reference_dtypes = {DType::F32}});
    t.kernel.push_back({.shapes = rope_shapes({2, 5, 640}, 8, kind),
                        .attrs = {{"quant_format", std::string("fp4e2m1")},
                                  {"quant_block", int64_t{32}},
                                  {"quant_scale", std::string("ue8m0")}},
                        .reference_dtypes = {DType::F32}});
  }
  // x = (1, 2, 3, 4), the last pair turned by 90°: cos 0, sin 1.
  const RefTensor x{{1, 4}, {1, 2, 3, 4}}, c{{1, 1}, {0}}, s{{1, 1}, {1}};
  // Turned back by 90° (inverse): (4, -3).
  if (kind == 0)
    t.examples = {
        {.inputs = {x, c, s}, .outputs = {{{1, 4}, {1, 2, -4, 3}}}},
        {.inputs = {x, c, s}, .attrs = {{"inverse", true}}, .outputs = {{{1, 4}, {1, 2, 4, -3}}}}};
  // dy = 1: dx = (1, 1, c + s, c - s); dcos = 3 + 4, dsin = 3 - 4.
  if (kind == 2)
    t.examples = {{.inputs = {x, c, s, {{1, 4}, {1, 1, 1, 1}}},
                   .outputs = {{{1, 4}, {1, 1, 1, -1}}, {{1, 1}, {7}}, {{1, 1}, {-1}}}}};
  // rmsnorm([3, 4]) · (1, 2) = (3, 8)/sqrt(12.5), then turned by 90°: (-8, 3)/sqrt(12.5).
  if (kind == 1)
    t.examples = {{.inputs = {{{1, 2}, {3, 4}}, {{2}, {1, 2}}, c, s},
                   .attrs = {{"eps", 0.0}},
                   .outputs = {{{1, 2}, {-2.262741699796952, 0.848528137423857}}}}};
  return t;
}

std::vector<AttrSpec> rmsnorm_rope_attrs() {
  std::vector<AttrSpec> attrs = {{.name = "eps",
                                  .kind = AttrKind::Float,
                                  .default_value = AttrValue{1e-6},
                                  .doc = "added to the mean square",
                                  .positive = true}};
  for (AttrSpec& a : quant::row_quant_attrs()) attrs.push_back(std::move(a));
  return attrs;
}

}  // namespace

void register_rope(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "rope",
                .doc = "y = x with the last R dims of each row rotated in interleaved pairs "
                       "(x[e], x[e+1]) by the angle of (cos, sin)[t, pair], tables [T, R/2]",
                .inputs = {"x", "cos", "sin"},
                .outputs = {"y"},
                .attrs = {{.name = "inverse",
                           .kind = AttrKind::Bool,
                           .default_value = AttrValue{false},
                           .doc = "turn by minus the angle (sin negated): the rotation undone; "
                                  "rope's gradient for x"}},
                .infer = infer_rope,
                .reference = ref_rope,
                .gradient = grad_rope,
                .expand = expand(cache, 0),
                .tests = tests_of(0)});
  registry.add({.name = "rope_grad",
                .doc = "(dx, dcos, dsin) of rope from (x, cos, sin, dy): dy rotated back, the "
                       "tables' gradients summed over the heads in order",
                .inputs = {"x", "cos", "sin", "dy"},
                .outputs = {"dx", "dcos", "dsin"},
                .infer = infer_rope_grad,
                .reference = ref_rope_grad,
                .expand = expand(cache, 2),
                .tests = tests_of(2)});
  registry.add(
      {.name = "rmsnorm_rope",
       .doc = "y = rope(rmsnorm(x, gamma; eps), cos, sin) in one kernel (V4's query "
              "and KV paths), with quant_format then a fake_quant of y in it too; "
              "gradient: rmsnorm_grad with the tables (or rmsnorm, rope_grad and "
              "rmsnorm_grad where cos or sin need one), the fake_quant straight-through",
       .inputs = {"x", "gamma", "cos", "sin"},
       .outputs = {"y"},
       .attrs = rmsnorm_rope_attrs(),
       .infer = infer_rmsnorm_rope,
       .reference = ref_rmsnorm_rope,
       .gradient = grad_rmsnorm_rope,
       .expand = expand(cache, 1),
       .quant_epilogue = [](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                            const Attrs& attrs) { return quant_tile(in, attrs); },
       .tests = tests_of(1)});
}

}  // namespace tilerun::kernels
