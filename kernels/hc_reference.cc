#include "kernels/hc_reference.h"

#include <cmath>

#include "kernels/ref_util.h"

namespace tilerun::kernels {

namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Per token: r and the scaled logits a, from x [T, n·D] and mix [T, M].
struct Logits {
  std::vector<double> r, a;  // [T], [T, M]
};

Logits logits_of(const RefTensor& x, const RefTensor& mix, const RefTensor& scale,
                 const RefTensor& base, double norm_eps) {
  const int64_t t_count = x.shape[0], n = x.shape[1], k = n * x.shape[2], m = mixes_of(n);
  Logits l{std::vector<double>(t_count), std::vector<double>(t_count * m)};
  for (int64_t t = 0; t < t_count; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < k; ++i) ss += x.data[t * k + i] * x.data[t * k + i];
    l.r[t] = 1.0 / std::sqrt(ss / static_cast<double>(k) + norm_eps);
    for (int64_t j = 0; j < m; ++j)
      l.a[t * m + j] = mix.data[t * m + j] * l.r[t] * scale.data[group_of(j, n)] + base.data[j];
  }
  return l;
}

RefTensor mix_of(const RefTensor& x, const RefTensor& fn) {
  const int64_t t_count = x.shape[0], k = fn.shape[0], m = fn.shape[1];
  RefTensor mix = ref_zeros({t_count, m});
  for (int64_t t = 0; t < t_count; ++t)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < m; ++j) mix.data[t * m + j] += x.data[t * k + i] * fn.data[i * m + j];
  return mix;
}

// The comb logits of every token as [T, n, n].
RefTensor comb_logits(const Logits& l, int64_t t_count, int64_t n) {
  RefTensor c = ref_zeros({t_count, n, n});
  for (int64_t t = 0; t < t_count; ++t)
    for (int64_t e = 0; e < n * n; ++e) c.data[t * n * n + e] = l.a[t * mixes_of(n) + 2 * n + e];
  return c;
}

Attrs sinkhorn_attrs_of(const Attrs& attrs) {
  return {{"iters", attr_int(attrs, "iters")}, {"eps", attr_float(attrs, "eps")}};
}

}  // namespace

std::vector<RefTensor> ref_hc_pre(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &fn = in[1];
  const int64_t t_count = x.shape[0], n = x.shape[1], d = x.shape[2], m = mixes_of(n);
  const double eps = attr_float(attrs, "eps");
  const Logits l = logits_of(x, mix_of(x, fn), in[2], in[3], attr_float(attrs, "norm_eps"));
  RefTensor y = ref_zeros({t_count, d}), post = ref_zeros({t_count, n});
  for (int64_t t = 0; t < t_count; ++t)
    for (int64_t i = 0; i < n; ++i) {
      const double pre = sigmoid(l.a[t * m + i]) + eps;
      post.data[t * n + i] = 2 * sigmoid(l.a[t * m + n + i]);
      for (int64_t c = 0; c < d; ++c) y.data[t * d + c] += pre * x.data[(t * n + i) * d + c];
    }
  RefTensor comb = op_registry()
                       .find("sinkhorn")
                       ->reference({comb_logits(l, t_count, n)}, sinkhorn_attrs_of(attrs))[0];
  if (attrs.count("mix") && attr_bool(attrs, "mix")) return {y, post, comb, mix_of(x, fn)};
  return {y, post, comb};
}

