// swiglu (DeepSeek-V4's clamped SwiGLU over w1's and w3's outputs side by side) and its backward
// op swiglu_grad. For x [.., 2F], g = x[.., :F] (the gate, w1) and u = x[.., F:] (the up, w3):
//   y[.., j] = silu(min(g, L)) · clamp(u, -L, L),  L = limit (inf: no clamp)
// One op instead of split, two clamps, silu and mul: one kernel forward (y [.., F] from x in one
// pass) and one backward (both halves of dx from dy), where the composition took six and five.
// Strict arithmetic, the same as the composed ops': silu(z) = z·sigmoid(z), NaN stays NaN (the
// clamp is a select on z > L, false for NaN), and the gradient passes where a clamp is inactive
// (bounds included, NaN blocks it as clamp_grad does):
//   dg = dy · c(u) · silu'(c(g)) · [g <= L],  du = dy · silu(c(g)) · [-L <= u <= L].
// An optional weight [.., 1] (a MoE route's weight per row) multiplies y after it is rounded to
// its dtype, rounded again: the bits of swiglu then a mul, one kernel fewer each way. Its
// backward op takes the weight too: dx from dy·w (rounded, as mul's gradient gives it) and the
// weight's gradient Σⱼ dy·y₀ (each product rounded, as mul's kernel stores it, summed in
// reduce_kernel.h's lane order, as sum_to sums them) in one block per row.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "compiler/ir/builder.h"
#include "compiler/transforms/strict_math.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/quant_format.h"
#include "kernels/reduce_kernel.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/round_to.h"
#include "kernels/schema_util.h"
#include "kernels/unary_math.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;

double limit_of(const Attrs& attrs) {
  const double l = attr_float(attrs, "limit");
  if (!(l > 0)) throw ShapeError("attribute 'limit' is " + std::to_string(l) + ", expected > 0");
  return l;
}

// x [.., 2F]: the half-width F.
int64_t half_width(const TensorType& x) {
  expect_float(x, "x");
  if (x.shape.empty() || x.shape.back() % 2 != 0)
    throw ShapeError("input 'x' is " + to_string(x) +
                     ", expected a last axis of even size (gate and up side by side)");
  return x.shape.back() / 2;
}

// The weight [.., 1]: one per row of x.
void expect_weight(const TensorType& w, const TensorType& x) {
  TensorType want = x;
  want.shape.back() = 1;
  expect_same(w, "weight", want, "one per row of x");
}

// The longest row whose fake_quant runs in swiglu's kernel (its values staged in shared memory).
constexpr int64_t kMaxQuantRow = 8192;

// Whether swiglu's kernel takes the fake_quant its attributes name (quant_format): rows of whole
// vectors (F a multiple of 8), at most kMaxQuantRow of them.
bool quant_fits(const TensorType& x, const Attrs& attrs) {
  const int64_t f = half_width(x);
  return quant::row_quant_of(attrs, f).has_value() && f % 8 == 0 && f <= kMaxQuantRow;
}

std::vector<TensorType> infer_swiglu(const std::vector<TensorType>& in, const Attrs& attrs) {
  limit_of(attrs);
  TensorType y = in[0];
  y.shape.back() = half_width(in[0]);
  if (in.size() > 1) expect_weight(in[1], in[0]);
  if (quant::row_quant_of(attrs, y.shape.back()) && !quant_fits(in[0], attrs))
    throw ShapeError(
        "attribute 'quant_format': a fake_quant in swiglu's kernel needs rows of F = " +
        std::to_string(y.shape.back()) + ", a multiple of 8 up to " + std::to_string(kMaxQuantRow));
  return {y};
}

// (x [.., 2F], dy [.., F][, weight [.., 1]]) -> dx [.., 2F][, dweight [.., 1]].
std::vector<TensorType> infer_swiglu_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  TensorType y = infer_swiglu({in[0]}, attrs)[0];
  expect_same(in[1], "dy", y, "the output");
  if (in.size() < 3) return {in[0]};
  expect_weight(in[2], in[0]);
  return {in[0], in[2]};
}

// ---- References ----------------------------------------------------------------------------

double clamp_above(double g, double l) { return g > l ? l : g; }
double clamp_both(double u, double l) { return u > l ? l : (u < -l ? -l : u); }

