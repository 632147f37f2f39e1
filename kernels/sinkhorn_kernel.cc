#include "kernels/sinkhorn_kernel.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace {

// Normalisation of q along columns (or rows); d[a] receives 1 / (the sums + eps). One IEEE
// division per sum and n multiplications, not n divisions: each division is a branch around a
// slow path that the scheduler does not overlap, so n² of them a step were the serial chain.
void normalize_into(cc::Scope& s, SinkhornFrags& q, std::vector<cc::Buf>& d, const cc::Idx& t,
                    const cc::Val& eps, bool cols) {
  const int64_t n = q.n;
  for (int64_t a = 0; a < n; ++a) {
    cc::Val sum;
    for (int64_t b = 0; b < n; ++b) {
      cc::Val v = cols ? q.at(b, a)(t) : q.at(a, b)(t);
      sum = b == 0 ? s.let(v, "sum") : s.let(sum + v, "sum");
    }
    d[a](t) = 1.0f / (sum + eps);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) q.at(i, j)(t) = q.at(i, j)(t) * d[cols ? j : i](t);
}

// Normalisation step k (even: columns, odd: rows).
void step_into(cc::Scope& s, SinkhornFrags& q, std::vector<cc::Buf>& d, const cc::Idx& t,
               const cc::Val& eps, const cc::Idx& k) {
  s.if_then_else(
      k % 2 == 0, [&] { normalize_into(s, q, d, t, eps, true); },
      [&] { normalize_into(s, q, d, t, eps, false); });
}

}  // namespace

SinkhornFrags::SinkhornFrags(cc::Scope& s, const std::string& name, int64_t side, int threads)
    : n(side) {
  for (int64_t e = 0; e < n * n; ++e)
    v.push_back(s.alloc_fragment(name + std::to_string(e), DType::F32, {threads}));
}

std::vector<cc::Buf> sinkhorn_vector(cc::Scope& s, const std::string& name, int64_t n,
                                     int threads) {
  std::vector<cc::Buf> d;
  for (int64_t a = 0; a < n; ++a)
    d.push_back(s.alloc_fragment(name + std::to_string(a), DType::F32, {threads}));
  return d;
}

void sinkhorn_softmax(cc::Scope& s, SinkhornFrags& q, const SinkhornLogit& logit, const cc::Idx& t,
                      const cc::Val& eps, bool plus_eps) {
  const int64_t n = q.n;
  for (int64_t i = 0; i < n; ++i) {
    cc::Val mx = s.let(logit(i, 0), "mx");
    for (int64_t j = 1; j < n; ++j) mx = s.let(cc::max(mx, logit(i, j)), "mx");
    cc::Val sum;
    for (int64_t j = 0; j < n; ++j) {
      q.at(i, j)(t) = cc::exp(logit(i, j) - mx);
      sum = j == 0 ? s.let(q.at(i, j)(t), "sum") : s.let(sum + q.at(i, j)(t), "sum");
    }
    for (int64_t j = 0; j < n; ++j)
      q.at(i, j)(t) = plus_eps ? q.at(i, j)(t) / sum + eps : q.at(i, j)(t) / sum;
  }
}

void sinkhorn_forward(cc::Scope& s, SinkhornFrags& q, std::vector<cc::Buf>& d,
                      const SinkhornLogit& logit, const cc::Idx& t, const cc::Val& eps,
                      const cc::Val& steps) {
  sinkhorn_softmax(s, q, logit, t, eps, true);
  s.serial(steps, [&](cc::Idx k) { step_into(s, q, d, t, eps, k); });
}