// With s = σ(a): da = dpre·s(1 - s) | dpost·2s(1 - s) | sinkhorn's; dscale[g] = Σ_{j∈g} da·mix·r;
// dmix = da·scale·r; through r = (ss/K + eps)^-1/2 and the GEMM: dx = pre·dy + c·x + dmix·fnᵀ,
// c = -r³/K·Σ da·scale·mix.
std::vector<RefTensor> ref_hc_pre_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &fn = in[1], &scale = in[2], &dy = in[4], &dpost = in[5];
  const RefTensor mix = mix_of(x, fn);
  const int64_t t_count = x.shape[0], n = x.shape[1], d = x.shape[2], m = mixes_of(n);
  const double eps = attr_float(attrs, "eps"), k = static_cast<double>(n * d);
  const Logits l = logits_of(x, mix, scale, in[3], attr_float(attrs, "norm_eps"));
  const RefTensor dlogit =
      op_registry()
          .find("sinkhorn_grad")
          ->reference({comb_logits(l, t_count, n), in[6]}, sinkhorn_attrs_of(attrs))[0];
  RefTensor dx = ref_zeros(x.shape), dmix = ref_zeros({t_count, m}), da = ref_zeros({t_count, m});
  RefTensor dscale = ref_zeros({t_count, 3});
  for (int64_t t = 0; t < t_count; ++t) {
    const double* a = &l.a[t * m];
    for (int64_t i = 0; i < n; ++i) {
      double dpre = 0;
      for (int64_t c = 0; c < d; ++c) dpre += dy.data[t * d + c] * x.data[(t * n + i) * d + c];
      const double sp = sigmoid(a[i]), sq = sigmoid(a[n + i]);
      da.data[t * m + i] = dpre * sp * (1 - sp);
      da.data[t * m + n + i] = dpost.data[t * n + i] * 2 * sq * (1 - sq);
    }
    for (int64_t e = 0; e < n * n; ++e) da.data[t * m + 2 * n + e] = dlogit.data[t * n * n + e];
    double dr = 0;
    for (int64_t j = 0; j < m; ++j) {
      const double g = da.data[t * m + j], sc = scale.data[group_of(j, n)];
      dscale.data[t * 3 + group_of(j, n)] += g * mix.data[t * m + j] * l.r[t];
      dmix.data[t * m + j] = g * sc * l.r[t];
      dr += g * sc * mix.data[t * m + j];
    }
    const double c = -dr * l.r[t] * l.r[t] * l.r[t] / k;
    for (int64_t i = 0; i < n; ++i) {
      const double pre = sigmoid(a[i]) + eps;
      for (int64_t e = 0; e < d; ++e) {
        const int64_t at = (t * n + i) * d + e;
        double through_fn = 0;  // Σ_j dmix_j·fn[i·D + e, j]
        for (int64_t j = 0; j < m; ++j)
          through_fn += dmix.data[t * m + j] * fn.data[(i * d + e) * m + j];
        dx.data[at] = pre * dy.data[t * d + e] + c * x.data[at] + through_fn +
                      (in.size() > 8 ? in[8].data[at] : 0.0);
      }
    }
  }
  // da and dscale side by side, [T, M + 3] (hc_pre_grad's dab).
  RefTensor dab = ref_zeros({t_count, m + 3});
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t j = 0; j < m; ++j) dab.data[t * (m + 3) + j] = da.data[t * m + j];
    for (int64_t g = 0; g < 3; ++g) dab.data[t * (m + 3) + m + g] = dscale.data[t * 3 + g];
  }
  return {dx, dmix, dab};
}

std::vector<RefTensor> ref_hc_post(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &f = in[0], &x = in[1], &post = in[2], &comb = in[3];
  const int64_t t_count = x.shape[0], n = x.shape[1], d = x.shape[2];
  RefTensor out = ref_zeros(x.shape);
  for (int64_t t = 0; t < t_count; ++t)
    for (int64_t q = 0; q < n; ++q)
      for (int64_t c = 0; c < d; ++c) {
        double v = post.data[t * n + q] * f.data[t * d + c];
        for (int64_t p = 0; p < n; ++p)
          v += comb.data[(t * n + p) * n + q] * x.data[(t * n + p) * d + c];
        out.data[(t * n + q) * d + c] = v;
      }
  return {out};
}

std::vector<RefTensor> ref_hc_post_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &f = in[0], &x = in[1], &post = in[2], &comb = in[3], &dout = in[4];
  const int64_t t_count = x.shape[0], n = x.shape[1], d = x.shape[2];
  RefTensor df = ref_zeros(f.shape), dx = ref_zeros(x.shape), dpost = ref_zeros(post.shape);
  RefTensor dcomb = ref_zeros(comb.shape);
  for (int64_t t = 0; t < t_count; ++t)
    for (int64_t q = 0; q < n; ++q)
      for (int64_t c = 0; c < d; ++c) {
        const double g = dout.data[(t * n + q) * d + c];
        df.data[t * d + c] += post.data[t * n + q] * g;
        dpost.data[t * n + q] += g * f.data[t * d + c];
        for (int64_t p = 0; p < n; ++p) {
          dx.data[(t * n + p) * d + c] += comb.data[(t * n + p) * n + q] * g;
          dcomb.data[(t * n + p) * n + q] += x.data[(t * n + p) * d + c] * g;
        }
      }
  return {df, dx, dpost, dcomb};
}

