// sinkhorn(x; iters, eps): the mHC residual mixing matrix (V4_LAYER.md step 1). Each trailing
// n×n matrix of logits becomes nearly doubly stochastic:
//   q = softmax(x, rows) + eps
//   q = q / (column sums + eps)                      (normalisation step 0)
//   iters - 1 times: q = q / (row sums + eps), then q = q / (column sums + eps)
// so 2·iters - 1 normalisation steps in all. Sums run in index order; the kernels divide once
// per sum and multiply by the reciprocal (sinkhorn_kernel.cc), the reference divides.
// Kernels: one thread per matrix, the n² entries in n² per-thread fragments (n <= 8), the whole
// iteration fused. The backward op sinkhorn_grad recomputes instead of storing: for each
// normalisation step from the last down, it runs the forward up to that step again (the step's
// output q and reciprocal divisors d = 1 / (sums + eps)) and applies the step's adjoint
//   g = (g - Σ_axis g·q)·d     (Σ over the axis the step normalised)
// then the softmax's: dx = p·(g - Σ_row g·p), p = softmax(x). About (2·iters)²/2 steps of n²
// work per matrix — a few tens of thousands of flops, nothing beside the layer's GEMMs — and no
// scratch memory, no atomics: every output has one owner and one order.
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/sinkhorn_kernel.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 64;
constexpr int64_t kMaxN = 8;

// ---- Inference -----------------------------------------------------------------------------

int64_t side_of(const TensorType& x, const std::string& slot) {
  if (x.shape.size() < 2)
    throw ShapeError("input '" + slot + "' is " + to_string(x) + ", expected [..., n, n]");
  const int64_t n = x.shape.back();
  if (x.shape[x.shape.size() - 2] != n)
    throw ShapeError("input '" + slot + "' is " + to_string(x) +
                     ", expected square trailing matrices [..., n, n]");
  if (n > kMaxN)
    throw ShapeError("input '" + slot + "' is " + to_string(x) +
                     ", expected n <= " + std::to_string(kMaxN) + " (one thread holds a matrix)");
  return n;
}

void check_attrs(const Attrs& attrs) {
  if (attr_int(attrs, "iters") < 1)
    throw ShapeError("attribute 'iters' is " + std::to_string(attr_int(attrs, "iters")) +
                     ", expected >= 1");
  if (!(attr_float(attrs, "eps") >= 0))
    throw ShapeError("attribute 'eps' is " + std::to_string(attr_float(attrs, "eps")) +
                     ", expected >= 0");
}

std::vector<TensorType> infer_sinkhorn(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  side_of(in[0], "x");
  check_attrs(attrs);
  return {in[0]};
}

std::vector<TensorType> infer_sinkhorn_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  infer_sinkhorn({in[0]}, attrs);
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

// ---- Reference (double) ----------------------------------------------------------------------

using Mat = std::vector<double>;  // n×n, row-major

Mat softmax_rows(const double* x, int64_t n) {
  Mat p(n * n);
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[i * n + j]);
    for (int64_t j = 0; j < n; ++j) s += p[i * n + j] = std::exp(x[i * n + j] - m);
    for (int64_t j = 0; j < n; ++j) p[i * n + j] /= s;
  }
  return p;
}

// Normalisation step k (even: columns, odd: rows) of q in place; d receives sums + eps.
void normalize(Mat& q, int64_t n, int64_t k, double eps, std::vector<double>& d) {
  const bool cols = k % 2 == 0;
  d.assign(n, 0);
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = 0; b < n; ++b) d[a] += cols ? q[b * n + a] : q[a * n + b];
    d[a] += eps;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) q[i * n + j] /= d[cols ? j : i];
}

// The forward up to and including normalisation step `last` (-1: softmax + eps only).
Mat forward_to(const double* x, int64_t n, int64_t last, double eps, std::vector<double>& d) {
  Mat q = softmax_rows(x, n);
  for (double& v : q) v += eps;
  for (int64_t k = 0; k <= last; ++k) normalize(q, n, k, eps, d);
  return q;
}

int64_t steps_of(const Attrs& attrs) { return 2 * attr_int(attrs, "iters") - 1; }

std::vector<RefTensor> ref_sinkhorn(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const int64_t n = in[0].shape.back();
  const double eps = attr_float(attrs, "eps");
  RefTensor y = in[0];
  std::vector<double> d;
  for (int64_t m = 0; m < in[0].numel() / (n * n); ++m) {
    Mat q = forward_to(&in[0].data[m * n * n], n, steps_of(attrs) - 1, eps, d);
    std::copy(q.begin(), q.end(), y.data.begin() + m * n * n);
  }
  return {y};
}