namespace {

// Step k's adjoint, q and d holding that step's output and reciprocal divisors:
// g = (g - Σ_axis g·q)·d.
void adjoint_step(cc::Scope& s, SinkhornFrags& q, SinkhornFrags& g, std::vector<cc::Buf>& d,
                  std::vector<cc::Buf>& dot, const cc::Idx& t, const cc::Idx& k) {
  const int64_t n = q.n;
  auto adjoint = [&](bool cols) {
    for (int64_t a = 0; a < n; ++a) {
      cc::Val sum;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t i = cols ? b : a, j = cols ? a : b;
        cc::Val v = g.at(i, j)(t) * q.at(i, j)(t);
        sum = b == 0 ? s.let(v, "dot") : s.let(sum + v, "dot");
      }
      dot[a](t) = sum;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t a = cols ? j : i;
        g.at(i, j)(t) = (g.at(i, j)(t) - dot[a](t)) * d[a](t);
      }
  };
  s.if_then_else(
      k % 2 == 0, [&] { adjoint(true); }, [&] { adjoint(false); });
}

// The softmax's adjoint, p = softmax(logit) without eps: dx = p·(g - Σ_row g·p).
void softmax_adjoint(cc::Scope& s, SinkhornFrags& q, SinkhornFrags& g, const SinkhornLogit& logit,
                     const cc::Idx& t, const cc::Val& eps) {
  const int64_t n = q.n;
  sinkhorn_softmax(s, q, logit, t, eps, false);
  for (int64_t i = 0; i < n; ++i) {
    cc::Val sum;
    for (int64_t j = 0; j < n; ++j) {
      cc::Val v = g.at(i, j)(t) * q.at(i, j)(t);
      sum = j == 0 ? s.let(v, "dot") : s.let(sum + v, "dot");
    }
    for (int64_t j = 0; j < n; ++j) g.at(i, j)(t) = q.at(i, j)(t) * (g.at(i, j)(t) - sum);
  }
}

}  // namespace

void sinkhorn_backward(cc::Scope& s, SinkhornFrags& q, SinkhornFrags& g, std::vector<cc::Buf>& d,
                       std::vector<cc::Buf>& dot, const SinkhornLogit& logit, const cc::Idx& t,
                       const cc::Val& eps, const cc::Val& steps) {
  // Step k = steps - 1 - r: run the forward to it again, then its adjoint.
  s.serial(steps, [&](cc::Idx r) {
    cc::Idx k = s.let(steps - 1 - r, "k");
    sinkhorn_forward(s, q, d, logit, t, eps, k + 1);
    adjoint_step(s, q, g, d, dot, t, k);
  });
  softmax_adjoint(s, q, g, logit, t, eps);
}

void sinkhorn_backward_taped(cc::Scope& s, SinkhornFrags& q, SinkhornFrags& g,
                             std::vector<cc::Buf>& d, std::vector<cc::Buf>& dot,
                             const SinkhornLogit& logit, const cc::Idx& t, const cc::Val& eps,
                             const cc::Val& steps, const SinkhornTape& tape) {
  const int64_t n = q.n;
  // The forward once, each step's output and divisors recorded (sinkhorn_forward's arithmetic).
  sinkhorn_softmax(s, q, logit, t, eps, true);
  s.serial(steps, [&](cc::Idx k) {
    step_into(s, q, d, t, eps, k);
    for (int64_t e = 0; e < n * n; ++e) tape.q(k, e) = q.v[e](t);
    for (int64_t a = 0; a < n; ++a) tape.d(k, a) = d[a](t);
  });
  s.serial(steps, [&](cc::Idx r) {
    cc::Idx k = s.let(steps - 1 - r, "k");
    for (int64_t e = 0; e < n * n; ++e) q.v[e](t) = tape.q(k, e);
    for (int64_t a = 0; a < n; ++a) d[a](t) = tape.d(k, a);
    adjoint_step(s, q, g, d, dot, t, k);
  });
  softmax_adjoint(s, q, g, logit, t, eps);
}

SinkhornLanes::SinkhornLanes(cc::Scope& s, const std::string& name, int64_t n, int threads)
    : s_(s), n_(n), threads_(threads) {
  for (int64_t a = 1; a < n_; ++a)
    x_.push_back(s.alloc_fragment(name + "_x" + std::to_string(a), DType::F32, {threads}));
  tmp_ = s.alloc_fragment(name + "_tmp", DType::F32, {threads});
}