// ---- The shared suites' cases ---------------------------------------------------------------

namespace {

Attrs it(int64_t iters, double eps = 1e-6) {
  return {{"iters", iters}, {"eps", eps}, {"norm_eps", 1e-6}};
}

// Test cases: shapes {x [T, n, D], fn [n·D, M], scale [3], base [M]} and the others alike.
Attrs with_mix(Attrs attrs) {
  attrs["mix"] = true;
  return attrs;
}
std::vector<std::vector<int64_t>> pre_shapes(int64_t t, int64_t n, int64_t d) {
  return {{t, n, d}, {n * d, mixes_of(n)}, {3}, {mixes_of(n)}};
}
std::vector<std::vector<int64_t>> pre_grad_shapes(int64_t t, int64_t n, int64_t d) {
  return {{t, n, d}, {n * d, mixes_of(n)}, {3}, {mixes_of(n)}, {t, d}, {t, n},
          {t, n, n}, {t, mixes_of(n)}};
}
// hc_pre_grad's mix input: the forward's x·fn (in f32, as the forward's GEMM gives it).
void derive_mix(std::vector<RefTensor>& in) {
  in[7] = mix_of(in[0], in[1]);
  for (double& v : in[7].data) v = static_cast<float>(v);
}
std::vector<std::vector<int64_t>> with_addend(std::vector<std::vector<int64_t>> s) {
  s.push_back(s[0]);
  return s;
}
std::vector<std::vector<int64_t>> post_shapes(int64_t t, int64_t n, int64_t d, bool grad) {
  std::vector<std::vector<int64_t>> s = {{t, d}, {t, n, d}, {t, n}, {t, n, n}};
  if (grad) s.push_back({t, n, d});
  return s;
}

}  // namespace