std::vector<RefTensor> ref_swiglu(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double l = limit_of(attrs);
  const auto [rows, f2] = rows_cols(in[0].shape);
  const int64_t f = f2 / 2;
  std::vector<int64_t> shape = in[0].shape;
  shape.back() = f;
  RefTensor y = ref_zeros(shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const double g = clamp_above(in[0].data[r * f2 + j], l);
      const double u = clamp_both(in[0].data[r * f2 + f + j], l);
      y.data[r * f + j] = g * ref_sigmoid(g) * u * (in.size() > 1 ? in[1].data[r] : 1.0);
    }
  if (auto q = quant::row_quant_of(attrs, f)) quant::ref_quantize_rows(y, *q);
  return {y};
}

std::vector<RefTensor> ref_swiglu_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double l = limit_of(attrs);
  const auto [rows, f2] = rows_cols(in[0].shape);
  const int64_t f = f2 / 2;
  const bool weighted = in.size() > 2;
  RefTensor dx = ref_zeros(in[0].shape), dw = ref_zeros({rows, 1});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const double g0 = in[0].data[r * f2 + j], u0 = in[0].data[r * f2 + f + j];
      const double w = weighted ? in[2].data[r] : 1.0, dy = in[1].data[r * f + j] * w;
      const double g = clamp_above(g0, l), u = clamp_both(u0, l), s = ref_sigmoid(g);
      dx.data[r * f2 + j] = g0 <= l ? dy * u * s * (1 + g * (1 - s)) : 0.0;
      dx.data[r * f2 + f + j] = u0 >= -l && u0 <= l ? dy * g * s : 0.0;
      dw.data[r] += in[1].data[r * f + j] * g * s * u;
    }
  if (!weighted) return {dx};
  dw.shape = in[2].shape;
  return {dx, dw};
}

std::vector<GradOp> grad_swiglu(const std::vector<TensorType>& in, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  const Attrs limit = {{"limit", attr_float(attrs, "limit")}};
  if (in.size() > 1) {
    if (!needs[0] && !needs[1]) return {};
    return {{"swiglu_grad",
             {"x0", "dy0", "x1"},
             {needs[0] ? "dx0" : "unused_dx", needs[1] ? "dx1" : "unused_dweight"},
             limit}};
  }
  if (!needs[0]) return {};
  return {{"swiglu_grad", {"x0", "dy0"}, {"dx0"}, limit}};
}

// ---- Kernels -------------------------------------------------------------------------------

// One thread per output column j of a row (grid rows × ceil(F / kThreads)): it reads g and u,
// the two halves' j-th elements, and writes y[j] (forward) or dx[j] and dx[F + j] (backward).
// With `vec` (F a multiple of 8) a block takes a tile of kThreads·8 columns and each thread 16
// bytes of each tensor at a time: a whole tile needs no column guard, so its accesses move as
// vectors (a guard inside the loop keeps them scalar), and the row's last, partial tile runs
// over the F - base columns left, whose count is a multiple of 8, vectors too.
constexpr int64_t kVecTile = kThreads * 8;

std::string swiglu_name(bool backward, bool vec, bool weighted = false) {
  return std::string(backward ? "swiglu_grad" : "swiglu") + (weighted ? "_w" : "") +
         (vec ? "_vec" : "");
}

// The clamped halves of column j of a row and the gate's sigmoid.
struct Halves {
  cc::Val g0, u0, g, u, sg;
};
Halves halves_at(cc::Scope& s, const cc::Buf& x, const cc::Val& row, const cc::Val& f,
                 const cc::Val& j, const cc::Val& limit) {
  Halves h;
  h.g0 = s.let(x(row, j), "g0");
  h.u0 = s.let(x(row, f + j), "u0");
  h.g = s.let(cc::select(h.g0 > limit, limit, h.g0), "g");
  h.u = s.let(cc::select(h.u0 > limit, limit, cc::select(h.u0 < -limit, -limit, h.u0)), "u");
  h.sg = s.let(cc::sigmoid(h.g), "sig");
  return h;
}

