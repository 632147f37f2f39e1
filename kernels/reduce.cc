// Reductions over any axis or list of axes: reduce_sum, reduce_mean, reduce_max, reduce_min,
// reduce_logsumexp, reduce_l2, reduce_l1, and their backward op reduce_grad.
//
// Kernels: each contiguous run of reduced axes is one stage over the [P, K, R] view of
// reduce_kernel.h (lane order, a row or a column kernel chosen by shape, the same bits either
// way). Reduced axes that are not adjacent are reduced one run at a time, the last run first,
// through f32 scratch: every one of these ops over runs A and B is the op over A of the op over B
// (mean too, since every output averages the same count), so the order stays a function of the
// reduced extents alone. The gradient rule mirrors the stages, recomputing the intermediate
// results, so max and min send their gradient to the lowest row-major index among equal maxima.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/reduce_kernel.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

const std::vector<std::pair<std::string, ReduceKind>> kKinds = {
    {"sum", ReduceKind::Sum}, {"mean", ReduceKind::Mean},           {"max", ReduceKind::Max},
    {"min", ReduceKind::Min}, {"logsumexp", ReduceKind::LogSumExp}, {"l2", ReduceKind::L2},
    {"l1", ReduceKind::L1}};

ReduceKind kind_of(const std::string& name) {
  for (const auto& [n, k] : kKinds)
    if (n == name) return k;
  std::string all;
  for (const auto& [n, k] : kKinds) all += (all.empty() ? "" : ", ") + n;
  throw ShapeError("attribute 'kind' is '" + name + "', expected one of " + all);
}

const std::vector<int64_t>& attr_axes(const Attrs& attrs) {
  return std::get<std::vector<int64_t>>(attrs.at("axes"));
}

