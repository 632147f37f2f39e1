// weighted_relu_sum and its backward op weighted_relu_sum_grad: the lightning indexer's score
// from its per-head logits, for x [.., H, C], w [.., H] and a constant `alpha` (V4's
// (heads · dim)^-1/2 on the head weights, without a scale op and its gradient's):
//   y[.., c] = Σ_h alpha·w[.., h] · relu(x[.., h, c])
// One kernel forward and two backward instead of relu, a broadcast mul and a sum over the heads
// (three passes over the [T, H, C] logits forward, five backward, each writing or reading an
// intermediate as large): the forward reads the logits once, the backward twice (dx, then dw)
// and writes their gradient once.
//
// Strict arithmetic in f32, in a fixed order that depends on H and C only (never on the rows):
//   y:  the heads' terms a·relu(x), a = alpha·w rounded to f32, added in head order, starting
//       from head 0's term;
//   dx[.., h, c] = dy[.., c]·a[.., h] where x > 0, else 0 (NaN and 0 pass nothing, as relu_grad);
//   dw[.., h] = alpha · Σ_c dy[.., c]·relu(x[.., h, c]): thread t of the row's block folds its
//       columns c = t, t + 128, ... in order from -0, then the 128 partials meet in a halving
//       tree (partial t + half into partial t), the order of rmsnorm_grad's row sums.
// With alpha = 1 (the default) the multiplications by it are exact.
// An optional bias [.., C] (the indexer's causal mask) is added to y as rounded to its dtype,
// rounded again: the bits of an add after the op, one kernel fewer; its gradient is dy (the
// graph passes it through, no kernel), none when the bias is a constant.
// relu is the IR's max(x, +0): NaN stays NaN (a NaN logit makes its score and dw NaN).
#include <cmath>
#include <string>

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
// The heads are written out in the kernels (each head's w a value in registers, each term a
// statement): a bound on the kernel's size.
constexpr int64_t kMaxHeads = 256;

// x [.., H, C] as (rows, H, C).
struct Shape {
  int64_t rows = 1, h = 1, c = 1;
};

Shape shape_of(const TensorType& x) {
  Shape s;
  const size_t r = x.shape.size();
  s.h = x.shape[r - 2];
  s.c = x.shape[r - 1];
  for (size_t i = 0; i + 2 < r; ++i) s.rows *= x.shape[i];
  return s;
}

// (x [.., H, C], w [.., H], bias? [.., C]) -> y [.., C].
std::vector<TensorType> infer_forward(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  if (in[0].shape.size() < 2)
    throw ShapeError("input 'x' is " + to_string(in[0]) +
                     ", expected rank >= 2 ([.., H, C]: the heads, then the scored columns)");
  const int64_t h = in[0].shape[in[0].shape.size() - 2];
  if (h > kMaxHeads)
    throw ShapeError("input 'x' is " + to_string(in[0]) + ": " + std::to_string(h) +
                     " heads (axis -2), expected at most " + std::to_string(kMaxHeads));
  TensorType w{in[0].dtype, {in[0].shape.begin(), in[0].shape.end() - 1}};
  expect_same(in[1], "w", w, "x without its last axis");
  TensorType y = in[0];
  y.shape.erase(y.shape.end() - 2);
  if (in.size() > 2) expect_same(in[2], "bias", y, "the output");
  return {y};
}

// (x, w, dy) -> (dx, dw).
std::vector<TensorType> infer_backward(const std::vector<TensorType>& in, const Attrs& attrs) {
  TensorType y = infer_forward({in[0], in[1]}, attrs)[0];
  expect_same(in[2], "dy", y, "the output");
  return {in[0], in[1]};
}

// ---- References ----------------------------------------------------------------------------

double strict_relu(double v) { return std::isnan(v) ? v : (v > 0 ? v : 0.0); }

std::vector<RefTensor> ref_forward(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const Shape sh = shape_of({DType::F32, in[0].shape});
  const double alpha = attr_float(attrs, "alpha");
  std::vector<int64_t> shape = in[0].shape;
  shape.erase(shape.end() - 2);
  RefTensor y = ref_zeros(shape);
  for (int64_t r = 0; r < sh.rows; ++r)
    for (int64_t c = 0; c < sh.c; ++c) {
      double acc = 0;
      for (int64_t h = 0; h < sh.h; ++h) {
        const double term =
            alpha * in[1].data[r * sh.h + h] * strict_relu(in[0].data[(r * sh.h + h) * sh.c + c]);
        acc = h == 0 ? term : acc + term;
      }
      y.data[r * sh.c + c] = acc + (in.size() > 2 ? in[2].data[r * sh.c + c] : 0.0);
    }
  return {y};
}