std::vector<RefTensor> ref_sinkhorn_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const int64_t n = in[0].shape.back();
  const double eps = attr_float(attrs, "eps");
  RefTensor dx = in[0];
  std::vector<double> d;
  for (int64_t m = 0; m < in[0].numel() / (n * n); ++m) {
    const double* x = &in[0].data[m * n * n];
    Mat g(in[1].data.begin() + m * n * n, in[1].data.begin() + (m + 1) * n * n);
    for (int64_t k = steps_of(attrs) - 1; k >= 0; --k) {
      Mat q = forward_to(x, n, k, eps, d);
      const bool cols = k % 2 == 0;
      std::vector<double> dot(n, 0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) dot[cols ? j : i] += g[i * n + j] * q[i * n + j];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t a = cols ? j : i;
          g[i * n + j] = (g[i * n + j] - dot[a]) / d[a];
        }
    }
    Mat p = softmax_rows(x, n);
    for (int64_t i = 0; i < n; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += g[i * n + j] * p[i * n + j];
      for (int64_t j = 0; j < n; ++j)
        dx.data[m * n * n + i * n + j] = p[i * n + j] * (g[i * n + j] - dot);
    }
  }
  return {dx};
}

std::vector<GradOp> grad_sinkhorn(const std::vector<TensorType>&, const Attrs& attrs,
                                  const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"sinkhorn_grad",
           {"x0", "dy0"},
           {"dx0"},
           {{"iters", attr_int(attrs, "iters")}, {"eps", attr_float(attrs, "eps")}}}};
}

// ---- Kernels -------------------------------------------------------------------------------

// Parameters x, y [M, n·n]; STEPS (2·iters - 1); eps.
cc::Kernel build_sinkhorn(DType dtype, int64_t n, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim mats = kb.dim("M"), steps = kb.dim("STEPS");
  cc::Val eps = kb.scalar_f32("eps");
  cc::Buf x = kb.input("x", dtype, {mats, cc::Val(n * n)});
  cc::Buf y = kb.output("y", dtype, {mats, cc::Val(n * n)});
  kb.body({cc::ceildiv(mats, kThreads)}, kThreads, [&](cc::Scope& s) {
    SinkhornFrags q(s, "q", n, kThreads);
    std::vector<cc::Buf> d = sinkhorn_vector(s, "d", n, kThreads);
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx m = s.block_idx(0) * kThreads + t;
      s.if_then(m < mats, [&] {
        sinkhorn_forward(
            s, q, d, [&](int64_t i, int64_t j) { return cc::Val(x(m, i * n + j)); }, t, eps, steps);
        for (int64_t e = 0; e < n * n; ++e) y(m, e) = q.v[e](t);
      });
    });
  });
  return kb.build();
}

// Parameters x, dy, dx [M, n·n]; STEPS; eps.
cc::Kernel build_sinkhorn_grad(DType dtype, int64_t n, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim mats = kb.dim("M"), steps = kb.dim("STEPS");
  cc::Val eps = kb.scalar_f32("eps");
  cc::Buf x = kb.input("x", dtype, {mats, cc::Val(n * n)});
  cc::Buf dy = kb.input("dy", dtype, {mats, cc::Val(n * n)});
  cc::Buf dx = kb.output("dx", dtype, {mats, cc::Val(n * n)});
  kb.body({cc::ceildiv(mats, kThreads)}, kThreads, [&](cc::Scope& s) {
    SinkhornFrags q(s, "q", n, kThreads), g(s, "g", n, kThreads);
    std::vector<cc::Buf> d = sinkhorn_vector(s, "d", n, kThreads);
    std::vector<cc::Buf> dot = sinkhorn_vector(s, "dot", n, kThreads);
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx m = s.block_idx(0) * kThreads + t;
      s.if_then(m < mats, [&] {
        for (int64_t e = 0; e < n * n; ++e) g.v[e](t) = dy(m, e);
        sinkhorn_backward(
            s, q, g, d, dot, [&](int64_t i, int64_t j) { return cc::Val(x(m, i * n + j)); }, t, eps,
            steps);
        for (int64_t e = 0; e < n * n; ++e) dx(m, e) = g.v[e](t);
      });
    });
  });
  return kb.build();
}

