// swiglu (DeepSeek-V4's clamped SwiGLU over w1's and w3's outputs side by side) and its backward
// op swiglu_grad. For x [.., 2F], g = x[.., :F] (the gate, w1) and u = x[.., F:] (the up, w3):
//   y[.., j] = silu(min(g, L)) · clamp(u, -L, L),  L = limit (inf: no clamp)
// One op instead of split, two clamps, silu and mul: one kernel forward (y [.., F] from x in one
// pass) and one backward (both halves of dx from dy), where the composition took six and five.
// Strict arithmetic, the same as the composed ops': silu(z) = z·sigmoid(z), NaN stays NaN (the
// clamp is a select on z > L, false for NaN), and the gradient passes where a clamp is inactive
// (bounds included, NaN blocks it as clamp_grad does):
//   dg = dy · c(u) · silu'(c(g)) · [g <= L],  du = dy · silu(c(g)) · [-L <= u <= L].
#include <cmath>
#include <limits>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

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

std::vector<TensorType> infer_swiglu(const std::vector<TensorType>& in, const Attrs& attrs) {
  limit_of(attrs);
  TensorType y = in[0];
  y.shape.back() = half_width(in[0]);
  return {y};
}

// (x [.., 2F], dy [.., F]) -> dx [.., 2F].
std::vector<TensorType> infer_swiglu_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  TensorType y = infer_swiglu({in[0]}, attrs)[0];
  expect_same(in[1], "dy", y, "the output");
  return {in[0]};
}

// ---- References ----------------------------------------------------------------------------

double ref_sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
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
      y.data[r * f + j] = g * ref_sigmoid(g) * u;
    }
  return {y};
}

std::vector<RefTensor> ref_swiglu_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double l = limit_of(attrs);
  const auto [rows, f2] = rows_cols(in[0].shape);
  const int64_t f = f2 / 2;
  RefTensor dx = ref_zeros(in[0].shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const double g0 = in[0].data[r * f2 + j], u0 = in[0].data[r * f2 + f + j];
      const double dy = in[1].data[r * f + j];
      const double g = clamp_above(g0, l), u = clamp_both(u0, l), s = ref_sigmoid(g);
      dx.data[r * f2 + j] = g0 <= l ? dy * u * s * (1 + g * (1 - s)) : 0.0;
      dx.data[r * f2 + f + j] = u0 >= -l && u0 <= l ? dy * g * s : 0.0;
    }
  return {dx};
}

std::vector<GradOp> grad_swiglu(const std::vector<TensorType>&, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"swiglu_grad", {"x0", "dy0"}, {"dx0"}, {{"limit", attr_float(attrs, "limit")}}}};
}

// ---- Kernels -------------------------------------------------------------------------------

// One thread per output column j of a row (grid rows × ceil(F / kThreads)): it reads g and u,
// the two halves' j-th elements, and writes y[j] (forward) or dx[j] and dx[F + j] (backward).
// With `vec` (F a multiple of 8) a block takes a tile of kThreads·8 columns and each thread 16
// bytes of each tensor at a time: a whole tile needs no column guard, so its accesses move as
// vectors (a guard inside the loop keeps them scalar), and the row's last, partial tile runs
// over the F - base columns left, whose count is a multiple of 8, vectors too.
constexpr int64_t kVecTile = kThreads * 8;

std::string swiglu_name(bool backward, bool vec) {
  return std::string(backward ? "swiglu_grad" : "swiglu") + (vec ? "_vec" : "");
}