// Parameters x [P, 2F], (dy [P, F] backward), (weight [P, 1] when weighted, forward), out; dims
// P, F; scalar limit.
cc::Kernel build_swiglu(DType dtype, bool backward, bool vec, bool weighted = false) {
  cc::KernelBuilder kb(swiglu_name(backward, vec, weighted) + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), f = kb.dim("F", {.divisible_by = vec ? 8 : 1});
  cc::Buf x = kb.input("x", dtype, {p, f * 2});
  cc::Buf dy = backward ? kb.input("dy", dtype, {p, f}) : cc::Buf{};
  cc::Buf weight = weighted ? kb.input("weight", dtype, {p, cc::Val(1)}) : cc::Buf{};
  cc::Buf out = kb.output(backward ? "dx" : "y", dtype, {p, backward ? f * 2 : cc::Val(f)});
  cc::Val limit = kb.scalar_f32("limit");
  const int64_t tile = vec ? kVecTile : kThreads;
  kb.body({p, cc::ceildiv(f, tile)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = vec ? s.let(s.block_idx(1) * tile, "base") : s.block_idx(1) * tile;
    cc::Val w = weighted ? s.let(cc::to_f32(weight(row, 0)), "w") : cc::Val();
    auto column = [&](const cc::Idx& j) {
      const Halves h = halves_at(s, x, row, f, j, limit);
      const cc::Val &g0 = h.g0, &u0 = h.u0, &g = h.g, &u = h.u, &sg = h.sg;
      if (!backward) {
        // Weighted: y rounded to its dtype, then the mul's product (rounded by the store).
        out(row, j) = weighted ? rounded(dtype, g * sg * u, "y0") * w : g * sg * u;
        return;
      }
      cc::Val d = s.let(dy(row, j), "d");
      out(row, j) = cc::select(g0 <= limit, d * u * (sg * (1.0f + g * (1.0f - sg))), 0.0f);
      out(row, f + j) = cc::select(u0 >= -limit && u0 <= limit, d * (g * sg), 0.0f);
    };
    if (!vec) {
      s.parallel(kThreads, [&](cc::Idx i) {
        cc::Idx j = base + i;
        s.if_then(j < f, [&] { column(j); });
      });
      return;
    }
    const int lanes = static_cast<int>(16 / dtype_bytes(dtype, 1));
    s.if_then_else(
        base + tile <= f,
        [&] {
          s.annotate_layout(lanes);
          s.parallel(tile, [&](cc::Idx i) { column(base + i); });
        },
        [&] {
          s.annotate_layout(lanes);
          s.parallel(f - base, [&](cc::Idx i) { column(base + i); });
        });
  });
  return kb.build();
}

// The forward with the fake_quant after it (graph/fold_quant) in the same kernel, F a constant:
// one block a row, its F values (rounded to the dtype, and times the weight and rounded again
// where there is one) staged in shared memory, each block's scale from them (quant::row_scales),
// then y written as fake_quant writes it. Parameters x [P, 2F], (weight [P, 1]), y; dim P; scalar
// limit.
std::string swiglu_fq_name(bool weighted, int64_t f, const quant::RowQuant& q) {
  return swiglu_name(false, true, weighted) + "_f" + std::to_string(f) + q.name();
}

cc::Kernel build_swiglu_fq(DType dtype, bool weighted, int64_t fn, const quant::RowQuant& q) {
  cc::KernelBuilder kb(swiglu_fq_name(weighted, fn, q) + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P");
  const cc::Val f(fn);
  cc::Buf x = kb.input("x", dtype, {p, cc::Val(2 * fn)});
  cc::Buf weight = weighted ? kb.input("weight", dtype, {p, cc::Val(1)}) : cc::Buf{};
  cc::Buf y = kb.output("y", dtype, {p, f});
  cc::Val limit = kb.scalar_f32("limit");
  const int lanes = static_cast<int>(16 / dtype_bytes(dtype, 1));
  kb.body({p}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val w = weighted ? s.let(cc::to_f32(weight(row, 0)), "w") : cc::Val();
    cc::Buf ys = s.alloc_shared("ys", dtype, {1, fn});
    s.annotate_layout(lanes);
    s.parallel(f, [&](cc::Idx j) {
      const Halves h = halves_at(s, x, row, f, j, limit);
      ys(0, j) = weighted ? rounded(dtype, h.g * h.sg * h.u, "y0") * w : h.g * h.sg * h.u;
    });
    s.barrier();
    const quant::RowScales scales = quant::row_scales(s, ys, 1, fn, q);
    s.annotate_layout(lanes);
    s.parallel(f, [&](cc::Idx j) { y(row, j) = scales.value(s, cc::Val(0), j, ys(0, j)); });
  });
  return kb.build();
}

