// with_prev: each slice of the leading axis joined with the one before it along another axis,
//   y[n] = x[n - 1] ++ x[n] along `axis` (x[-1] = fill everywhere),
// V4's overlapping compressor windows (entry c pools the tokens of window c - 1 and window c),
// and its backward op with_prev_grad: dx[n] = dy[n]'s second half + dy[n + 1]'s first half (+0
// for the last n). One kernel each, where a slice, a fill and two concats (and in the backward two
// splits, a slice_grad and an add) took several.
//
// Kernels: both view the tensors as rows q = n·R + o (R the extents between the leading axis and
// `axis`) of L elements (the joined axis and everything after it): y's rows are 2L long, the
// predecessor of row q is row q - R. A block takes `rows` rows of a chunk of L, 8 consecutive
// elements a thread where L is a whole number of 8-element vectors (16 bytes of bf16); its
// tile runs unguarded where the whole tile lies inside and every row has its neighbour (the
// predecessor, or the successor for the gradient), guarded otherwise (whole_or_guarded.h).
#include <algorithm>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 256;
constexpr int64_t kTileElems = 2048;  // elements of L a block moves per row group

// ---- Shapes --------------------------------------------------------------------------------

// x as [N, R, L]: N the leading extent, R the extents before `axis`, L the rest.
struct PrevView {
  int64_t axis, n, r, l;
};

PrevView view_of(const TensorType& x, const Attrs& attrs, const std::string& slot) {
  if (x.shape.size() < 2)
    throw ShapeError("input '" + slot + "' is " + to_string(x) + ", expected rank >= 2");
  const int64_t axis = normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", x, slot);
  if (axis == 0)
    throw ShapeError("attribute 'axis' is the leading axis of input '" + slot + "' " +
                     to_string(x) + ", expected a later one (the leading axis is the one shifted)");
  return {axis, x.shape[0], product(x.shape, 1, axis), product(x.shape, axis, x.shape.size())};
}

std::vector<TensorType> infer_with_prev(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const PrevView v = view_of(in[0], attrs, "x");
  TensorType y = in[0];
  y.shape[v.axis] *= 2;
  return {y};
}

std::vector<TensorType> infer_with_prev_grad(const std::vector<TensorType>& in,
                                             const Attrs& attrs) {
  expect_float(in[0], "dy");
  const PrevView v = view_of(in[0], attrs, "dy");
  if (in[0].shape[v.axis] % 2 != 0)
    throw ShapeError("input 'dy' is " + to_string(in[0]) + ", expected an even extent along axis " +
                     std::to_string(v.axis));
  TensorType dx = in[0];
  dx.shape[v.axis] /= 2;
  return {dx};
}

// ---- References (double) ---------------------------------------------------------------------

std::vector<RefTensor> ref_with_prev(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const PrevView v = view_of({DType::F32, in[0].shape}, attrs, "x");
  RefTensor y = ref_zeros(infer_with_prev({{DType::F32, in[0].shape}}, attrs)[0].shape);
  const double fill = attr_float(attrs, "fill");
  for (int64_t q = 0; q < v.n * v.r; ++q)
    for (int64_t e = 0; e < v.l; ++e) {
      y.data[q * 2 * v.l + e] = q >= v.r ? in[0].data[(q - v.r) * v.l + e] : fill;
      y.data[q * 2 * v.l + v.l + e] = in[0].data[q * v.l + e];
    }
  return {y};
}

std::vector<RefTensor> ref_with_prev_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor& dy = in[0];
  TensorType dx_type = infer_with_prev_grad({{DType::F32, dy.shape}}, attrs)[0];
  const PrevView v = view_of(dx_type, attrs, "dx");
  RefTensor dx = ref_zeros(dx_type.shape);
  for (int64_t q = 0; q < v.n * v.r; ++q)
    for (int64_t e = 0; e < v.l; ++e) {
      const double next = q + v.r < v.n * v.r ? dy.data[(q + v.r) * 2 * v.l + e] : 0.0;
      dx.data[q * v.l + e] = dy.data[q * 2 * v.l + v.l + e] + next;
    }
  return {dx};
}

std::vector<GradOp> grad_with_prev(const std::vector<TensorType>&, const Attrs& attrs,
                                   const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"with_prev_grad", {"dy0"}, {"dx0"}, {{"axis", attr_int(attrs, "axis")}}}};
}