cc::Kernel build_swiglu(DType dtype, bool backward, bool vec) {
  cc::KernelBuilder kb(swiglu_name(backward, vec) + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), f = kb.dim("F", {.divisible_by = vec ? 8 : 1});
  cc::Buf x = kb.input("x", dtype, {p, f * 2});
  cc::Buf dy = backward ? kb.input("dy", dtype, {p, f}) : cc::Buf{};
  cc::Buf out = kb.output(backward ? "dx" : "y", dtype, {p, backward ? f * 2 : cc::Val(f)});
  cc::Val limit = kb.scalar_f32("limit");
  const int64_t tile = vec ? kVecTile : kThreads;
  kb.body({p, cc::ceildiv(f, tile)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = vec ? s.let(s.block_idx(1) * tile, "base") : s.block_idx(1) * tile;
    auto column = [&](const cc::Idx& j) {
      cc::Val g0 = s.let(x(row, j), "g0"), u0 = s.let(x(row, f + j), "u0");
      cc::Val g = s.let(cc::select(g0 > limit, limit, g0), "g");
      cc::Val u = s.let(cc::select(u0 > limit, limit, cc::select(u0 < -limit, -limit, u0)), "u");
      cc::Val sg = s.let(cc::sigmoid(g), "sig");
      if (!backward) {
        out(row, j) = g * sg * u;
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

ExpandFn expand_swiglu(std::shared_ptr<KernelCache> cache, bool backward) {
  return [cache, backward](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                           const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const auto [rows, f2] = rows_cols(in[0].shape);
    const bool vec = (f2 / 2) % 8 == 0;
    KernelCall call{.kernel = cache->get(kernel_key(swiglu_name(backward, vec), dt),
                                         [&] { return build_swiglu(dt, backward, vec); }),
                    .buffers = {input_slot(0), output_slot(0)},
                    .dims = {rows, f2 / 2},
                    .scalars = {attr_float(attrs, "limit")}};
    if (backward) call.buffers.insert(call.buffers.begin() + 1, input_slot(1));
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

}  // namespace

void register_swiglu(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const Attrs clamped = {{"limit", 1.0}}, loose = {{"limit", 10.0}};
  const double inf = kInf(), nan = kNaN();
  registry.add(
      {.name = "swiglu",
       .doc = "y = silu(min(g, limit)) · clamp(u, -limit, limit), g and u the two halves of x "
              "[.., 2F]'s last axis (gate first): DeepSeek-V4's clamped SwiGLU in one kernel; "
              "gradient swiglu_grad",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {limit_attr()},
       .infer = infer_swiglu,
       .reference = ref_swiglu,
       .gradient = grad_swiglu,
       .expand = expand_swiglu(cache, false),
       .tests = {
           .kernel = {{.shapes = {{33, 260}}, .lo = -6, .hi = 6},
                      {.shapes = {{3, 5, 2}}, .attrs = clamped, .lo = -3, .hi = 3},
                      {.shapes = {{7, 300}}, .attrs = loose, .lo = -20, .hi = 20},
                      // F a multiple of 8: a whole tile of 1024 columns and a partial one.
                      {.shapes = {{3, 2064}}, .attrs = clamped, .lo = -3, .hi = 3},
                      {.shapes = {{5, 48}}, .lo = -6, .hi = 6}},
           .gradient = {{.shapes = {{7, 10}}, .lo = -3, .hi = 3},
                        {.shapes = {{2, 3, 8}}, .attrs = loose, .lo = -3, .hi = 3}},
           // silu(1) = 1·σ(1) = 0.7310585786300049; a clamped gate and up, NaN kept.
           .examples = {
               {.inputs = {{{1, 6}, {1, 5, nan, 2, -4, 1}}},
                .attrs = {{"limit", 3.0}},
                .outputs = {{{1, 3}, {1.4621171572600098, -3 * 3 * 0.9525741268224334, nan}}}},
               {.inputs = {{{1, 2}, {-inf, 1}}}, .outputs = {{{1, 1}, {nan}}}}}}});
  registry.add(
      {.name = "swiglu_grad",
       .doc =
           "dx = (dy·c(u)·silu'(c(g))·[g <= limit], dy·silu(c(g))·[-limit <= u <= limit]) side by "
           "side, c the clamps (the backward op of swiglu)",
       .inputs = {"x", "dy"},
       .outputs = {"dx"},
       .attrs = {limit_attr()},
       .infer = infer_swiglu_grad,
       .reference = ref_swiglu_grad,
       .expand = expand_swiglu(cache, true),
       .tests = {.kernel = {{.shapes = {{33, 260}, {33, 130}}, .lo = -6, .hi = 6},
                            {.shapes = {{3, 5, 2}, {3, 5, 1}}, .attrs = clamped, .lo = -3, .hi = 3},
                            {.shapes = {{3, 2064}, {3, 1032}}, .attrs = clamped, .lo = -3, .hi = 3},
                            {.shapes = {{5, 48}, {5, 24}}, .lo = -6, .hi = 6}},
                 // At g = 0: dg = dy·u·silu'(0) = dy·u/2, du = dy·silu(0) = 0; a clamped gate
                 // and up pass nothing.
                 .examples = {{.inputs = {{{1, 4}, {0, 5, 3, -6}}, {{1, 2}, {2, 1}}},
                               .attrs = {{"limit", 4.0}},
                               .outputs = {{{1, 4}, {3, 0, 0, 0}}}}}}});
}

}  // namespace tilerun::kernels
