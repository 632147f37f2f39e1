// softmax and log_softmax over any axis, with a scale, an additive bias (x's shape or a trailing
// part of it that covers the axis, repeated over the leading dims) and a per-row sink logit that
// joins the denominator only; their backward ops softmax_grad, log_softmax_grad and
// softmax_sink_grad. Plain softmax over the last axis (no scale, bias or sink) keeps its original
// kernel (one block per row, block-tree sums), so its bits never change; every other form runs
// the lane-order kernels of softmax_kernel.h.
#include <algorithm>
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/softmax_kernel.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// The inputs present: x, then the bias unless only the sink follows, then the sink.
struct SoftmaxInputs {
  int bias = -1, sink = -1;  // input slots, -1 when absent
};
SoftmaxInputs softmax_inputs(size_t n, const Attrs& attrs) {
  SoftmaxInputs s;
  const bool has_sink = attr_bool(attrs, "has_sink");
  if (has_sink && n < 2)
    throw ShapeError(
        "attribute 'has_sink' is true but no input 'sink' is given; expected the "
        "sink as the last input");
  if (!has_sink && n == 3)
    throw ShapeError(
        "input 'sink' is given but attribute 'has_sink' is false; expected "
        "has_sink: true");
  if (has_sink) s.sink = static_cast<int>(n) - 1;
  if (n - (has_sink ? 1 : 0) == 2) s.bias = 1;
  return s;
}

std::vector<int64_t> without_axis(std::vector<int64_t> shape, int axis) {
  shape.erase(shape.begin() + axis);
  return shape;
}

// x, [bias], [sink] -> y.
std::vector<TensorType> infer_softmax(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const TensorType& x = in[0];
  int axis = normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", "x");
  SoftmaxInputs s = softmax_inputs(in.size(), attrs);
  if (s.bias >= 0) {
    const TensorType& b = in[s.bias];
    size_t lead = x.shape.size() - b.shape.size();
    bool suffix = b.dtype == x.dtype && b.shape.size() <= x.shape.size() &&
                  std::equal(b.shape.begin(), b.shape.end(), x.shape.begin() + lead) &&
                  static_cast<int>(lead) <= axis;
    if (!suffix)
      throw ShapeError("input 'bias' is " + to_string(b) + ", expected " + to_string(x) +
                       " like 'x' or a trailing part of its shape that includes axis " +
                       std::to_string(axis));
  }
  if (s.sink >= 0)
    expect_same(in[s.sink], "sink", {x.dtype, without_axis(x.shape, axis)}, "x without its axis");
  return {x};
}

// (y, dy) -> dx. The axis defaults to the last when absent: callers from before it existed pass
// no attributes.
std::vector<TensorType> infer_softmax_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "y");
  int64_t axis = attrs.count("axis") ? attr_int(attrs, "axis") : -1;
  normalize_axis(axis, in[0].shape.size(), "axis", "y");
  expect_same(in[1], "dy", in[0], "y");
  return {in[0]};
}

// (y, dy) -> dsink.
std::vector<TensorType> infer_softmax_sink_grad(const std::vector<TensorType>& in,
                                                const Attrs& attrs) {
  infer_softmax_grad(in, attrs);
  int axis = normalize_axis(attr_int(attrs, "axis"), in[0].shape.size(), "axis", "y");
  return {{in[0].dtype, without_axis(in[0].shape, axis)}};
}

AxisView view_of(const std::vector<int64_t>& shape, const Attrs& attrs) {
  int axis = normalize_axis(attr_int(attrs, "axis"), shape.size(), "axis", "x");
  return axis_view(shape, axis, axis + 1);
}

