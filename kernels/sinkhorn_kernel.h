// Sinkhorn inside a tile program, one thread per n×n matrix (n <= 8), shared by the sinkhorn
// family and the fused mHC ops (hc.cc), so that both run the very same arithmetic:
//   q = softmax(logits, rows) + eps, then normalisation steps k = 0 .. steps - 1
//   (even k: columns, odd k: rows), q = q·(1 / (sums + eps)), sums in index order.
// The backward recomputes the forward to each step instead of storing it (see sinkhorn.cc), or,
// given a tape in scratch memory, stores each step once and reads it back: the same values in
// the same order, so the same bits, with steps instead of steps²/2 normalisations of serial work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

// One thread's n×n matrix: n² per-thread fragments of [threads], entry (i, j) in v[i·n + j].
struct SinkhornFrags {
  int64_t n;
  std::vector<compiler::Buf> v;
  SinkhornFrags(compiler::Scope& s, const std::string& name, int64_t side, int threads);
  compiler::Buf& at(int64_t i, int64_t j) { return v[i * n + j]; }
};

// The logit (i, j) of the thread's matrix, as a value the caller reads (global or fragment).
using SinkhornLogit = std::function<compiler::Val(int64_t i, int64_t j)>;

// Per-thread scratch of the recurrences: n fragments of [threads].
std::vector<compiler::Buf> sinkhorn_vector(compiler::Scope& s, const std::string& name, int64_t n,
                                           int threads);

// q = softmax(logit, rows), plus eps when `plus_eps`.
void sinkhorn_softmax(compiler::Scope& s, SinkhornFrags& q, const SinkhornLogit& logit,
                      const compiler::Idx& t, const compiler::Val& eps, bool plus_eps);

// The forward: q = softmax + eps, then `steps` normalisations (d: the last step's reciprocal
// divisors).
void sinkhorn_forward(compiler::Scope& s, SinkhornFrags& q, std::vector<compiler::Buf>& d,
                      const SinkhornLogit& logit, const compiler::Idx& t, const compiler::Val& eps,
                      const compiler::Val& steps);

// The backward: g holds dL/dq of the forward's result on entry and dL/dlogit on return; q, d
// and dot are scratch.
void sinkhorn_backward(compiler::Scope& s, SinkhornFrags& q, SinkhornFrags& g,
                       std::vector<compiler::Buf>& d, std::vector<compiler::Buf>& dot,
                       const SinkhornLogit& logit, const compiler::Idx& t, const compiler::Val& eps,
                       const compiler::Val& steps);

// Where the taped backward keeps the forward's states: q(k, e) is entry e (= i·n + j) of q after
// step k, d(k, a) that step's reciprocal divisor a; each a location owned by the calling thread
// only.
struct SinkhornTape {
  std::function<compiler::Ref(const compiler::Val&k, int64_t e)> q, d;
};

// sinkhorn_backward with the forward run once, its states on the tape: the same results, bit
// for bit, in O(steps) instead of O(steps²).
void sinkhorn_backward_taped(compiler::Scope& s, SinkhornFrags& q, SinkhornFrags& g,
                             std::vector<compiler::Buf>& d, std::vector<compiler::Buf>& dot,
                             const SinkhornLogit& logit, const compiler::Idx& t,
                             const compiler::Val& eps, const compiler::Val& steps,
                             const SinkhornTape& tape);

// Sinkhorn with one thread per entry, for n in {1, 2, 4} (a power of two, so that a token's
// lanes are a group of n² in one warp and the lane arithmetic is shifts the index analysis
// proves at once; n = 3 took Z3 past its backstop): entry (i, j) on lane i·n + j of its group.
// An axis's sums gather the other entries by shuffles and add them in index order, so every
// value is the one-thread helpers' above, bit for bit. Why: with a thread per matrix the
// 2·iters - 1 normalisations were one serial chain of ~5000 instructions a token, and 1024
// tokens gave one warp an SM (hc_pre's Sinkhorn 13.5 us, its backward 26 us on the H200, under
// 2% of the SM's issue rate).
class SinkhornLanes {
 public:
  static bool fits(int64_t n) { return n == 1 || n == 2 || n == 4; }
  static int64_t group(int64_t n) { return n * n; }  // lanes a token

  // `threads` a multiple of group(n); fragments [threads].
  SinkhornLanes(compiler::Scope& s, const std::string& name, int64_t n, int threads);

  // This lane's entry: its row i and column j.
  compiler::Val row(const compiler::Idx& t) const;
  compiler::Val col(const compiler::Idx& t) const;

  // Shuffles v's entries along the lane's column (cols) or row into scratch; outside parallel
  // and if, like every shuffle. Then, inside a parallel over t, along(t, v, cols)[r] is the
  // entry r of that column or row (r = 0 .. n - 1).
  void gather(const compiler::Buf& v, bool cols);
  std::vector<compiler::Val> along(const compiler::Idx& t, const compiler::Buf& v, bool cols);

  // The sum along the axis, in index order (gather first).
  compiler::Val sum_along(const compiler::Idx& t, const compiler::Buf& v, bool cols,
                          const std::string& hint);

  // q = softmax(logit, rows) (+ eps when plus_eps), logit a fragment holding each lane's logit.
  void softmax(const compiler::Buf& q, const compiler::Buf& logit, const compiler::Val& eps,
               bool plus_eps);
  // One normalisation step along columns (cols) or rows: d = 1 / (sums + eps), q = q·d, d being
  // the lane's column's (row's) reciprocal divisor.
  void normalize(const compiler::Buf& q, const compiler::Buf& d, const compiler::Val& eps,
                 bool cols);
  // The adjoint of such a step, q and d its output and divisor: g = (g - Σ_axis g·q)·d.
  void adjoint(const compiler::Buf& g, const compiler::Buf& q, const compiler::Buf& d, bool cols);
  // The softmax's adjoint (q = softmax(logit) without eps, recomputed into q): g = q·(g - Σ_row
  // g·q).
  void softmax_adjoint(const compiler::Buf& g, const compiler::Buf& q, const compiler::Buf& logit,
                       const compiler::Val& eps);

 private:
  compiler::Scope& s_;
  int64_t n_;
  int threads_;
  std::vector<compiler::Buf> x_;  // x_[a - 1][t] = v[t ^ (a·n)] or v[t ^ a], a = 1 .. n - 1
  compiler::Buf tmp_;             // scratch for products
};

}  // namespace tilerun::kernels