// The weighted backward: parameters x [P, 2F], dy [P, F], weight [P, 1], dx [P, 2F], dweight
// [P, 1]; dims P (and F, unless `fn` gives it); scalar limit. One block of kLanes threads a row:
// dx from d = dy·w rounded (mul's gradient as stored), then dweight = Σⱼ round(dy·round(y₀)) by
// fold_row, the order of sum_to's reduction whatever kernel it picks. With F a constant `fn` (a
// multiple of 8, at most kMaxQuantRow; 0: F a dim) the row is read once, as 16-byte vectors: its
// products round(dy·y₀) go to a shared row that the fold then reads in its order (before, the
// fold's lanes read x and dy again one element at a time, and the sigmoid ran twice: 115 µs for
// 24576 rows of F = 512 at T = 4096 on the H200, four times the bytes' floor). The same bits.
std::string swiglu_grad_weighted_name(int64_t fn) {
  return swiglu_name(true, fn > 0, true) + (fn > 0 ? "_f" + std::to_string(fn) : "");
}

cc::Kernel build_swiglu_grad_weighted(DType dtype, int64_t fn) {
  cc::KernelBuilder kb(swiglu_grad_weighted_name(fn) + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P");
  const cc::Val f = fn > 0 ? cc::Val(fn) : cc::Val(kb.dim("F"));
  cc::Buf x = kb.input("x", dtype, {p, f * 2});
  cc::Buf dy = kb.input("dy", dtype, {p, f});
  cc::Buf weight = kb.input("weight", dtype, {p, cc::Val(1)});
  cc::Buf dx = kb.output("dx", dtype, {p, f * 2});
  cc::Buf dweight = kb.output("dweight", dtype, {p, cc::Val(1)});
  cc::Val limit = kb.scalar_f32("limit");
  kb.body({p}, static_cast<int>(kLanes), [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val w = s.let(cc::to_f32(weight(row, 0)), "w");
    // dx at column j; returns dy's value there.
    auto grads = [&](const Halves& h, const cc::Idx& j) {
      cc::Val dyv = s.let(cc::to_f32(dy(row, j)), "dyv");
      cc::Val d = s.let(rounded(dtype, dyv * w, "dact"), "d");
      dx(row, j) = cc::select(h.g0 <= limit, d * h.u * (h.sg * (1.0f + h.g * (1.0f - h.sg))), 0.0f);
      dx(row, f + j) = cc::select(h.u0 >= -limit && h.u0 <= limit, d * (h.g * h.sg), 0.0f);
      return dyv;
    };
    auto product = [&](const Halves& h, const cc::Val& dyv) {
      cc::Val y0 = rounded(dtype, h.g * h.sg * h.u, "y0");
      return rounded(dtype, dyv * y0, "dyy");
    };
    cc::Buf lanes = s.alloc_shared("lanes", DType::F32, {kLanes});
    cc::Buf total = s.alloc_shared("total", DType::F32, {1});
    // The fold's products: from a shared row filled in one vector pass (F a constant), else
    // recomputed from x and dy as the fold reads them.
    std::function<cc::Val(cc::Idx)> value;
    cc::Buf dyy;
    if (fn > 0) {
      dyy = s.alloc_shared("dyy", DType::F32, {1, fn});
      s.annotate_layout(static_cast<int>(16 / dtype_bytes(dtype, 1)));
      s.parallel(f, [&](cc::Idx j) {
        const Halves h = halves_at(s, x, row, f, j, limit);
        dyy(0, j) = product(h, grads(h, j));
      });
      s.barrier();
      value = [&](cc::Idx j) { return dyy(0, j); };
    } else {
      s.parallel(f, [&](cc::Idx j) { grads(halves_at(s, x, row, f, j, limit), j); });
      value = [&](cc::Idx j) {
        return product(halves_at(s, x, row, f, j, limit), cc::to_f32(dy(row, j)));
      };
    }
    fold_row(s, f, lanes, total, value, [](cc::Val a, cc::Val b) { return a + b; });
    s.parallel(1, [&](cc::Idx) { dweight(row, 0) = total(0); });
  });
  return kb.build();
}

ExpandFn expand_swiglu(std::shared_ptr<KernelCache> cache, bool backward) {
  return [cache, backward](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                           const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const auto [rows, f2] = rows_cols(in[0].shape);
    const bool weighted = in.size() > (backward ? 2u : 1u);
    if (backward && weighted) {
      const int64_t f = f2 / 2, fn = f % 8 == 0 && f <= kMaxQuantRow ? f : 0;
      KernelCall call{
          .kernel = cache->get(kernel_key(swiglu_grad_weighted_name(fn), dt),
                               [&] { return build_swiglu_grad_weighted(dt, fn); }),
          .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0), output_slot(1)},
          .dims = fn > 0 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, f},
          .scalars = {attr_float(attrs, "limit")}};
      return OpExpansion{.calls = {call}};
    }
    const std::optional<quant::RowQuant> q =
        backward ? std::nullopt : quant::row_quant_of(attrs, f2 / 2);
    if (q) {
      if (!quant_fits(in[0], attrs))
        throw ShapeError("swiglu's fake_quant (quant_format) does not fit its kernel");
      KernelCall call{
          .kernel = cache->get(kernel_key(swiglu_fq_name(weighted, f2 / 2, *q), dt),
                               [&] { return build_swiglu_fq(dt, weighted, f2 / 2, *q); }),
          .buffers = {input_slot(0), output_slot(0)},
          .dims = {rows},
          .scalars = {attr_float(attrs, "limit")}};
      if (weighted) call.buffers.insert(call.buffers.begin() + 1, input_slot(1));
      return OpExpansion{.calls = {call}};
    }
    const bool vec = (f2 / 2) % 8 == 0;
    KernelCall call{.kernel = cache->get(kernel_key(swiglu_name(backward, vec, weighted), dt),
                                         [&] { return build_swiglu(dt, backward, vec, weighted); }),
                    .buffers = {input_slot(0), output_slot(0)},
                    .dims = {rows, f2 / 2},
                    .scalars = {attr_float(attrs, "limit")}};
    if (backward) call.buffers.insert(call.buffers.begin() + 1, input_slot(1));
    if (weighted) call.buffers.insert(call.buffers.begin() + 1, input_slot(1));
    return OpExpansion{.calls = {call}};
  };
}