std::vector<RefTensor> ref_backward(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const Shape sh = shape_of({DType::F32, in[0].shape});
  const double alpha = attr_float(attrs, "alpha");
  RefTensor dx = ref_zeros(in[0].shape), dw = ref_zeros(in[1].shape);
  for (int64_t r = 0; r < sh.rows; ++r)
    for (int64_t h = 0; h < sh.h; ++h) {
      const double w = alpha * in[1].data[r * sh.h + h];
      double acc = -0.0;
      for (int64_t c = 0; c < sh.c; ++c) {
        const double x = in[0].data[(r * sh.h + h) * sh.c + c], dy = in[2].data[r * sh.c + c];
        dx.data[(r * sh.h + h) * sh.c + c] = x > 0 ? dy * w : 0.0;
        acc += dy * strict_relu(x);
      }
      dw.data[r * sh.h + h] = alpha * acc;
    }
  return {dx, dw};
}

std::vector<GradOp> grad_forward(const std::vector<TensorType>& in, const Attrs& attrs,
                                 const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  if (needs[0] || needs[1])
    ops.push_back({"weighted_relu_sum_grad",
                   {"x0", "x1", "dy0"},
                   {needs[0] ? "dx0" : "unused_dx", needs[1] ? "dx1" : "unused_dw"},
                   {{"alpha", attr_float(attrs, "alpha")}}});
  if (in.size() > 2 && needs[2]) ops.push_back({"alias", {"dy0"}, {"dx2"}, {}});
  return ops;
}

// ---- Kernels -------------------------------------------------------------------------------
// All see x as [P, H, C] with H a constant of the kernel (kernel names carry it).

// "weighted_relu_sum", "weighted_relu_sum_grad_dx" or "weighted_relu_sum_grad_dw" (`kind`).
std::string kernel_name(const std::string& kind, int64_t h, bool vec) {
  return "weighted_relu_sum" + kind + "_h" + std::to_string(h) + (vec ? "_vec" : "");
}

// The forward, and the backward's dx: a block per row and tile of kThreads·8 columns, a thread
// per column (with `vec`, C a multiple of 8: 16 bytes of a row a thread at a time, the whole tile
// unguarded and the last, partial one over the columns left, as swiglu's kernel). w's row is
// read once a block.
constexpr int64_t kTile = kThreads * 8;

// The forward and the backward's dx share this shape. Parameters: x, w, y (forward, with
// `bias` x, w, bias, y); x, w, dy, dx (dx); scalar alpha.
cc::Kernel build_columns(DType dtype, int64_t heads, bool vec, bool dx_pass, bool bias = false) {
  cc::KernelBuilder kb(kernel_name(dx_pass ? "_grad_dx" : (bias ? "_bias" : ""), heads, vec) + "_" +
                       std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), c = kb.dim("C", {.divisible_by = vec ? 8 : 1});
  const cc::Val h(heads);
  cc::Buf x = kb.input("x", dtype, {p, h, c}), w = kb.input("w", dtype, {p, h});
  cc::Buf b = bias ? kb.input("bias", dtype, {p, c}) : cc::Buf{};
  cc::Buf dy = dx_pass ? kb.input("dy", dtype, {p, c}) : cc::Buf{};
  cc::Buf y = dx_pass ? cc::Buf{} : kb.output("y", dtype, {p, c});
  cc::Buf dx = dx_pass ? kb.output("dx", dtype, {p, h, c}) : cc::Buf{};
  cc::Val alpha = kb.scalar_f32("alpha");
  const int64_t tile = vec ? kTile : kThreads;
  kb.body({p, cc::ceildiv(c, tile)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.let(s.block_idx(1) * tile, "base");
    std::vector<cc::Val> wv;
    for (int64_t i = 0; i < heads; ++i) wv.push_back(s.let(alpha * cc::to_f32(w(row, i)), "w"));
    // The sum rounded to y's dtype before the bias: through a shared slot of that dtype (a store
    // rounds), each thread its own columns' slots.
    cc::Buf rounded = bias ? s.alloc_shared("rounded", dtype, {tile}) : cc::Buf{};
    auto column = [&](const cc::Idx& j, const cc::Idx& i) {
      if (dx_pass) {
        cc::Val d = s.let(dy(row, j), "dy");
        for (int64_t i = 0; i < heads; ++i)
          dx(row, i, j) = cc::select(x(row, i, j) > 0.0f, d * wv[i], 0.0f);
        return;
      }
      cc::Val acc;
      for (int64_t i = 0; i < heads; ++i) {
        cc::Val term = wv[i] * cc::max(x(row, i, j), 0.0f);
        acc = i == 0 ? s.let(term, "acc") : s.let(acc + term, "acc");
      }
      if (!bias) {
        y(row, j) = acc;
        return;
      }
      rounded(i) = acc;
      y(row, j) = rounded(i) + b(row, j);
    };
    if (!vec) {
      s.parallel(kThreads, [&](cc::Idx i) {
        cc::Idx j = base + i;
        s.if_then(j < c, [&] { column(j, i); });
      });
      return;
    }
    const int lanes = static_cast<int>(16 / dtype_bytes(dtype, 1));
    s.if_then_else(
        base + tile <= c,
        [&] {
          s.annotate_layout(lanes);
          s.parallel(tile, [&](cc::Idx i) { column(base + i, i); });
        },
        [&] {
          s.annotate_layout(lanes);
          s.parallel(c - base, [&](cc::Idx i) { column(base + i, i); });
        });
  });
  return kb.build();
}