cc::Val SinkhornLanes::row(const cc::Idx& t) const { return t % group(n_) / n_; }
cc::Val SinkhornLanes::col(const cc::Idx& t) const { return t % n_; }

void SinkhornLanes::gather(const cc::Buf& v, bool cols) {
  for (int64_t a = 1; a < n_; ++a)
    s_.shuffle_xor(x_[a - 1], v, static_cast<int>(cols ? a * n_ : a));
}

std::vector<cc::Val> SinkhornLanes::along(const cc::Idx& t, const cc::Buf& v, bool cols) {
  // Entry r sits a = r ^ own lanes (times n along a column) away: a chain of selects on own.
  cc::Val own = s_.let(cols ? row(t) : col(t), "own");
  std::vector<cc::Val> out;
  for (int64_t r = 0; r < n_; ++r) {
    auto at = [&](int64_t a) { return a == 0 ? cc::Val(v(t)) : cc::Val(x_[a - 1](t)); };
    cc::Val val = at(r ^ (n_ - 1));
    for (int64_t o = n_ - 2; o >= 0; --o) val = cc::select(own == cc::Val(o), at(r ^ o), val);
    out.push_back(s_.let(val, "entry"));
  }
  return out;
}

cc::Val SinkhornLanes::sum_along(const cc::Idx& t, const cc::Buf& v, bool cols,
                                 const std::string& hint) {
  std::vector<cc::Val> e = along(t, v, cols);
  cc::Val sum = s_.let(e[0], hint);
  for (int64_t r = 1; r < n_; ++r) sum = s_.let(sum + e[r], hint);
  return sum;
}

void SinkhornLanes::softmax(const cc::Buf& q, const cc::Buf& logit, const cc::Val& eps,
                            bool plus_eps) {
  gather(logit, /*cols=*/false);
  s_.parallel(threads_, [&](cc::Idx t) {
    std::vector<cc::Val> e = along(t, logit, false);
    cc::Val mx = s_.let(e[0], "mx");
    for (int64_t j = 1; j < n_; ++j) mx = s_.let(cc::max(mx, e[j]), "mx");
    q(t) = cc::exp(logit(t) - mx);
  });
  gather(q, false);
  s_.parallel(threads_, [&](cc::Idx t) {
    cc::Val sum = sum_along(t, q, false, "sum");
    q(t) = plus_eps ? q(t) / sum + eps : q(t) / sum;
  });
}

void SinkhornLanes::normalize(const cc::Buf& q, const cc::Buf& d, const cc::Val& eps, bool cols) {
  gather(q, cols);
  s_.parallel(threads_, [&](cc::Idx t) {
    cc::Val sum = sum_along(t, q, cols, "sum");
    d(t) = 1.0f / (sum + eps);
    q(t) = q(t) * d(t);
  });
}

void SinkhornLanes::adjoint(const cc::Buf& g, const cc::Buf& q, const cc::Buf& d, bool cols) {
  s_.parallel(threads_, [&](cc::Idx t) { tmp_(t) = g(t) * q(t); });
  gather(tmp_, cols);
  s_.parallel(threads_, [&](cc::Idx t) {
    cc::Val dot = sum_along(t, tmp_, cols, "dot");
    g(t) = (g(t) - dot) * d(t);
  });
}

void SinkhornLanes::softmax_adjoint(const cc::Buf& g, const cc::Buf& q, const cc::Buf& logit,
                                    const cc::Val& eps) {
  softmax(q, logit, eps, false);
  s_.parallel(threads_, [&](cc::Idx t) { tmp_(t) = g(t) * q(t); });
  gather(tmp_, false);
  s_.parallel(threads_, [&](cc::Idx t) {
    cc::Val dot = sum_along(t, tmp_, false, "dot");
    g(t) = q(t) * (g(t) - dot);
  });
}

}  // namespace tilerun::kernels