// ---- Kernels -------------------------------------------------------------------------------

// The tile of a block: `rows` rows of `chunk` elements of L, `width` elements a thread.
struct Tile {
  int64_t rows, chunk, width;
  std::string suffix() const {
    return "_r" + std::to_string(rows) + "_c" + std::to_string(chunk) +
           (width > 1 ? "_v" + std::to_string(width) : "");
  }
};

Tile tile_of(int64_t l) {
  const int64_t width = l % 8 == 0 ? 8 : 1, chunk = std::min(l, kTileElems);
  int64_t rows = 1;
  while (rows < 64 && 2 * rows * chunk <= kTileElems) rows *= 2;
  return {rows, chunk, width};
}

// body(guarded, q, c) for the block's rows and columns of [Q, L]: unguarded where the tile lies
// inside and `neighbours(r0)` says every row of it has its neighbour, guarded (q < Q, c < L)
// elsewhere.
void over_tile(cc::Scope& s, const Tile& t, const cc::Val& q_dim, const cc::Val& l,
               const std::function<cc::Val(const cc::Val&)>& neighbours,
               const std::function<void(bool, const cc::Idx&, const cc::Idx&)>& body) {
  cc::Idx r0 = s.let(s.block_idx(0) * t.rows, "r0"), c0 = s.let(s.block_idx(1) * t.chunk, "c0");
  const cc::Val whole = neighbours(r0) && r0 + t.rows <= q_dim && c0 + t.chunk <= l;
  whole_or_guarded(s, whole, [&](bool guarded) {
    s.annotate_layout(static_cast<int>(t.width));
    s.parallel(t.rows, t.chunk, [&](cc::Idx r, cc::Idx c) {
      cc::Idx q = s.let(r0 + r, "q"), col = s.let(c0 + c, "col");
      guard_if(s, guarded, q < q_dim && col < l, [&] { body(guarded, q, col); });
    });
  });
}

// Parameters x [Q, L], y [Q, 2L]; dims Q, R, L; scalar fill. Grid (Q / rows, L / chunk).
cc::Kernel build_with_prev(DType dtype, const Tile& t) {
  cc::KernelBuilder kb("with_prev" + t.suffix() + "_" + std::string(dtype_name(dtype)));
  cc::Dim q_dim = kb.dim("Q"), r_dim = kb.dim("R"), l = kb.dim("L", {.divisible_by = t.width});
  cc::Buf x = kb.input("x", dtype, {q_dim, l});
  cc::Buf y = kb.output("y", dtype, {q_dim, 2 * l});
  cc::Val fill = kb.scalar_f32("fill");
  kb.body({cc::ceildiv(q_dim, t.rows), cc::ceildiv(l, t.chunk)}, kThreads, [&](cc::Scope& s) {
    over_tile(
        s, t, q_dim, l, [&](const cc::Val& r0) { return r0 >= r_dim; },
        [&](bool guarded, const cc::Idx& q, const cc::Idx& col) {
          y(q, l + col) = x(q, col);
          if (guarded)
            s.if_then_else(
                q >= r_dim, [&] { y(q, col) = x(q - r_dim, col); }, [&] { y(q, col) = fill; });
          else
            y(q, col) = x(q - r_dim, col);
        });
  });
  return kb.build();
}

// Parameters dy [Q, 2L], dx [Q, L]; dims Q, R, L. dx = own half + the successor's first half,
// + 0 for the last rows (what the slices, the zero padding and the add of the composed backward
// gave, bit for bit: -0 + 0 is +0).
cc::Kernel build_with_prev_grad(DType dtype, const Tile& t) {
  cc::KernelBuilder kb("with_prev_grad" + t.suffix() + "_" + std::string(dtype_name(dtype)));
  cc::Dim q_dim = kb.dim("Q"), r_dim = kb.dim("R"), l = kb.dim("L", {.divisible_by = t.width});
  cc::Buf dy = kb.input("dy", dtype, {q_dim, 2 * l});
  cc::Buf dx = kb.output("dx", dtype, {q_dim, l});
  kb.body({cc::ceildiv(q_dim, t.rows), cc::ceildiv(l, t.chunk)}, kThreads, [&](cc::Scope& s) {
    over_tile(
        s, t, q_dim, l, [&](const cc::Val& r0) { return r0 + t.rows + r_dim <= q_dim; },
        [&](bool guarded, const cc::Idx& q, const cc::Idx& col) {
          cc::Val own = s.let(cc::to_f32(dy(q, l + col)), "own");
          if (guarded)
            s.if_then_else(
                q + r_dim < q_dim, [&] { dx(q, col) = own + cc::to_f32(dy(q + r_dim, col)); },
                [&] { dx(q, col) = own + cc::Val(0.0f); });
          else
            dx(q, col) = own + cc::to_f32(dy(q + r_dim, col));
        });
  });
  return kb.build();
}

