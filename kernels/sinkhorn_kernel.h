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

}  // namespace tilerun::kernels