// The backward's dw: a block per row. Thread t walks its columns c = t, t + kThreads, ... once,
// each head's partial in registers; then the partials' halving tree. (Written with dx in one
// pass, dx's 2-byte stores, 128 a thread, made it 4x its bytes' time at T = 4096.) Parameters:
// x, dy, dw; P, C; scalar alpha.
cc::Kernel build_dw(DType dtype, int64_t heads) {
  cc::KernelBuilder kb(kernel_name("_grad_dw", heads, false) + "_" +
                       std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), c = kb.dim("C");
  const cc::Val h(heads);
  cc::Buf x = kb.input("x", dtype, {p, h, c});
  cc::Buf dy = kb.input("dy", dtype, {p, c});
  cc::Buf dw = kb.output("dw", dtype, {p, h});
  cc::Val alpha = kb.scalar_f32("alpha");
  kb.body({p}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    std::vector<cc::Buf> part;
    for (int64_t i = 0; i < heads; ++i)
      part.push_back(s.alloc_fragment("part" + std::to_string(i), DType::F32, {kThreads}));
    cc::Buf tree = s.alloc_shared("tree", DType::F32, {heads, kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      for (int64_t i = 0; i < heads; ++i) part[i](t) = -0.0f;
      s.serial(cc::ceildiv(c, cc::Val(kThreads)), [&](cc::Idx it) {
        cc::Idx j = it * kThreads + t;
        s.if_then(j < c, [&] {
          cc::Val d = s.let(dy(row, j), "dy");
          for (int64_t i = 0; i < heads; ++i)
            part[i](t) = part[i](t) + d * cc::max(x(row, i, j), 0.0f);
        });
      });
      for (int64_t i = 0; i < heads; ++i) tree(i, t) = part[i](t);
    });
    s.barrier();
    for (int64_t half = kThreads / 2; half >= 1; half /= 2) {
      s.parallel(h, half,
                 [&](cc::Idx i, cc::Idx t) { tree(i, t) = tree(i, t) + tree(i, t + half); });
      s.barrier();
    }
    s.parallel(h, [&](cc::Idx i) { dw(row, i) = alpha * tree(i, 0); });
  });
  return kb.build();
}

ExpandFn expand(std::shared_ptr<KernelCache> cache, bool backward) {
  return [cache, backward](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                           const Attrs& attrs) {
    const double alpha = attr_float(attrs, "alpha");
    const DType dt = in[0].dtype;
    const Shape sh = shape_of(in[0]);
    const bool vec = sh.c % 8 == 0;
    const std::vector<int64_t> dims = {sh.rows, sh.c};
    const bool bias = !backward && in.size() > 2;
    KernelCall columns{
        .kernel = cache->get(
            kernel_key(kernel_name(backward ? "_grad_dx" : (bias ? "_bias" : ""), sh.h, vec), dt),
            [&] { return build_columns(dt, sh.h, vec, backward, bias); }),
        .buffers = bias ? std::vector<KernelArg>{input_slot(0), input_slot(1), input_slot(2),
                                                 output_slot(0)}
                        : std::vector<KernelArg>{input_slot(0), input_slot(1), output_slot(0)},
        .dims = dims,
        .scalars = {alpha}};
    if (!backward) return OpExpansion{.scratch = {}, .calls = {columns}};
    columns.buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)};
    KernelCall dw{.kernel = cache->get(kernel_key(kernel_name("_grad_dw", sh.h, false), dt),
                                       [&] { return build_dw(dt, sh.h); }),
                  .buffers = {input_slot(0), input_slot(2), output_slot(1)},
                  .dims = dims,
                  .scalars = {alpha}};
    return OpExpansion{.scratch = {}, .calls = {columns, dw}};
  };
}

}  // namespace