// The max is subtracted first so that exp never overflows, as the kernels do. The bias repeats
// every numel(bias) elements (it is a trailing part of x's shape).
std::function<std::vector<RefTensor>(const std::vector<RefTensor>&, const Attrs&)> ref_softmax(
    bool log) {
  return [log](const std::vector<RefTensor>& in, const Attrs& attrs) {
    const RefTensor& x = in[0];
    SoftmaxInputs si = softmax_inputs(in.size(), attrs);
    AxisView v = view_of(x.shape, attrs);
    const double scale = attr_float(attrs, "scale");
    RefTensor y = ref_zeros(x.shape);
    std::vector<double> z(v.extent);
    for (int64_t p = 0; p < v.outer; ++p)
      for (int64_t r = 0; r < v.inner; ++r) {
        auto at = [&](int64_t k) { return (p * v.extent + k) * v.inner + r; };
        for (int64_t k = 0; k < v.extent; ++k) {
          z[k] = scale * x.data[at(k)];
          if (si.bias >= 0) z[k] += in[si.bias].data[at(k) % in[si.bias].numel()];
        }
        double m = *std::max_element(z.begin(), z.end());
        double sink = si.sink >= 0 ? in[si.sink].data[p * v.inner + r] : 0;
        if (si.sink >= 0) m = std::max(m, sink);
        double d = si.sink >= 0 ? std::exp(sink - m) : 0;
        for (double zk : z) d += std::exp(zk - m);
        for (int64_t k = 0; k < v.extent; ++k)
          y.data[at(k)] = log ? z[k] - m - std::log(d) : std::exp(z[k] - m) / d;
      }
    return std::vector<RefTensor>{y};
  };
}

// Per row over the axis, with p = y and q = y·dy (log: p = exp(y), q = dy):
//   softmax_grad:      dx = scale · y · (dy - sum(q))     log_softmax_grad: scale · (dy - p ·
//   sum(q)) softmax_sink_grad: dsink = -(1 - sum(p)) · sum(q)
enum class GradOut { Dx, Sink };
std::function<std::vector<RefTensor>(const std::vector<RefTensor>&, const Attrs&)> ref_softmax_grad(
    bool log_in, GradOut what) {
  return [log_in, what](const std::vector<RefTensor>& in, const Attrs& attrs) {
    const RefTensor &y = in[0], &dy = in[1];
    const bool log = what == GradOut::Sink ? attr_bool(attrs, "log") : log_in;
    AxisView v = view_of(y.shape, attrs);
    const double scale = what == GradOut::Dx ? attr_float(attrs, "scale") : 1.0;
    int axis = normalize_axis(attr_int(attrs, "axis"), y.shape.size(), "axis", "y");
    RefTensor out =
        what == GradOut::Dx ? ref_zeros(y.shape) : ref_zeros(without_axis(y.shape, axis));
    for (int64_t p = 0; p < v.outer; ++p)
      for (int64_t r = 0; r < v.inner; ++r) {
        auto at = [&](int64_t k) { return (p * v.extent + k) * v.inner + r; };
        double sum_p = 0, sum_q = 0;
        for (int64_t k = 0; k < v.extent; ++k) {
          double yk = y.data[at(k)], dyk = dy.data[at(k)];
          sum_p += log ? std::exp(yk) : yk;
          sum_q += log ? dyk : yk * dyk;
        }
        if (what == GradOut::Sink) {
          out.data[p * v.inner + r] = -(1 - sum_p) * sum_q;
          continue;
        }
        for (int64_t k = 0; k < v.extent; ++k) {
          double yk = y.data[at(k)], dyk = dy.data[at(k)];
          out.data[at(k)] = log ? scale * (dyk - std::exp(yk) * sum_q) : scale * yk * (dyk - sum_q);
        }
      }
    return std::vector<RefTensor>{out};
  };
}

// dz = the softmax Jacobian applied to dy (it needs only the output); dx = scale · dz; the bias
// takes dz, summed over the leading dims it repeats over; the sink takes -p_sink · sum(q).
std::function<std::vector<GradOp>(const std::vector<TensorType>&, const Attrs&,
                                  const std::vector<bool>&)>
grad_softmax(bool log) {
  return [log](const std::vector<TensorType>& in, const Attrs& attrs,
               const std::vector<bool>& needs) {
    SoftmaxInputs si = softmax_inputs(in.size(), attrs);
    const std::string op = log ? "log_softmax_grad" : "softmax_grad";
    const int64_t axis = attr_int(attrs, "axis");
    std::vector<GradOp> ops;
    if (needs[0])
      ops.push_back(
          {op, {"y0", "dy0"}, {"dx0"}, {{"axis", axis}, {"scale", attr_float(attrs, "scale")}}});
    if (si.bias >= 0 && needs[si.bias]) {
      size_t lead = in[0].shape.size() - in[si.bias].shape.size();
      std::string dbias = dx_name(si.bias);
      ops.push_back(
          {op, {"y0", "dy0"}, {lead == 0 ? dbias : "dz"}, {{"axis", axis}, {"scale", 1.0}}});
      if (lead > 0) {
        std::vector<int64_t> axes;
        for (size_t i = 0; i < lead; ++i) axes.push_back(static_cast<int64_t>(i));
        ops.push_back({"reduce_sum", {"dz"}, {dbias}, {{"axes", axes}, {"keepdims", false}}});
      }
    }
    if (si.sink >= 0 && needs[si.sink])
      ops.push_back(
          {"softmax_sink_grad", {"y0", "dy0"}, {dx_name(si.sink)}, {{"axis", axis}, {"log", log}}});
    return ops;
  };
}