AttrSpec limit_attr() {
  return {.name = "limit",
          .kind = AttrKind::Float,
          .default_value = std::numeric_limits<double>::infinity(),
          .doc =
              "swiglu_limit: the gate clamped above at it, the up to [-limit, limit] (default: "
              "no clamp)"};
}

std::vector<AttrSpec> swiglu_attrs() {
  std::vector<AttrSpec> attrs = {limit_attr()};
  for (AttrSpec& a : quant::row_quant_attrs()) attrs.push_back(std::move(a));
  return attrs;
}

}  // namespace

void register_swiglu(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const Attrs clamped = {{"limit", 1.0}}, loose = {{"limit", 10.0}};
  const double inf = kInf(), nan = kNaN();
  registry.add(
      {.name = "swiglu",
       .doc = "y = silu(min(g, limit)) · clamp(u, -limit, limit), g and u the two halves of x "
              "[.., 2F]'s last axis (gate first): DeepSeek-V4's clamped SwiGLU in one kernel; with "
              "weight [.., 1], y rounded then times its row's weight (a MoE route's; the bits of a "
              "mul after); with quant_format, then a fake_quant of y in the same kernel; gradient "
              "swiglu_grad",
       .inputs = {"x", "weight"},
       .optional_inputs = 1,
       .outputs = {"y"},
       .attrs = swiglu_attrs(),
       .infer = infer_swiglu,
       .reference = ref_swiglu,
       .gradient = grad_swiglu,
       .expand = expand_swiglu(cache, false),
       .quant_epilogue = [](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                            const Attrs& attrs) { return quant_fits(in[0], attrs); },
       .tests = {
           .kernel = {{.shapes = {{33, 260}}, .lo = -6, .hi = 6},
                      {.shapes = {{3, 5, 2}}, .attrs = clamped, .lo = -3, .hi = 3},
                      {.shapes = {{7, 300}}, .attrs = loose, .lo = -20, .hi = 20},
                      // F a multiple of 8: a whole tile of 1024 columns and a partial one.
                      {.shapes = {{3, 2064}}, .attrs = clamped, .lo = -3, .hi = 3},
                      {.shapes = {{5, 48}}, .lo = -6, .hi = 6},
                      // with a weight per row (vectors, and scalar columns)
                      {.shapes = {{33, 1040}, {33, 1}}, .attrs = loose, .lo = -6, .hi = 6},
                      {.shapes = {{3, 5, 14}, {3, 5, 1}}, .attrs = clamped, .lo = -3, .hi = 3},
                      // A fake_quant in the kernel (graph/fold_quant), with and without a
                      // weight; in 16 bits: Session.FoldedQuantEpiloguesGiveTheSameBits.
                      {.shapes = {{9, 512}},
                       .attrs = {{"limit", 10.0},
                                 {"quant_format", std::string("f8e4m3")},
                                 {"quant_block", int64_t{128}}},
                       .lo = -6,
                       .hi = 6,
                       .reference_dtypes = {DType::F32}},
                      {.shapes = {{7, 256}, {7, 1}},
                       .attrs = {{"limit", 10.0},
                                 {"quant_format", std::string("fp4e2m1")},
                                 {"quant_block", int64_t{32}},
                                 {"quant_scale", std::string("ue8m0")}},
                       .lo = -6,
                       .hi = 6,
                       .reference_dtypes = {DType::F32}}},
           .gradient = {{.shapes = {{7, 10}}, .lo = -3, .hi = 3},
                        {.shapes = {{2, 3, 8}}, .attrs = loose, .lo = -3, .hi = 3},
                        {.shapes = {{3, 8}, {3, 1}}, .attrs = loose, .lo = -3, .hi = 3}},
           // silu(1) = 1·σ(1) = 0.7310585786300049; a clamped gate and up, NaN kept.
           .examples = {
               {.inputs = {{{1, 6}, {1, 5, nan, 2, -4, 1}}},
                .attrs = {{"limit", 3.0}},
                .outputs = {{{1, 3}, {1.4621171572600098, -3 * 3 * 0.9525741268224334, nan}}}},
               {.inputs = {{{1, 2}, {-inf, 1}}}, .outputs = {{{1, 1}, {nan}}}},
               // silu(1)·3 (the up clamped at 3) times the row's weight 2.
               {.inputs = {{{1, 2}, {1, 5}}, {{1, 1}, {2}}},
                .attrs = {{"limit", 3.0}},
                .outputs = {{{1, 1}, {2 * 3 * 0.7310585786300049}}}}}}});
  registry.add(
      {.name = "swiglu_grad",
       .doc =
           "dx = (dy·c(u)·silu'(c(g))·[g <= limit], dy·silu(c(g))·[-limit <= u <= limit]) side by "
           "side, c the clamps, dy first times weight when given, and then dweight = Σ dy·y₀ per "
           "row (the backward op of swiglu)",
       .inputs = {"x", "dy", "weight"},
       .optional_inputs = 1,
       .outputs = {"dx", "dweight"},
       .optional_outputs = 1,
       .attrs = {limit_attr()},
       .infer = infer_swiglu_grad,
       .reference = ref_swiglu_grad,
       .expand = expand_swiglu(cache, true),
       .tests = {.kernel = {{.shapes = {{33, 260}, {33, 130}}, .lo = -6, .hi = 6},
                            {.shapes = {{3, 5, 2}, {3, 5, 1}}, .attrs = clamped, .lo = -3, .hi = 3},
                            {.shapes = {{3, 2064}, {3, 1032}}, .attrs = clamped, .lo = -3, .hi = 3},
                            {.shapes = {{5, 48}, {5, 24}}, .lo = -6, .hi = 6},
                            // weighted: a row of 130 columns (two lanes' worth past 128), a
                            // 3-d x, V4's F = 512
                            {.shapes = {{33, 260}, {33, 130}, {33, 1}}, .lo = -6, .hi = 6},
                            {.shapes = {{3, 5, 2}, {3, 5, 1}, {3, 5, 1}}, .attrs = clamped},
                            {.shapes = {{9, 1024}, {9, 512}, {9, 1}},
                             .attrs = loose,
                             .lo = -12,
                             .hi = 12},
                            // F a multiple of 8 past 8 lanes' worth of 128: lanes folding 9
                            // and 8 products. 64 rows: dweight sums 1040 products each rounded
                            // to bf16, ~0.1% of a row's sum; over 5 rows a few sums cancelling
                            // together took the relative L2 past 1% about 1 run in 100.
                            {.shapes = {{64, 2080}, {64, 1040}, {64, 1}}, .lo = -6, .hi = 6}},
                 // At g = 0: dg = dy·u·silu'(0) = dy·u/2, du = dy·silu(0) = 0; a clamped gate
                 // and up pass nothing.
                 .examples = {{.inputs = {{{1, 4}, {0, 5, 3, -6}}, {{1, 2}, {2, 1}}},
                               .attrs = {{"limit", 4.0}},
                               .outputs = {{{1, 4}, {3, 0, 0, 0}}}}}}});
}

}  // namespace tilerun::kernels