// The reduced axes of `x`, normalised and sorted; each named once, at least one.
std::vector<int> reduced_axes(const TensorType& x, const Attrs& attrs) {
  const std::vector<int64_t>& given = attr_axes(attrs);
  if (given.empty())
    throw ShapeError("attribute 'axes' is empty; expected at least one axis of input 'x'");
  std::vector<int> axes;
  for (int64_t a : given) {
    int n = normalize_axis(a, x.shape.size(), "axes", "x");
    if (std::find(axes.begin(), axes.end(), n) != axes.end())
      throw ShapeError("attribute 'axes' names axis " + std::to_string(n) + " of input 'x' " +
                       to_string(x) + " twice; expected each axis once");
    axes.push_back(n);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

std::vector<int64_t> reduced_shape(const std::vector<int64_t>& shape, const std::vector<int>& axes,
                                   bool keepdims) {
  std::vector<int64_t> out;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced)
      out.push_back(shape[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

std::vector<TensorType> infer_reduce(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  std::vector<int> axes = reduced_axes(in[0], attrs);
  return {{in[0].dtype, reduced_shape(in[0].shape, axes, attr_bool(attrs, "keepdims"))}};
}

// The one run of adjacent reduced axes of x that spans more than one element (runs over size-1
// axes reduce nothing); the first run when none does. nullopt when several do.
std::optional<std::pair<int, int>> single_run(const TensorType& x, const Attrs& attrs) {
  std::vector<std::pair<int, int>> runs = runs_of(reduced_axes(x, attrs)), wide;
  for (const auto& run : runs)
    if (axis_view(x.shape, run.first, run.second).extent > 1) wide.push_back(run);
  if (wide.size() > 1) return std::nullopt;
  return wide.empty() ? runs[0] : wide[0];
}

// (x, y, dy) -> dx, over one run of adjacent axes.
std::vector<TensorType> infer_reduce_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  kind_of(attr_string(attrs, "kind"));
  TensorType y = infer_reduce({in[0]}, attrs)[0];
  if (!single_run(in[0], attrs))
    throw ShapeError(
        "attribute 'axes' of reduce_grad names axes that are not adjacent; expected "
        "one run of adjacent axes of input 'x' (the gradient rule splits others)");
  expect_same(in[1], "y", y, "the reduction of x");
  expect_same(in[2], "dy", y, "the reduction of x");
  return {in[0]};
}

// ---- References ----------------------------------------------------------------------------

// For each element of x (row-major), the index of its output; elements of one output come in
// row-major order of the reduced coordinates.
std::vector<int64_t> output_of(const std::vector<int64_t>& shape, const std::vector<int>& axes,
                               int64_t* outputs) {
  const int rank = static_cast<int>(shape.size());
  std::vector<int64_t> kept_stride(rank, 0);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) {
      kept_stride[i] = stride;
      stride *= shape[i];
    }
  *outputs = stride;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int64_t> out(n);
  std::vector<int64_t> coord(rank, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t o = 0;
    for (int i = 0; i < rank; ++i) o += coord[i] * kept_stride[i];
    out[e] = o;
    for (int i = rank - 1; i >= 0; --i) {
      if (++coord[i] < shape[i]) break;
      coord[i] = 0;
    }
  }
  return out;
}

// Each output's elements, in row-major order.
std::vector<std::vector<double>> elements_per_output(const RefTensor& x,
                                                     const std::vector<int>& axes) {
  int64_t outputs = 0;
  std::vector<int64_t> out = output_of(x.shape, axes, &outputs);
  std::vector<std::vector<double>> groups(outputs);
  for (size_t e = 0; e < out.size(); ++e) groups[out[e]].push_back(x.data[e]);
  return groups;
}

double reduce_values(ReduceKind kind, const std::vector<double>& v) {
  double mx = *std::max_element(v.begin(), v.end()), acc = 0;
  switch (kind) {
    case ReduceKind::Max:
      return mx;
    case ReduceKind::Min:
      return *std::min_element(v.begin(), v.end());
    case ReduceKind::LogSumExp:
      for (double a : v) acc += std::exp(a - mx);
      return mx + std::log(acc);
    case ReduceKind::L2:
      for (double a : v) acc += a * a;
      return std::sqrt(acc);
    case ReduceKind::L1:
      for (double a : v) acc += std::abs(a);
      return acc;
    default:
      for (double a : v) acc += a;
      return kind == ReduceKind::Mean ? acc / static_cast<double>(v.size()) : acc;
  }
}

std::function<std::vector<RefTensor>(const std::vector<RefTensor>&, const Attrs&)> ref_reduce(
    ReduceKind kind) {
  return [kind](const std::vector<RefTensor>& in, const Attrs& attrs) {
    const RefTensor& x = in[0];
    std::vector<int> axes = reduced_axes({DType::F32, x.shape}, attrs);
    RefTensor y = ref_zeros(reduced_shape(x.shape, axes, attr_bool(attrs, "keepdims")));
    std::vector<std::vector<double>> groups = elements_per_output(x, axes);
    for (size_t o = 0; o < groups.size(); ++o) y.data[o] = reduce_values(kind, groups[o]);
    return std::vector<RefTensor>{y};
  };
}

// dx of one element, given its output's y and dy: max and min send dy to the first element
// equal to the output's max (min) of x (recomputed from x, as the kernels do: y is not read).
std::vector<RefTensor> ref_reduce_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &y = in[1], &dy = in[2];
  ReduceKind kind = kind_of(attr_string(attrs, "kind"));
  std::vector<int> axes = reduced_axes({DType::F32, x.shape}, attrs);
  int64_t outputs = 0;
  std::vector<int64_t> out = output_of(x.shape, axes, &outputs);
  const double count = static_cast<double>(x.numel() / std::max<int64_t>(outputs, 1));
  std::vector<double> best(outputs, 0);
  std::vector<bool> seen(outputs, false), taken(outputs, false);
  for (size_t e = 0; e < out.size(); ++e) {
    double v = x.data[e];
    int64_t o = out[e];
    bool better = kind == ReduceKind::Max ? v > best[o] : v < best[o];
    if (!seen[o] || better) best[o] = v, seen[o] = true;
  }
  RefTensor dx = ref_zeros(x.shape);
  for (size_t e = 0; e < out.size(); ++e) {
    const int64_t o = out[e];
    const double v = x.data[e], g = dy.data[o];
    switch (kind) {
      case ReduceKind::Sum:
        dx.data[e] = g;
        break;
      case ReduceKind::Mean:
        dx.data[e] = g / count;
        break;
      case ReduceKind::Max:
      case ReduceKind::Min:
        dx.data[e] = !taken[o] && v == best[o] ? g : 0.0;
        if (v == best[o]) taken[o] = true;
        break;
      case ReduceKind::LogSumExp:
        dx.data[e] = g * std::exp(v - y.data[o]);
        break;
      case ReduceKind::L2:
        dx.data[e] = y.data[o] == 0 ? 0.0 : g * v / y.data[o];
        break;
      case ReduceKind::L1:
        dx.data[e] = g * (v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0);
        break;
    }
  }
  return {dx};
}

// ---- Gradient rule: one reduce_grad per run, the last run's first ---------------------------

std::function<std::vector<GradOp>(const std::vector<TensorType>&, const Attrs&,
                                  const std::vector<bool>&)>
grad_reduce(const std::string& op, const std::string& kind) {
  return [op, kind](const std::vector<TensorType>& in, const Attrs& attrs,
                    const std::vector<bool>& needs) {
    if (!needs[0]) return std::vector<GradOp>{};
    std::vector<std::pair<int, int>> runs = runs_of(reduced_axes(in[0], attrs));
    std::reverse(runs.begin(), runs.end());  // stage j reduces runs[j]
    const size_t n = runs.size();
    // The last stage names every reduced axis (the earlier ones are size 1 by then), so that
    // keepdims: false drops them all.
    auto axes_of = [&](size_t j) {
      if (j + 1 == n) return attr_axes(attrs);
      std::vector<int64_t> a;
      for (int i = runs[j].first; i < runs[j].second; ++i) a.push_back(i);
      return a;
    };
    // t[j] is stage j's input, t[n] the op's output.
    std::vector<std::string> t = {"x0"};
    std::vector<GradOp> ops;
    for (size_t j = 0; j + 1 < n; ++j) {
      t.push_back("t" + std::to_string(j + 1));
      ops.push_back({op, {t[j]}, {t[j + 1]}, {{"axes", axes_of(j)}, {"keepdims", true}}});
    }
    t.push_back("y0");
    std::string d = "dy0";
    for (size_t j = n; j-- > 0;) {
      bool keep = j + 1 < n || attr_bool(attrs, "keepdims");
      std::string dx = j == 0 ? "dx0" : "dt" + std::to_string(j);
      ops.push_back({"reduce_grad",
                     {t[j], t[j + 1], d},
                     {dx},
                     {{"kind", kind}, {"axes", axes_of(j)}, {"keepdims", keep}}});
      d = dx;
    }
    return ops;
  };
}

// ---- Kernels -------------------------------------------------------------------------------

ExpandFn expand_reduce(std::shared_ptr<KernelCache> cache, ReduceKind kind) {
  return [cache, kind](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                       const Attrs& attrs) {
    return reduce_over_axes(*cache, kind, in[0], out[0].dtype, reduced_axes(in[0], attrs));
  };
}

constexpr int kGradThreads = 128;

bool has_winner(ReduceKind k) { return k == ReduceKind::Max || k == ReduceKind::Min; }

// dx of element k of an output, from x there (xv), the output's y and dy (g), and for max/min
// the winner (the lowest k whose x equals the output's max or min, as f32: exact below 2^24).
cc::Val grad_of(ReduceKind kind, const cc::Val& xv, const std::function<cc::Val()>& yv,
                const cc::Val& g, const cc::Idx& k, const cc::Val& winner, const cc::Val& extent) {
  cc::Val zero(0.0f);
  switch (kind) {
    case ReduceKind::Sum:
      return g;
    case ReduceKind::Mean:
      return g / cc::to_f32(extent);
    case ReduceKind::Max:
    case ReduceKind::Min:
      return cc::select(cc::to_f32(k) == winner, g, zero);
    case ReduceKind::LogSumExp:
      return g * cc::exp(xv - yv());
    case ReduceKind::L2: {
      cc::Val y = yv();
      return cc::select(y == 0.0f, zero, g * xv / y);
    }
    case ReduceKind::L1:
      return cc::select(xv > 0.0f, g, cc::select(xv < 0.0f, -g, zero));
  }
  return zero;
}

cc::Val better(ReduceKind kind, const cc::Val& a, const cc::Val& b) {
  return kind == ReduceKind::Max ? cc::max(a, b) : cc::min(a, b);
}

std::string grad_name(ReduceKind kind, bool inner) {
  return "reduce_grad_" + reduce_kind_name(kind) + (inner ? "_col" : "_row");
}

// The last axis (R == 1): one block per output row, the winner from two block reductions.
// Parameters: x [P, K], y [P], dy [P], dx [P, K]; P, K.
cc::Kernel build_grad_row(ReduceKind kind, DType dtype) {
  cc::KernelBuilder kb(grad_name(kind, false) + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Buf x = kb.input("x", dtype, {p, k});
  cc::Buf y = kb.input("y", dtype, {p}), dy = kb.input("dy", dtype, {p});
  cc::Buf dx = kb.output("dx", dtype, {p, k});
  kb.body({p}, kGradThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val winner;
    if (has_winner(kind)) {
      cc::Val best = s.let(s.reduce(kind == ReduceKind::Max ? cc::ReduceOp::Max : cc::ReduceOp::Min,
                                    k, [&](cc::Idx j) { return x(row, j); }),
                           "best");
      winner =
          s.let(s.reduce_min(k,
                             [&](cc::Idx j) {
                               return cc::select(x(row, j) == best, cc::to_f32(j), cc::to_f32(k));
                             }),
                "winner");
    }
    s.parallel(k, [&](cc::Idx j) {
      dx(row, j) = grad_of(
          kind, x(row, j), [&] { return y(row); }, dy(row), j, winner, k);
    });
  });
  return kb.build();
}

// A strided axis (R > 1): one thread per output (p, r), looping over k; the block (p, r-tile).
// Parameters: x [P, K, R], y [P, R], dy [P, R], dx [P, K, R]; P, K, R.
cc::Kernel build_grad_col(ReduceKind kind, DType dtype) {
  cc::KernelBuilder kb(grad_name(kind, true) + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), k = kb.dim("K"), r = kb.dim("R");
  cc::Buf x = kb.input("x", dtype, {p, k, r});
  cc::Buf y = kb.input("y", dtype, {p, r}), dy = kb.input("dy", dtype, {p, r});
  cc::Buf dx = kb.output("dx", dtype, {p, k, r});
  kb.body({p, cc::ceildiv(r, kGradThreads)}, kGradThreads, [&](cc::Scope& s) {
    cc::Buf best = s.alloc_fragment("best", DType::F32, {kGradThreads});
    cc::Buf first = s.alloc_fragment("first", DType::F32, {kGradThreads});
    s.parallel(kGradThreads, [&](cc::Idx t) {
      cc::Idx po = s.block_idx(0), ro = s.block_idx(1) * kGradThreads + t;
      s.if_then(ro < r, [&] {
        cc::Val winner;
        if (has_winner(kind)) {
          best(t) = x(po, 0, ro);
          s.serial(k - 1, [&](cc::Idx j) { best(t) = better(kind, best(t), x(po, j + 1, ro)); });
          first(t) = cc::to_f32(k);
          s.serial(k, [&](cc::Idx j) {
            first(t) = cc::select(first(t) == cc::to_f32(k) && x(po, j, ro) == best(t),
                                  cc::to_f32(j), first(t));
          });
          winner = s.let(first(t), "winner");
        }
        cc::Val g = s.let(dy(po, ro), "g");
        s.serial(k, [&](cc::Idx j) {
          dx(po, j, ro) = grad_of(
              kind, x(po, j, ro), [&] { return y(po, ro); }, g, j, winner, k);
        });
      });
    });
  });
  return kb.build();
}

ExpandFn expand_reduce_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    ReduceKind kind = kind_of(attr_string(attrs, "kind"));
    DType dt = out[0].dtype;
    std::pair<int, int> run = *single_run(in[0], attrs);
    AxisView v = axis_view(in[0].shape, run.first, run.second);
    const bool inner = v.inner > 1;
    KernelCall call{
        .kernel =
            cache->get(kernel_key(grad_name(kind, inner), dt),
                       [&] { return inner ? build_grad_col(kind, dt) : build_grad_row(kind, dt); }),
        .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)}};
    call.dims = inner ? std::vector<int64_t>{v.outer, v.extent, v.inner}
                      : std::vector<int64_t>{v.outer, v.extent};
    return OpExpansion{.calls = {call}};
  };
}