OpTests hc_pre_tests() {
  // Scale 0: the mixes are the bias alone whatever fn is. pre = σ(0, ln 3) = (1/2, 3/4), so
  // y = 3/2 + 3; post = 2σ(0) = 1; comb as sinkhorn's 2×2 worked example.
  const double l3 = std::log(3.0);
  return {
      .kernel = {{.shapes = pre_shapes(33, 4, 8), .attrs = it(20), .lo = -1, .hi = 1},
                 {.shapes = pre_shapes(5, 2, 3), .attrs = it(3, 1e-3)},
                 {.shapes = pre_shapes(1, 1, 1), .attrs = it(1)},
                 {.shapes = pre_shapes(70, 4, 130), .attrs = it(20), .lo = -1, .hi = 1},
                 {.shapes = pre_shapes(16, 4, 64), .attrs = it(20), .lo = -1, .hi = 1},
                 {.shapes = pre_shapes(19, 3, 5), .attrs = it(5), .lo = -1, .hi = 1},
                 // with the projection x·fn as a fourth output
                 {.shapes = pre_shapes(70, 4, 130), .attrs = with_mix(it(20)), .lo = -1, .hi = 1}},
      .gradient = {{.shapes = pre_shapes(2, 2, 3), .attrs = it(3, 1e-2), .lo = -1, .hi = 1},
                   {.shapes = pre_shapes(2, 4, 2), .attrs = it(20), .lo = -1, .hi = 1}},
      .examples = {
          {.inputs = {{{1, 2, 1}, {3, 4}},
                      {{2, 8}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
                      {{3}, {0, 0, 0}},
                      {{8}, {0, l3, 0, 0, 0, l3, 0, 0}}},
           .attrs = it(1, 0),
           .outputs = {
               {{1, 1}, {4.5}}, {{1, 2}, {1, 1}}, {{1, 2, 2}, {1.0 / 3, 0.6, 2.0 / 3, 0.4}}}}}};
}

OpTests hc_pre_grad_tests() {
  // n = D = 1, x = 2, fn = 0 (so mix = 0): pre = 1/2, dpre = dy·x = 2, da = 2·σ' = 1/2, dmix =
  // da·r; the 1×1 Sinkhorn is constant (zero gradient); dr = Σ dz·mix = 0 and dmix·fnᵀ = 0, so dx =
  // pre·dy.
  const double r = 1 / std::sqrt(4 + 1e-6);
  return {
      .kernel = {{.shapes = pre_grad_shapes(33, 4, 8),
                  .attrs = it(20),
                  .lo = -1,
                  .hi = 1,
                  .derive = derive_mix},
                 {.shapes = pre_grad_shapes(5, 2, 3), .attrs = it(3, 1e-3), .derive = derive_mix},
                 {.shapes = pre_grad_shapes(70, 4, 130),
                  .attrs = it(20),
                  .lo = -1,
                  .hi = 1,
                  .derive = derive_mix},
                 {.shapes = pre_grad_shapes(19, 3, 5),
                  .attrs = it(5),
                  .lo = -1,
                  .hi = 1,
                  .derive = derive_mix},
                 {.shapes = pre_grad_shapes(3, 1, 2),
                  .attrs = it(2),
                  .lo = -1,
                  .hi = 1,
                  .derive = derive_mix},
                 // with dx's addend (the streams' other gradient)
                 {.shapes = with_addend(pre_grad_shapes(19, 3, 5)),
                  .attrs = it(5),
                  .lo = -1,
                  .hi = 1,
                  .derive = derive_mix}},
      .examples = {
          {.inputs = {{{1, 1, 1}, {2}},
                      {{1, 3}, {0, 0, 0}},
                      {{3}, {1, 1, 1}},
                      {{3}, {0, 0, 0}},
                      {{1, 1}, {1}},
                      {{1, 1}, {0}},
                      {{1, 1, 1}, {0}},
                      {{1, 3}, {0, 0, 0}}},
           .attrs = it(1, 0),
           .outputs = {
               {{1, 1, 1}, {0.5}}, {{1, 3}, {0.5 * r, 0, 0}}, {{1, 6}, {0.5, 0, 0, 0, 0, 0}}}}}};
}

// f = 5, x = (1, 2), post = (1, 2), comb = (1 2; 3 4): out_q = post_q·5 + Σ_p comb[p, q]·x_p.
static const std::vector<RefTensor> kPostInputs = {
    {{1, 1}, {5}}, {{1, 2, 1}, {1, 2}}, {{1, 2}, {1, 2}}, {{1, 2, 2}, {1, 2, 3, 4}}};

OpTests hc_post_tests() {
  return {.kernel = {{.shapes = post_shapes(33, 4, 8, false)},
                     {.shapes = post_shapes(3, 3, 130, false)},
                     {.shapes = post_shapes(1, 1, 1, false)},
                     // column tiles: two whole, the third guarded (D = 1032)
                     {.shapes = post_shapes(2, 4, 1032, false)}},
          .gradient = {{.shapes = post_shapes(2, 2, 3, false)},
                       {.shapes = post_shapes(2, 4, 2, false)}},
          .examples = {{.inputs = kPostInputs, .outputs = {{{1, 2, 1}, {12, 20}}}}}};
}

OpTests hc_post_grad_tests() {
  // dout = (1, 0): df = post_0, dx_p = comb[p, 0], dpost = (f, 0), dcomb[p, q] = x_p·dout_q.
  std::vector<RefTensor> in = kPostInputs;
  in.push_back({{1, 2, 1}, {1, 0}});
  return {
      .kernel = {{.shapes = post_shapes(33, 4, 8, true)},
                 {.shapes = post_shapes(3, 3, 130, true)},
                 // D a constant of the kernel, each thread's columns loaded before its stores
                 {.shapes = post_shapes(3, 4, 1024, true)},
                 {.shapes = post_shapes(2, 2, 256, true)}},
      .examples = {
          {.inputs = in,
           .outputs = {
               {{1, 1}, {1}}, {{1, 2, 1}, {1, 3}}, {{1, 2}, {5, 0}}, {{1, 2, 2}, {1, 0, 2, 0}}}}}};
}

}  // namespace tilerun::kernels