ExpandFn expand(std::shared_ptr<KernelCache> cache, bool grad) {
  return [cache, grad](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                       const Attrs& attrs) {
    const int64_t n = in[0].shape.back();
    const DType dtype = in[0].dtype;
    const std::string name = std::string(grad ? "sinkhorn_grad_n" : "sinkhorn_n") +
                             std::to_string(n) + "_" + std::string(dtype_name(dtype));
    KernelCall call{.kernel = cache->get(name,
                                         [&] {
                                           return grad ? build_sinkhorn_grad(dtype, n, name)
                                                       : build_sinkhorn(dtype, n, name);
                                         }),
                    .dims = {numel(in[0]) / (n * n), steps_of(attrs)},
                    .scalars = {attr_float(attrs, "eps")}};
    call.buffers = grad ? std::vector<KernelArg>{input_slot(0), input_slot(1), output_slot(0)}
                        : std::vector<KernelArg>{input_slot(0), output_slot(0)};
    return OpExpansion{.calls = {call}};
  };
}

std::vector<AttrSpec> sinkhorn_attrs() {
  return {{.name = "iters",
           .kind = AttrKind::Int,
           .default_value = AttrValue{int64_t{20}},
           .doc = "rounds: one column normalisation, then iters - 1 row-and-column rounds"},
          {.name = "eps",
           .kind = AttrKind::Float,
           .default_value = AttrValue{1e-6},
           .doc = "added to the softmax and to every sum"}};
}

Attrs it(int64_t iters, double eps = 1e-6) { return {{"iters", iters}, {"eps", eps}}; }

}  // namespace

void register_sinkhorn(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "sinkhorn",
       .doc = "y = each trailing n×n matrix of x made nearly doubly stochastic: softmax over "
              "rows + eps, then column and row normalisations (sum + eps), 2·iters - 1 in all "
              "(mHC's residual mixing); n <= 8; gradient sinkhorn_grad",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = sinkhorn_attrs(),
       .infer = infer_sinkhorn,
       .reference = ref_sinkhorn,
       .gradient = grad_sinkhorn,
       .expand = expand(cache, false),
       .tests = {.kernel = {{.shapes = {{33, 4, 4}}, .attrs = it(20)},
                            {.shapes = {{2, 5, 3, 3}}, .attrs = it(5, 1e-3)},
                            {.shapes = {{1, 2, 2}}, .attrs = it(1)},
                            {.shapes = {{130, 8, 8}}, .attrs = it(7), .lo = -6, .hi = 6}},
                 .gradient = {{.shapes = {{3, 4, 4}}, .attrs = it(20)},
                              {.shapes = {{2, 3, 3}}, .attrs = it(2, 1e-2)}},
                 // Equal logits: every entry 1/n exactly (eps 0). A 2×2 by hand: softmax rows
                 // (1/4, 3/4), (1/2, 1/2), then columns over 3/4 and 5/4.
                 .examples = {{.inputs = {{{1, 4, 4}, std::vector<double>(16, 0.7)}},
                               .attrs = it(20, 0),
                               .outputs = {{{1, 4, 4}, std::vector<double>(16, 0.25)}}},
                              {.inputs = {{{1, 2, 2}, {0, std::log(3.0), 0, 0}}},
                               .attrs = it(1, 0),
                               .outputs = {{{1, 2, 2}, {1.0 / 3, 0.6, 2.0 / 3, 0.4}}}}}}});
  registry.add(
      {.name = "sinkhorn_grad",
       .doc = "dx of sinkhorn from (x, dy), by recomputing the forward to each "
              "normalisation step (the backward op of sinkhorn)",
       .inputs = {"x", "dy"},
       .outputs = {"dx"},
       .attrs = sinkhorn_attrs(),
       .infer = infer_sinkhorn_grad,
       .reference = ref_sinkhorn_grad,
       .expand = expand(cache, true),
       .tests = {.kernel = {{.shapes = {{33, 4, 4}, {33, 4, 4}}, .attrs = it(20)},
                            {.shapes = {{3, 3, 3}, {3, 3, 3}}, .attrs = it(3, 1e-3)}},
                 // Equal logits, eps 0, one round: q = 1/2 everywhere; dy = e00 goes
                 // through the column step to (1/2, 0; -1/2, 0), then the softmax.
                 .examples = {{.inputs = {{{1, 2, 2}, {0, 0, 0, 0}}, {{1, 2, 2}, {1, 0, 0, 0}}},
                               .attrs = it(1, 0),
                               .outputs = {{{1, 2, 2}, {0.125, -0.125, -0.125, 0.125}}}}}}});
}

}  // namespace tilerun::kernels