// ---- Tile kernels: one block per row of the [R, D] view -----------------------------------

constexpr int kThreads = 128;

// Parameters: x, y; R, D. exp is recomputed in the store rather than kept: a row of any length
// then needs no storage, and the recomputation gives the same bits as the summed terms.
cc::Kernel build_softmax(DType dtype) {
  cc::KernelBuilder kb("softmax_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d});
  cc::Buf y = kb.output("y", dtype, {r, d});
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val mx = s.reduce_max(d, [&](cc::Idx j) { return x(row, j); });
    cc::Val sum = s.reduce_sum(d, [&](cc::Idx j) { return cc::exp(x(row, j) - mx); });
    s.parallel(d, [&](cc::Idx j) { y(row, j) = cc::exp(x(row, j) - mx) / sum; });
  });
  return kb.build();
}

// Parameters: y, dy, dx; R, D.
cc::Kernel build_softmax_grad(DType dtype) {
  cc::KernelBuilder kb("softmax_grad_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf y = kb.input("y", dtype, {r, d}), dy = kb.input("dy", dtype, {r, d});
  cc::Buf dx = kb.output("dx", dtype, {r, d});
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val dot = s.reduce_sum(d, [&](cc::Idx j) { return y(row, j) * dy(row, j); });
    s.parallel(d, [&](cc::Idx j) { dx(row, j) = y(row, j) * (dy(row, j) - dot); });
  });
  return kb.build();
}

// The original kernel `build` over the [R, D] rows of a last-axis view: inputs 0..n_in-1, then
// output 0.
KernelCall original_call(KernelCache& cache, const std::string& name, int n_in,
                         cc::Kernel (*build)(DType), DType dt, const AxisView& v) {
  KernelCall call{.kernel = cache.get(kernel_key(name, dt), [&] { return build(dt); }),
                  .dims = {v.outer, v.extent}};
  for (int i = 0; i < n_in; ++i) call.buffers.push_back(input_slot(i));
  call.buffers.push_back(output_slot(0));
  return call;
}

ExpandFn expand_softmax(std::shared_ptr<KernelCache> cache, bool log) {
  return [cache, log](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                      const Attrs& attrs) {
    SoftmaxInputs si = softmax_inputs(in.size(), attrs);
    AxisView v = view_of(in[0].shape, attrs);
    const double scale = attr_float(attrs, "scale");
    const DType dt = out[0].dtype;
    if (!log && si.bias < 0 && si.sink < 0 && scale == 1.0 && v.inner == 1)
      return OpExpansion{.calls = {original_call(*cache, "softmax", 1, build_softmax, dt, v)}};
    SoftmaxView sv{.pb = v.outer, .k = v.extent, .r = v.inner};
    if (si.bias >= 0) {
      sv.pb = numel(in[si.bias]) / (v.extent * v.inner);
      sv.po = v.outer / sv.pb;
    }
    SoftmaxVariant variant{.log = log, .bias = si.bias >= 0, .sink = si.sink >= 0};
    return OpExpansion{.calls = {softmax_call(*cache, variant, dt, sv, scale)}};
  };
}

ExpandFn expand_softmax_grad(std::shared_ptr<KernelCache> cache, bool log) {
  return [cache, log](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                      const Attrs& attrs) {
    AxisView v = view_of(in[0].shape, attrs);
    const double scale = attr_float(attrs, "scale");
    const DType dt = out[0].dtype;
    if (!log && scale == 1.0 && v.inner == 1)
      return OpExpansion{
          .calls = {original_call(*cache, "softmax_grad", 2, build_softmax_grad, dt, v)}};
    return OpExpansion{.calls = {softmax_grad_call(*cache, log, dt, v, scale)}};
  };
}