const AttrSpec kAxes{.name = "axes",
                     .kind = AttrKind::IntList,
                     .default_value = AttrValue{std::vector<int64_t>{-1}},
                     .doc = "the reduced axes (negative counts from the end), each once"};
const AttrSpec kKeepdims{.name = "keepdims",
                         .kind = AttrKind::Bool,
                         .default_value = AttrValue{false},
                         .doc = "keep each reduced axis as size 1"};

Attrs axes_attrs(std::vector<int64_t> axes, bool keepdims = false) {
  return {{"axes", std::move(axes)}, {"keepdims", keepdims}};
}

// Kernel cases shared by the forward ops: the row kernel (last axis, K >= 64), the column kernel
// (a leading or middle axis; short rows), the strided row kernel (axis 0 of [1000, 3]), several
// runs (non-adjacent axes), keepdims, and K past the lane count with a ragged last lane. The
// sums of 1000 and 1320 terms draw positive terms: a signed sum that cancels to near 0 (seen in
// CI: 1320 terms to -0.398) misses the relative bound by the f32 rounding of its large partial
// sums, which says nothing about the kernel.
OpTests forward_tests(ReduceKind kind, std::vector<OpExample> examples) {
  double lo = kind == ReduceKind::L2 ? 0.25 : -2;  // keeps the L2 gradient off its kink at 0
  OpTests t;
  t.kernel = {
      {{{7, 300}}, axes_attrs({-1})},
      {{{1, 1}}, axes_attrs({1})},
      {{{33, 5}}, axes_attrs({1}, true)},
      {{{300, 9}}, axes_attrs({0})},
      {{{1000, 3}}, axes_attrs({0}), 0.25, 2},
      {{{3, 130, 17}}, axes_attrs({1})},
      {{{4, 5, 6, 7}}, axes_attrs({0, 2})},
      {{{4, 5, 66}}, axes_attrs({0, 1, 2}), 0.25, 2},
      {{{5, 6, 7}}, axes_attrs({-3, -1}, true)},
      {{{600, 2, 700}}, axes_attrs({0})},  // sum, max and min: the lanes pass (reduce_kernel.cc)
      // A short middle axis over rows of a multiple of 8: the vector column kernel for 2-byte
      // dtypes, its last block of rows partial.
      {{{37, 6, 64}}, axes_attrs({1})},
      {{{3, 16, 8}}, axes_attrs({1})}};
  t.gradient = {{{{3, 4}}, axes_attrs({1}), lo, 2, 1e-3},
                {{{4, 3}}, axes_attrs({0}, true), lo, 2, 1e-3},
                {{{2, 3, 4}}, axes_attrs({0, 2}), lo, 2, 1e-3},
                {{{2, 2, 3}}, axes_attrs({1, 2}), lo, 2, 1e-3}};
  t.examples = std::move(examples);
  return t;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

void register_reduce(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  struct Op {
    std::string name, kind;
    ReduceKind k;
    std::string doc;
    OpExample example;
  };
  // x = [[1, -2, 3], [4, 0, -4]] over axis 1.
  auto ex = [](std::vector<double> y) {
    return OpExample{.inputs = {{{2, 3}, {1, -2, 3, 4, 0, -4}}},
                     .attrs = axes_attrs({1}),
                     .outputs = {{{2}, std::move(y)}}};
  };
  const std::vector<Op> ops = {
      {"reduce_sum", "sum", ReduceKind::Sum, "y = sum of x over axes; dx = dy broadcast",
       ex({2, 0})},
      {"reduce_mean", "mean", ReduceKind::Mean, "y = mean of x over axes; dx = dy / count",
       ex({2.0 / 3, 0})},
      {"reduce_max", "max", ReduceKind::Max,
       "y = max of x over axes; dx = dy at the lowest-index maximum, 0 elsewhere", ex({3, 4})},
      {"reduce_min", "min", ReduceKind::Min,
       "y = min of x over axes; dx = dy at the lowest-index minimum, 0 elsewhere", ex({-2, -4})},
      {"reduce_logsumexp", "logsumexp", ReduceKind::LogSumExp,
       "y = max + log(sum(exp(x - max))) over axes; dx = dy * exp(x - y)",
       ex({3 + std::log(std::exp(-2) + std::exp(-5) + 1),
           4 + std::log(1 + std::exp(-4) + std::exp(-8))})},
      {"reduce_l2", "l2", ReduceKind::L2, "y = sqrt(sum(x^2)) over axes; dx = dy * x / y",
       ex({std::sqrt(14.0), std::sqrt(32.0)})},
      {"reduce_l1", "l1", ReduceKind::L1, "y = sum(abs(x)) over axes; dx = dy * sign(x)",
       ex({6, 8})},
  };
  for (const Op& op : ops)
    registry.add(
        {.name = op.name,
         .doc = op.doc +
                "; y has x's shape without axes (size 1 with keepdims); summed in the lane order",
         .inputs = {"x"},
         .outputs = {"y"},
         .attrs = {kAxes, kKeepdims},
         .infer = infer_reduce,
         .reference = ref_reduce(op.k),
         .gradient = grad_reduce(op.name, op.kind),
         .expand = expand_reduce(cache, op.k),
         .tests = forward_tests(op.k, {op.example})});

  auto grad_case = [](std::vector<std::vector<int64_t>> shapes, std::string kind,
                      std::vector<int64_t> axes, bool keep = false) {
    Attrs a = axes_attrs(std::move(axes), keep);
    a["kind"] = std::move(kind);
    return OpTestCase{.shapes = std::move(shapes), .attrs = a, .lo = 0.25, .hi = 2};
  };
  std::vector<OpTestCase> grad_cases;
  for (const auto& [name, k] : kKinds) {
    grad_cases.push_back(grad_case({{7, 300}, {7}, {7}}, name, {1}));
    grad_cases.push_back(grad_case({{300, 9}, {1, 9}, {1, 9}}, name, {0}, true));
    grad_cases.push_back(grad_case({{3, 4, 5, 6}, {3, 6}, {3, 6}}, name, {1, 2}));
  }
  Attrs max_attrs = axes_attrs({1});
  max_attrs["kind"] = std::string("max");
  registry.add(
      {.name = "reduce_grad",
       .doc = "dx of the reduction kind over one run of adjacent axes from (x, y, dy) (the "
              "backward op of the reduce_* ops; max/min find the winner from x, y unread)",
       .inputs = {"x", "y", "dy"},
       .outputs = {"dx"},
       .attrs = {{.name = "kind",
                  .kind = AttrKind::String,
                  .doc = "sum, mean, max, min, logsumexp, l2 or l1"},
                 kAxes,
                 kKeepdims},
       .infer = infer_reduce_grad,
       .reference = ref_reduce_grad,
       .expand = expand_reduce_grad(cache),
       .tests = {
           .kernel = grad_cases,
           // Ties: the first of the two 3s takes the gradient.
           .examples = {{.inputs = {{{2, 3}, {3, -kInf, 3, 1, 2, 0}}, {{2}, {3, 2}}, {{2}, {5, 7}}},
                         .attrs = max_attrs,
                         .outputs = {{{2, 3}, {5, 0, 0, 0, 7, 0}}}}}}});
}

}  // namespace tilerun::kernels