void register_weighted_relu_sum(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const AttrSpec alpha{.name = "alpha",
                       .kind = AttrKind::Float,
                       .default_value = 1.0,
                       .doc = "a constant factor on w (rounded to f32)"};
  const double nan = kNaN();
  registry.add(
      {.name = "weighted_relu_sum",
       .doc = "y[.., c] = Σ_h alpha·w[.., h]·relu(x[.., h, c]) (+ bias[.., c]) for x [.., H, C], "
              "w [.., H] (the lightning indexer's score from its per-head logits), heads added in "
              "order in f32, the bias added to the sum rounded to y's dtype; gradient "
              "weighted_relu_sum_grad",
       .inputs = {"x", "w", "bias"},
       .optional_inputs = 1,
       .addend_input = 2,
       .outputs = {"y"},
       .attrs = {alpha},
       .infer = infer_forward,
       .reference = ref_forward,
       .gradient = grad_forward,
       .expand = expand(cache, false),
       .tests = {
           .kernel = {{.shapes = {{3, 16, 1040}, {3, 16}}, .lo = -3, .hi = 3},  // vec, 2 tiles
                      {.shapes = {{2, 3, 4, 37}, {2, 3, 4}}, .lo = -3, .hi = 3},
                      {.shapes = {{5, 1, 8}, {5, 1}}, .lo = -3, .hi = 3},
                      {.shapes = {{7, 130}, {7}}, .lo = -3, .hi = 3},
                      {.shapes = {{3, 16, 1040}, {3, 16}}, .attrs = {{"alpha", 0.0221}}},
                      // with a bias: vectors (2 tiles) and scalar columns
                      {.shapes = {{3, 16, 1040}, {3, 16}, {3, 1040}}, .lo = -3, .hi = 3},
                      {.shapes = {{2, 3, 4, 37}, {2, 3, 4}, {2, 3, 37}}, .lo = -3, .hi = 3}},
           .gradient = {{.shapes = {{2, 3, 5}, {2, 3}}, .lo = -3, .hi = 3, .min_abs = 0.05},
                        {.shapes = {{2, 3, 5}, {2, 3}},
                         .attrs = {{"alpha", -0.375}},
                         .lo = -3,
                         .hi = 3,
                         .min_abs = 0.05},
                        {.shapes = {{4, 6}, {4}}, .lo = -3, .hi = 3, .min_abs = 0.05},
                        {.shapes = {{2, 3, 5}, {2, 3}, {2, 5}},
                         .lo = -3,
                         .hi = 3,
                         .min_abs = 0.05}},
           // Heads 2·relu(1) + (-1)·relu(-2) + 0.5·relu(4) = 4; a NaN logit gives NaN.
           .examples = {{.inputs = {{{3, 2}, {1, 0, -2, nan, 4, 1}}, {{3}, {2, -1, 0.5}}},
                         .outputs = {{{2}, {4, nan}}}}}}});
  registry.add(
      {.name = "weighted_relu_sum_grad",
       .doc = "dx[.., h, c] = dy[.., c]·alpha·w[.., h]·[x > 0], dw[.., h] = alpha·Σ_c dy[.., "
              "c]·relu(x[.., h, c]) in a fixed order (the backward op of weighted_relu_sum)",
       .inputs = {"x", "w", "dy"},
       .outputs = {"dx", "dw"},
       .attrs = {alpha},
       .infer = infer_backward,
       .reference = ref_backward,
       .gradient = {},
       .expand = expand(cache, true),
       .tests = {.kernel = {{.shapes = {{3, 16, 1040}, {3, 16}, {3, 1040}}, .lo = -3, .hi = 3},
                            {.shapes = {{2, 3, 4, 37}, {2, 3, 4}, {2, 3, 37}}, .lo = -3, .hi = 3},
                            {.shapes = {{7, 130}, {7}, {130}}, .lo = -3, .hi = 3},
                            {.shapes = {{2, 5, 100}, {2, 5}, {2, 100}}, .lo = -3, .hi = 3},
                            {.shapes = {{3, 16, 1040}, {3, 16}, {3, 1040}},
                             .attrs = {{"alpha", 0.0221}}}},
                 // dx = dy·w where x > 0; dw = Σ dy·relu(x): head 0 3·1 + 2·0 = 3, head 1 3·5 = 15.
                 .examples = {{.inputs = {{{2, 2}, {1, -1, 5, 0}}, {{2}, {2, -1}}, {{2}, {3, 2}}},
                               .outputs = {{{2, 2}, {6, 0, -3, 0}}, {{2}, {3, 15}}}}}}});
}

}  // namespace tilerun::kernels