ExpandFn expand_softmax_sink_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    AxisView v = view_of(in[0].shape, attrs);
    return OpExpansion{
        .calls = {softmax_sink_grad_call(*cache, attr_bool(attrs, "log"), out[0].dtype, v)}};
  };
}

const AttrSpec kAxis{.name = "axis",
                     .kind = AttrKind::Int,
                     .default_value = AttrValue{int64_t{-1}},
                     .doc = "the axis normalised over (negative counts from the end)"};
const AttrSpec kScale{.name = "scale",
                      .kind = AttrKind::Float,
                      .default_value = AttrValue{1.0},
                      .doc = "multiplies x before the bias is added"};
const AttrSpec kHasSink{.name = "has_sink",
                        .kind = AttrKind::Bool,
                        .default_value = AttrValue{false},
                        .doc = "the last input is a sink logit per row (x's shape without axis)"};

Attrs with(Attrs a, const std::string& key, AttrValue v) {
  a[key] = std::move(v);
  return a;
}

// Cases of the lane-order forms: the three kernel shapes (a long last axis, a short last axis,
// a middle or leading axis), each with bias and sink; a bias repeated over leading dims.
std::vector<OpTestCase> variant_cases() {
  const Attrs sink = {{"has_sink", true}}, half = {{"scale", 0.5}};
  return {{{{7, 130}, {7, 130}, {7}}, with(sink, "scale", -1.5), -8, 8},
          {{{33, 7}, {7}}, {}, -8, 8},
          {{{33, 7}, {33}}, sink},
          {{{9, 70}, {9}}, sink},
          {{{33, 7}}, {{"axis", int64_t{0}}}},
          {{{3, 130, 5}, {130, 5}, {3, 5}}, with(with(sink, "axis", int64_t{1}), "scale", 0.5)},
          {{{4, 3, 70}, {3, 70}}, half},
          {{{2, 3, 9, 4}, {9, 4}}, {{"axis", int64_t{-2}}}}};
}

std::vector<OpTestCase> variant_gradient_cases() {
  const Attrs sink = {{"has_sink", true}};
  return {{{{3, 5}, {3, 5}, {3}}, with(sink, "scale", 0.7)},
          {{{4, 3}, {3}}, {{"axis", int64_t{0}}}},
          {{{2, 3, 4}, {3, 4}, {2, 4}}, with(sink, "axis", int64_t{1})},
          {{{2, 5}, {2}}, sink}};
}

}  // namespace