ExpandFn expand_with_prev(std::shared_ptr<KernelCache> cache, bool grad) {
  return [cache, grad](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                       const Attrs& attrs) {
    const PrevView v = view_of(grad ? out[0] : in[0], attrs, grad ? "dx" : "x");
    const Tile t = tile_of(v.l);
    const DType dt = in[0].dtype;
    const std::string name = (grad ? "with_prev_grad" : "with_prev") + t.suffix();
    KernelCall call{
        .kernel =
            cache->get(kernel_key(name, dt),
                       [&] { return grad ? build_with_prev_grad(dt, t) : build_with_prev(dt, t); }),
        .buffers = {input_slot(0), output_slot(0)},
        .dims = {v.n * v.r, v.r, v.l}};
    if (!grad) call.scalars = {attr_float(attrs, "fill")};
    return OpExpansion{.calls = {call}};
  };
}

AttrSpec axis_attr() {
  return int_attr("axis", std::nullopt, "the joined axis (not the leading one)");
}

}  // namespace

void register_with_prev(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const Attrs axis1 = {{"axis", int64_t{1}}};
  registry.add(
      {.name = "with_prev",
       .doc = "y[n] = x[n - 1] and x[n] joined along axis (x[-1] = fill): each slice of the "
              "leading axis beside its predecessor (V4's overlapping compressor windows)",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = {axis_attr(),
                 {.name = "fill",
                  .kind = AttrKind::Float,
                  .default_value = 0.0,
                  .doc = "the predecessor of the first slice (rounded to the dtype)"}},
       .infer = infer_with_prev,
       .reference = ref_with_prev,
       .gradient = grad_with_prev,
       .expand = expand_with_prev(cache, false),
       // Vector rows (L = 4·64, several a block, the last block partial; L = 2 · 2056 in
       // chunks, the last partial), scalar rows of 3, an axis past 1, a fill.
       .tests = {
           .kernel = {{.shapes = {{67, 4, 64}}, .attrs = axis1},
                      {.shapes = {{3, 2, 2056}}, .attrs = axis1},
                      {.shapes = {{9, 5, 3}}, .attrs = {{"axis", int64_t{2}}}},
                      {.shapes = {{5, 2, 8}}, .attrs = {{"axis", int64_t{-1}}, {"fill", -3.5}}}},
           .gradient = {{.shapes = {{4, 2, 3}}, .attrs = axis1},
                        {.shapes = {{3, 2, 2}}, .attrs = {{"axis", int64_t{2}}}}},
           .examples = {{.inputs = {{{3, 1}, {1, 2, 3}}},
                         .attrs = {{"axis", int64_t{1}}, {"fill", -1.0}},
                         .outputs = {{{3, 2}, {-1, 1, 1, 2, 2, 3}}}}}}});
  registry.add({.name = "with_prev_grad",
                .doc =
                    "dx[n] = dy[n]'s second half along axis + dy[n + 1]'s first half (+0 past the "
                    "last): the backward op of with_prev",
                .inputs = {"dy"},
                .outputs = {"dx"},
                .attrs = {axis_attr()},
                .infer = infer_with_prev_grad,
                .reference = ref_with_prev_grad,
                .expand = expand_with_prev(cache, true),
                .tests = {.kernel = {{.shapes = {{67, 8, 64}}, .attrs = axis1},
                                     {.shapes = {{3, 4, 2056}}, .attrs = axis1},
                                     {.shapes = {{9, 5, 6}}, .attrs = {{"axis", int64_t{2}}}}},
                          .examples = {{.inputs = {{{3, 2}, {1, 2, 3, 4, 5, 6}}},
                                        .attrs = axis1,
                                        .outputs = {{{3, 1}, {2 + 3, 4 + 5, 6}}}}}}});
}

}  // namespace tilerun::kernels