void register_softmax(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  std::vector<OpTestCase> kernel = {
      {{{1, 1}}}, {{{7, 33}}, {}, -30, 30}, {{{130, 7}}}, {{{2, 33, 130}}, {}, -80, 80}};
  for (const OpTestCase& c : variant_cases()) kernel.push_back(c);
  std::vector<OpTestCase> gradient = {{{{3, 7}}}, {{{1, 1}}}, {{{2, 2, 5}}}};
  for (const OpTestCase& c : variant_gradient_cases()) gradient.push_back(c);
  registry.add(
      {.name = "softmax",
       .doc = "y = exp(z - m) / (sum(exp(z - m)) + exp(sink - m)) over axis, z = scale * x + bias, "
              "m = max(z, sink); y like x; bias like x or a trailing part of it; sink x without "
              "axis; grad: softmax_grad (+ reduce_sum for a repeated bias, softmax_sink_grad)",
       .inputs = {"x", "bias", "sink"},
       .optional_inputs = 2,
       .outputs = {"y"},
       .attrs = {kAxis, kScale, kHasSink},
       .infer = infer_softmax,
       .reference = ref_softmax(false),
       .gradient = grad_softmax(false),
       .expand = expand_softmax(cache, false),
       .tests = {.kernel = kernel,
                 .gradient = gradient,
                 .examples = {{.inputs = {{{1, 2}, {0, 1.0986122886681098}}},  // ln 3
                               .outputs = {{{1, 2}, {0.25, 0.75}}}},
                              // A sink equal to both logits takes a third.
                              {.inputs = {{{1, 2}, {0, 0}}, {{1}, {0}}},
                               .attrs = {{"has_sink", true}},
                               .outputs = {{{1, 2}, {1.0 / 3, 1.0 / 3}}}}}}});
  registry.add(
      {.name = "log_softmax",
       .doc = "y = z - m - log(sum(exp(z - m)) + exp(sink - m)) over axis, z = scale * x + bias, "
              "m = max(z, sink); shapes as softmax; grad: log_softmax_grad (+ reduce_sum, "
              "softmax_sink_grad)",
       .inputs = {"x", "bias", "sink"},
       .optional_inputs = 2,
       .outputs = {"y"},
       .attrs = {kAxis, kScale, kHasSink},
       .infer = infer_softmax,
       .reference = ref_softmax(true),
       .gradient = grad_softmax(true),
       .expand = expand_softmax(cache, true),
       .tests = {.kernel = kernel,
                 .gradient = gradient,
                 .examples = {{.inputs = {{{2, 1}, {0, 1.0986122886681098}}},
                               .attrs = {{"axis", int64_t{0}}},
                               .outputs = {{{2, 1}, {std::log(0.25), std::log(0.75)}}}}}}});
  std::vector<OpTestCase> grad_kernel = {
      {{{1, 1}, {1, 1}}},
      {{{7, 33}, {7, 33}}},
      {{{33, 130}, {33, 130}}},
      {{{33, 130}, {33, 130}}, {{"scale", 0.5}}},
      {{{7, 33}, {7, 33}}, {{"axis", int64_t{0}}}},
      {{{3, 130, 5}, {3, 130, 5}}, {{"axis", int64_t{1}}, {"scale", 2.0}}}};
  registry.add({.name = "softmax_grad",
                .doc = "dx = scale * y * (dy - sum(y * dy)) over axis (the backward op of softmax)",
                .inputs = {"y", "dy"},
                .outputs = {"dx"},
                .attrs = {kAxis, kScale},
                .infer = infer_softmax_grad,
                .reference = ref_softmax_grad(false, GradOut::Dx),
                .expand = expand_softmax_grad(cache, false),
                .tests = {.kernel = grad_kernel,
                          .examples = {{.inputs = {{{2}, {0.25, 0.75}}, {{2}, {1, 0}}},
                                        .outputs = {{{2}, {0.1875, -0.1875}}}}}}});
  registry.add(
      {.name = "log_softmax_grad",
       .doc = "dx = scale * (dy - exp(y) * sum(dy)) over axis (the backward op of log_softmax)",
       .inputs = {"y", "dy"},
       .outputs = {"dx"},
       .attrs = {kAxis, kScale},
       .infer = infer_softmax_grad,
       .reference = ref_softmax_grad(true, GradOut::Dx),
       .expand = expand_softmax_grad(cache, true),
       .tests = {.kernel = grad_kernel,
                 .examples = {{.inputs = {{{2}, {std::log(0.25), std::log(0.75)}}, {{2}, {1, 0}}},
                               .outputs = {{{2}, {0.75, -0.75}}}}}}});
  registry.add(
      {.name = "softmax_sink_grad",
       .doc = "dsink = -(1 - sum(p)) * sum(q) over axis, p = y, q = y * dy (log: p = exp(y), "
              "q = dy); dsink is y without axis (the backward op of a softmax sink)",
       .inputs = {"y", "dy"},
       .outputs = {"dsink"},
       .attrs = {kAxis,
                 {.name = "log",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "y is a log_softmax"}},
       .infer = infer_softmax_sink_grad,
       .reference = ref_softmax_grad(false, GradOut::Sink),
       .expand = expand_softmax_sink_grad(cache),
       .tests = {.kernel = {{{{7, 130}, {7, 130}}},
                            // a block per row (the extents >= 128 above too)
                            {{{4, 1300}, {4, 1300}}},
                            {{{5, 200}, {5, 200}}, {{"log", true}}},
                            {{{33, 7}, {33, 7}}, {{"log", true}}},
                            {{{3, 130, 5}, {3, 130, 5}}, {{"axis", int64_t{1}}}}},
                 // y = [0.25, 0.25] leaves the sink 0.5: dsink = -0.5 * (0.25 * 1 + 0.25 * 3).
                 .examples = {{.inputs = {{{2}, {0.25, 0.25}}, {{2}, {1, 3}}},
                               .outputs = {{{}, {-0.5}}}}}}});
}

}  // namespace tilerun::kernels
