// over 600 lines: the mHC family (hc_pre, hc_post and their backward ops) shares its inference,
// gradient rules and kernel helpers; hc_post has a general kernel and one per constant shape.
// Fused mHC (V4_LAYER.md steps 1 and 8): n residual streams per token, x [T, n, D].
//   hc_pre(x, fn, scale, base) -> y [T, D], post [T, n], comb [T, n, n]:
//     r = rsqrt(mean(x[t]²) + norm_eps) over the n·D flattened streams; mix = x[t]·fn [M = n² + 2n]
//     a = mix·r·scale[g] + base (g = 0 for the first n mixes, 1 for the next n, 2 for the n²)
//     pre = σ(a[:n]) + eps, post = 2σ(a[n:2n]), comb = sinkhorn(a[2n:] as n×n; iters, eps)
//     y = Σₙ preₙ·xₙ
//   hc_post(f, x, post, comb) -> out [T, n, D]: out_q = post_q·f + Σ_p comb[p, q]·x_p
// (DeepSeek-V4's convention: comb's first index is the source stream.)
// Kernels of hc_pre: the mixing GEMM is the matmul family's own (a tiled GEMM reads fn once per
// tile of tokens; a per-token dot in the fused kernel would re-read all of fn, n·D·M floats, for
// every token), then `hc_token_sums`, one block per token: the mean squares by a block-wide
// reduction (coalesced), then `hc_pre_split`, 64 tokens per block, one thread per token (like
// sinkhorn's) for the σ splits and the whole Sinkhorn, pre into scratch; then `hc_pre_combine`,
// one block per token, y in stream order. The backward op hc_pre_grad reads the GEMM's x·fn
// (hc_pre's optional mix output, else the gradient rule's own matmul) and recomputes Sinkhorn:
// the sums again with Σ dy·xₙ (hc_token_sums_dy), then per token
// (hc_pre_grad_mix, a warp of tokens per block; Sinkhorn's forward run once with its states on a
// tape in scratch, then its adjoints: O(steps), not the O(steps²) of re-running it) dmix,
// per-token partials of the gradients of base and scale (reduce_sum adds them in its fixed order)
// and the coefficients of dx; dmix·fnᵀ (a matmul); then dx, the GEMM's part added in the same
// kernel. dfn = xᵀ·dmix is a matmul of the rule. hc_post and hc_post_grad are one block per token,
// every sum in stream order or index order. No atomics: every output has one owner.
#include <cmath>
#include <functional>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/hc_reference.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/sinkhorn_kernel.h"
#include "kernels/sub_expansion.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kTokenThreads = 64;  // one token per thread (hc_pre_split)
// hc_pre_grad_mix: one token per thread too, but its work per token is larger (the Sinkhorn
// backward), so a warp per block spreads T = 1024 tokens over 32 SMs instead of 16.
constexpr int kGradTokenThreads = 32;
constexpr int kThreads = 128;  // one token per block
constexpr int64_t kMaxN = 8;

int64_t steps_of(const Attrs& attrs) { return 2 * attr_int(attrs, "iters") - 1; }

// ---- Inference -----------------------------------------------------------------------------

// The streams x [T, n, D]: returns n.
int64_t streams_of(const TensorType& x) {
  expect_rank(x, 3, "x");
  if (x.shape[1] < 1 || x.shape[1] > kMaxN)
    throw ShapeError("input 'x' is " + to_string(x) +
                     ", expected [T, n, D] with 1 <= n <= " + std::to_string(kMaxN));
  return x.shape[1];
}

void expect_shape(const TensorType& t, const std::string& slot, std::vector<int64_t> shape) {
  expect_same(t, slot, TensorType{DType::F32, std::move(shape)}, "the streams' sizes");
}

void check_attrs(const Attrs& attrs) {
  if (attr_int(attrs, "iters") < 1)
    throw ShapeError("attribute 'iters' is " + std::to_string(attr_int(attrs, "iters")) +
                     ", expected >= 1");
  if (!(attr_float(attrs, "eps") >= 0))
    throw ShapeError("attribute 'eps' is " + std::to_string(attr_float(attrs, "eps")) +
                     ", expected >= 0");
}

std::vector<TensorType> infer_hc_pre(const std::vector<TensorType>& in, const Attrs& attrs) {
  const int64_t n = streams_of(in[0]), t = in[0].shape[0], d = in[0].shape[2];
  expect_shape(in[1], "fn", {n * d, mixes_of(n)});
  expect_shape(in[2], "scale", {3});
  expect_shape(in[3], "base", {mixes_of(n)});
  check_attrs(attrs);
  std::vector<TensorType> out = {
      {DType::F32, {t, d}}, {DType::F32, {t, n}}, {DType::F32, {t, n, n}}};
  if (attr_bool(attrs, "mix")) out.push_back({DType::F32, {t, mixes_of(n)}});
  return out;
}

// (x, fn, scale, base, dy, dpost, dcomb, mix, addend?) -> (dx, dmix, dab): mix is the forward's
// x·fn; dab [T, M + 3] holds each token's da (dbase's terms) then its dscale terms, so that one
// sum over the tokens gives both.
std::vector<TensorType> infer_hc_pre_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  const int64_t n = streams_of(in[0]), t = in[0].shape[0], d = in[0].shape[2], m = mixes_of(n);
  expect_shape(in[1], "fn", {n * d, m});
  expect_shape(in[2], "scale", {3});
  expect_shape(in[3], "base", {m});
  expect_shape(in[4], "dy", {t, d});
  expect_shape(in[5], "dpost", {t, n});
  expect_shape(in[6], "dcomb", {t, n, n});
  expect_shape(in[7], "mix", {t, m});
  if (in.size() > 8) expect_shape(in[8], "addend", {t, n, d});
  check_attrs(attrs);
  return {in[0], {DType::F32, {t, m}}, {DType::F32, {t, m + 3}}};
}

std::vector<TensorType> infer_hc_post(const std::vector<TensorType>& in, const Attrs&) {
  const int64_t n = streams_of(in[1]), t = in[1].shape[0], d = in[1].shape[2];
  // f may be 16-bit (the layer's output, as the GEMM gave it): read as f32, exactly.
  expect_float(in[0], "f");
  expect_shape({DType::F32, in[0].shape}, "f", {t, d});
  expect_shape(in[2], "post", {t, n});
  expect_shape(in[3], "comb", {t, n, n});
  return {in[1]};
}

// (f, x, post, comb, dout) -> (df, dx, dpost, dcomb)
std::vector<TensorType> infer_hc_post_grad(const std::vector<TensorType>& in, const Attrs& a) {
  infer_hc_post({in[0], in[1], in[2], in[3]}, a);
  expect_same(in[4], "dout", in[1], "x");
  return {in[0], in[1], in[2], in[3]};
}

// ---- Gradient rules ----------------------------------------------------------------------------

// hc_pre_grad gives dx whole, dmix and per-token terms of dbase and dscale side by side; dfn =
// xᵀ·dmix, and one sum over the tokens, split (views where dbase's M floats keep 16-byte
// alignment), gives dbase and dscale. It reads the forward's x·fn: hc_pre's mix output where the
// op has it (`mix`), else the same matmul again (the same kernels, so the same bits).
std::vector<GradOp> grad_hc_pre(const std::vector<TensorType>& in, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1] && !needs[2] && !needs[3]) return {};
  const int64_t t = in[0].shape[0], k = in[0].shape[1] * in[0].shape[2];
  const int64_t m = in[3].shape[0];
  const bool has_mix = attr_bool(attrs, "mix");
  std::vector<GradOp> ops;
  if (needs[1] || !has_mix)
    ops.push_back({"reshape", {"x0"}, {"xf"}, {{"shape", std::vector<int64_t>{t, k}}}});
  if (!has_mix) ops.push_back({"matmul", {"xf", "x1"}, {"mix"}, {}});
  Attrs grad_attrs = attrs;
  grad_attrs.erase("mix");
  ops.push_back({"hc_pre_grad",
                 {"x0", "x1", "x2", "x3", "dy0", "dy1", "dy2", has_mix ? "y3" : "mix"},
                 {needs[0] ? "dx0" : "unused_dx", "dmix", "dab"},
                 grad_attrs});
  if (needs[1]) ops.push_back({"matmul", {"xf", "dmix"}, {"dx1"}, {{"transpose_a", true}}});
  if (needs[2] || needs[3]) {
    ops.push_back({"reduce_sum", {"dab"}, {"dab_sum"}, {{"axes", std::vector<int64_t>{0}}}});
    ops.push_back({"split",
                   {"dab_sum"},
                   {needs[3] ? "dx3" : "unused_dbase", needs[2] ? "dx2" : "unused_dscale"},
                   {{"axis", int64_t{0}}, {"sizes", std::vector<int64_t>{m, 3}}}});
  }
  return ops;
}

std::vector<GradOp> grad_hc_post(const std::vector<TensorType>&, const Attrs&,
                                 const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1] && !needs[2] && !needs[3]) return {};
  auto name = [&](int i) {
    return needs[i] ? "dx" + std::to_string(i) : "unused" + std::to_string(i);
  };
  return {
      {"hc_post_grad", {"x0", "x1", "x2", "x3", "dy0"}, {name(0), name(1), name(2), name(3)}, {}}};
}

// ---- Kernels ---------------------------------------------------------------------------------

// The per-token sums the one-thread-per-token kernels need, one block per token (a block-wide
// reduction each, loads coalesced, in reduce_sum's fixed order): sums[t, 0] = Σ x[t, :]² over
// the n·D stream values and, for the backward (with_dy), sums[t, 1 + i] = Σ_c dy[t, c]·x[t, i, c].
// On their own, one block per token: summed inside the token-per-thread kernels, 64 tokens a
// block took their T/64 blocks through 64 reductions each in turn (T = 256: 4 blocks, the fused
// attention backward 1.7 ms on the H200 against 1.0 ms composed). Parameters x [T, K]
// (K = n·D), dy [T, D] (with_dy), sums [T, 1 (+ n)]; dims T, D, K.
cc::Kernel build_hc_token_sums(int64_t n, bool with_dy, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim tokens = kb.dim("T"), dd = kb.dim("D"), k = kb.dim("K");
  cc::Buf x = kb.input("x", DType::F32, {tokens, k});
  cc::Buf dy = with_dy ? kb.input("dy", DType::F32, {tokens, dd}) : cc::Buf{};
  const int64_t count = with_dy ? 1 + n : 1;
  cc::Buf sums = kb.output("sums", DType::F32, {tokens, cc::Val(count)});
  kb.body({tokens}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    for (int64_t i = 0; i < count; ++i) {
      cc::Val sum =
          i == 0
              ? s.reduce_sum(k,
                             [&](cc::Idx j) {
                               cc::Val v = x(tok, j);
                               return v * v;
                             })
              : s.reduce_sum(dd, [&](cc::Idx c) { return dy(tok, c) * x(tok, (i - 1) * dd + c); });
      s.parallel(1, [&](cc::Idx) { sums(tok, cc::Val(i)) = sum; });
      s.barrier();  // the reduction's scratch is reused by the next one
    }
  });
  return kb.build();
}

// Per thread (token t of the block): its logits a[j] into fragments lg; returns r.
cc::Val logits_into(cc::Scope& s, std::vector<cc::Buf>& lg, const cc::Val& ss, const cc::Buf& mix,
                    const cc::Buf& scale, const cc::Buf& base, const cc::Idx& tok, const cc::Idx& t,
                    const cc::Dim& k, int64_t n, const cc::Val& norm_eps) {
  cc::Val r = s.let(1.0f / cc::sqrt(ss / cc::to_f32(k) + norm_eps), "r");
  for (int64_t j = 0; j < mixes_of(n); ++j)
    lg[j](t) = mix(tok, j) * r * scale(group_of(j, n)) + base(j);
  return r;
}

SinkhornLogit comb_logit(std::vector<cc::Buf>& lg, const cc::Idx& t, int64_t n) {
  return [&lg, t, n](int64_t i, int64_t j) { return cc::Val(lg[2 * n + i * n + j](t)); };
}

// hc_pre_split's parameters (both kernels): sums [T, 1] (hc_token_sums), mix [T, M], scale [3],
// base [M], pre [T, n], post [T, n], comb [T, n²]; dims T, K, STEPS; scalars eps, norm_eps.
struct SplitParams {
  cc::Dim tokens, k, steps;
  cc::Val eps, norm_eps;
  cc::Buf sums, mix, scale, base, pre, post, comb;
};
SplitParams declare_split_params(cc::KernelBuilder& kb, int64_t n) {
  const int64_t m = mixes_of(n);
  SplitParams p;
  p.tokens = kb.dim("T"), p.k = kb.dim("K"), p.steps = kb.dim("STEPS");
  p.eps = kb.scalar_f32("eps"), p.norm_eps = kb.scalar_f32("norm_eps");
  p.sums = kb.input("sums", DType::F32, {p.tokens, cc::Val(1)});
  p.mix = kb.input("mix", DType::F32, {p.tokens, cc::Val(m)});
  p.scale = kb.input("scale", DType::F32, {cc::Val(3)});
  p.base = kb.input("base", DType::F32, {cc::Val(m)});
  p.pre = kb.output("pre", DType::F32, {p.tokens, cc::Val(n)});
  p.post = kb.output("post", DType::F32, {p.tokens, cc::Val(n)});
  p.comb = kb.output("comb", DType::F32, {p.tokens, cc::Val(n * n)});
  return p;
}

cc::Kernel build_hc_pre_split(int64_t n, const std::string& name) {
  const int64_t m = mixes_of(n);
  cc::KernelBuilder kb(name);
  const SplitParams ps = declare_split_params(kb, n);
  const cc::Dim &tokens = ps.tokens, &k = ps.k, &steps = ps.steps;
  const cc::Val &eps = ps.eps, &norm_eps = ps.norm_eps;
  const cc::Buf &sums = ps.sums, &mix = ps.mix, &scale = ps.scale, &base = ps.base, &pre = ps.pre,
                &post = ps.post, &comb = ps.comb;
  kb.body({cc::ceildiv(tokens, kTokenThreads)}, kTokenThreads, [&](cc::Scope& s) {
    std::vector<cc::Buf> lg = sinkhorn_vector(s, "lg", m, kTokenThreads);
    SinkhornFrags q(s, "q", n, kTokenThreads);
    std::vector<cc::Buf> d = sinkhorn_vector(s, "d", n, kTokenThreads);
    s.parallel(kTokenThreads, [&](cc::Idx t) {
      cc::Idx tok = s.block_idx(0) * kTokenThreads + t;
      s.if_then(tok < tokens, [&] {
        logits_into(s, lg, sums(tok, 0), mix, scale, base, tok, t, k, n, norm_eps);
        for (int64_t i = 0; i < n; ++i) {
          pre(tok, i) = cc::sigmoid(lg[i](t)) + eps;
          post(tok, i) = 2.0f * cc::sigmoid(lg[n + i](t));
        }
        sinkhorn_forward(s, q, d, comb_logit(lg, t, n), t, eps, steps);
        for (int64_t e = 0; e < n * n; ++e) comb(tok, e) = q.v[e](t);
      });
    });
  });
  return kb.build();
}

// The lane-parallel kernels (n in {1, 2, 4}, SinkhornLanes): a token's n×n matrix on n² lanes,
// kLaneThreads / n² tokens a block, the same arithmetic as the one-thread kernels.
constexpr int kLaneThreads = 128;

int64_t lane_tokens(int64_t n) { return kLaneThreads / SinkhornLanes::group(n); }

// Per lane, inside a parallel: the token, its lane in the group, and r (or 0 past the tokens).
struct LaneToken {
  cc::Val tok, e, inside;
};
LaneToken lane_token(cc::Scope& s, const cc::Idx& t, int64_t n, const cc::Dim& tokens) {
  const int64_t g = SinkhornLanes::group(n);
  cc::Val tok = s.let(s.block_idx(0) * lane_tokens(n) + t / g, "tok");
  return {tok, s.let(t % g, "e"), s.let(tok < tokens, "inside")};
}

// Mix j's logit a[j] = mix[t, j]·r·scale[group(j)] + base[j] (logits_into's arithmetic).
cc::Val mix_logit(const cc::Buf& mix, const cc::Buf& scale, const cc::Buf& base, const cc::Val& tok,
                  const cc::Val& j, const cc::Val& r, int64_t n) {
  cc::Val group =
      cc::select(j < cc::Val(n), cc::Val(int64_t{0}),
                 cc::select(j < cc::Val(2 * n), cc::Val(int64_t{1}), cc::Val(int64_t{2})));
  return mix(tok, j) * r * scale(group) + base(j);
}

cc::Val token_rsqrt(const cc::Buf& sums, const cc::Val& tok, const cc::Dim& k,
                    const cc::Val& norm_eps) {
  return 1.0f / cc::sqrt(sums(tok, 0) / cc::to_f32(k) + norm_eps);
}

// lg[t] = the lane's comb logit (0 past the tokens).
void comb_logits(cc::Scope& s, SinkhornLanes& lanes, const cc::Buf& lg, const cc::Buf& sums,
                 const cc::Buf& mix, const cc::Buf& scale, const cc::Buf& base,
                 const cc::Dim& tokens, const cc::Dim& k, const cc::Val& norm_eps, int64_t n) {
  s.parallel(kLaneThreads, [&](cc::Idx t) {
    LaneToken lt = lane_token(s, t, n, tokens);
    lg(t) = 0.0f;
    s.if_then(lt.inside, [&] {
      cc::Val r = s.let(token_rsqrt(sums, lt.tok, k, norm_eps), "r");
      cc::Val j = s.let(2 * n + lt.e, "j");
      lg(t) = mix_logit(mix, scale, base, lt.tok, j, r, n);
    });
  });
}

// hc_pre_split with a thread per matrix entry (the parameters of build_hc_pre_split).
cc::Kernel build_hc_pre_split_lanes(int64_t n, const std::string& name) {
  const int64_t g = SinkhornLanes::group(n);
  cc::KernelBuilder kb(name);
  const SplitParams ps = declare_split_params(kb, n);
  const cc::Dim &tokens = ps.tokens, &k = ps.k, &steps = ps.steps;
  const cc::Val &eps = ps.eps, &norm_eps = ps.norm_eps;
  const cc::Buf &sums = ps.sums, &mix = ps.mix, &scale = ps.scale, &base = ps.base, &pre = ps.pre,
                &post = ps.post, &comb = ps.comb;
  kb.body({cc::ceildiv(tokens, lane_tokens(n))}, kLaneThreads, [&](cc::Scope& s) {
    SinkhornLanes lanes(s, "sk", n, kLaneThreads);
    cc::Buf lg = s.alloc_fragment("lg", DType::F32, {kLaneThreads});
    cc::Buf q = s.alloc_fragment("q", DType::F32, {kLaneThreads});
    cc::Buf d = s.alloc_fragment("d", DType::F32, {kLaneThreads});
    // The σ splits: mix j < 2n on lane j % n² of the token.
    s.parallel(kLaneThreads, [&](cc::Idx t) {
      LaneToken lt = lane_token(s, t, n, tokens);
      s.if_then(lt.inside, [&] {
        cc::Val r = s.let(token_rsqrt(sums, lt.tok, k, norm_eps), "r");
        for (int64_t c = 0; c * g < 2 * n; ++c) {
          cc::Val j = s.let(lt.e + c * g, "j");
          s.if_then(j < cc::Val(2 * n), [&] {
            cc::Val a = s.let(mix_logit(mix, scale, base, lt.tok, j, r, n), "a");
            s.if_then_else(
                j < cc::Val(n), [&] { pre(lt.tok, j) = cc::sigmoid(a) + eps; },
                [&] { post(lt.tok, j - n) = 2.0f * cc::sigmoid(a); });
          });
        }
      });
    });
    comb_logits(s, lanes, lg, sums, mix, scale, base, tokens, k, norm_eps, n);
    lanes.softmax(q, lg, eps, true);
    // Steps 0 .. STEPS - 1 alternate columns and rows, STEPS odd: pairs, then a last column one.
    s.serial((cc::Val(steps) - 1) / 2, [&](cc::Idx) {
      lanes.normalize(q, d, eps, true);
      lanes.normalize(q, d, eps, false);
    });
    lanes.normalize(q, d, eps, true);
    s.parallel(kLaneThreads, [&](cc::Idx t) {
      LaneToken lt = lane_token(s, t, n, tokens);
      s.if_then(lt.inside, [&] { comb(lt.tok, lt.e) = q(t); });
    });
  });
  return kb.build();
}

// y[t, :] = Σₙ pre[t, n]·x[t, n, :] in stream order, one block per token. Parameters pre, x, y;
// dims T, D.
cc::Kernel build_hc_pre_combine(int64_t n, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim tokens = kb.dim("T"), dd = kb.dim("D");
  cc::Buf pre = kb.input("pre", DType::F32, {tokens, cc::Val(n)});
  cc::Buf x = kb.input("x", DType::F32, {tokens, cc::Val(n), dd});
  cc::Buf y = kb.output("y", DType::F32, {tokens, dd});
  kb.body({tokens}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    s.parallel(dd, [&](cc::Idx c) {
      cc::Val v = s.let(pre(tok, 0) * x(tok, 0, c), "y");
      for (int64_t i = 1; i < n; ++i) v = s.let(v + pre(tok, i) * x(tok, i, c), "y");
      y(tok, c) = v;
    });
  });
  return kb.build();
}

// hc_pre_grad_mix's parameters (both kernels): sums [T, 1 + n], mix, scale, base, dpost [T, n],
// dcomb [T, n²], dmix, dab [T, M + 3] (da, then dscale's three terms), coef [T, n + 1], tape (the
// kernel's own shape); dims T, K (= n·D), STEPS; scalars eps, norm_eps.
struct MixGradParams {
  cc::Dim tokens, k, steps;
  cc::Val eps, norm_eps;
  cc::Buf sums, mix, scale, base, dpost, dcomb, dmix, dab, coef, tape;
  int64_t m = 0;
  // da[tok, j] and dscale[tok, g]: dab's columns j and M + g.
  cc::Ref da(const cc::Val& tok, const cc::Val& j) const { return dab(tok, j); }
  cc::Ref dscale(const cc::Val& tok, const cc::Val& g) const { return dab(tok, cc::Val(m) + g); }
};
MixGradParams declare_mix_grad_params(
    cc::KernelBuilder& kb, int64_t n,
    const std::function<std::vector<cc::Val>(const cc::Dim&, const cc::Dim&, int64_t)>& tape) {
  const int64_t m = mixes_of(n);
  MixGradParams p;
  p.tokens = kb.dim("T"), p.k = kb.dim("K"), p.steps = kb.dim("STEPS");
  p.eps = kb.scalar_f32("eps"), p.norm_eps = kb.scalar_f32("norm_eps");
  p.sums = kb.input("sums", DType::F32, {p.tokens, cc::Val(n + 1)});
  p.mix = kb.input("mix", DType::F32, {p.tokens, cc::Val(m)});
  p.scale = kb.input("scale", DType::F32, {cc::Val(3)});
  p.base = kb.input("base", DType::F32, {cc::Val(m)});
  p.dpost = kb.input("dpost", DType::F32, {p.tokens, cc::Val(n)});
  p.dcomb = kb.input("dcomb", DType::F32, {p.tokens, cc::Val(n * n)});
  p.dmix = kb.output("dmix", DType::F32, {p.tokens, cc::Val(m)});
  p.dab = kb.output("dab", DType::F32, {p.tokens, cc::Val(m + 3)});
  p.m = m;
  p.coef = kb.output("coef", DType::F32, {p.tokens, cc::Val(n + 1)});
  p.tape = kb.output("tape", DType::F32, tape(p.steps, p.tokens, n));
  return p;
}

// Token tok's dmix, dscale and coef[tok, n] from its da (da_of(j), mix j) in mix order: dscale's
// three partial sums and dr = Σ dz·mix each one chain, shared by both hc_pre_grad_mix kernels.
void write_mix_grads(cc::Scope& s, const std::function<cc::Val(int64_t)>& da_of,
                     const MixGradParams& pm, const cc::Val& tok, const cc::Val& r, int64_t n) {
  const cc::Buf &mix = pm.mix, &scale = pm.scale, &dmix = pm.dmix, &coef = pm.coef;
  const cc::Dim& k = pm.k;
  cc::Val dr, part[3];
  for (int64_t j = 0; j < mixes_of(n); ++j) {
    const int64_t gi = group_of(j, n);
    cc::Val a = s.let(da_of(j), "da"), mx = s.let(mix(tok, j), "mix");
    cc::Val term = s.let(a * mx * r, "term");
    part[gi] = part[gi].defined() ? s.let(part[gi] + term, "ds") : term;
    cc::Val dz = s.let(a * scale(gi), "dz");
    dmix(tok, j) = dz * r;
    dr = j == 0 ? s.let(dz * mx, "dr") : s.let(dr + dz * mx, "dr");
  }
  for (int64_t gi = 0; gi < 3; ++gi) pm.dscale(tok, cc::Val(gi)) = part[gi];
  coef(tok, n) = -dr * r * r * r / cc::to_f32(k);
}

// One thread per token: the logits again, Sinkhorn's backward (taped), then dmix, da, dscale (per
// token) and coef [T, n + 1] = (pre, c) for hc_pre_grad_dx. Parameters sums [T, 1 + n]
// (hc_token_sums with dy: Σ x², then dpre = Σ_d dy·xₙ), mix, scale, base, dpost [T, n], dcomb [T,
// n²], dmix, da, dscale [T, 3], coef, tape [STEPS, n² + n, T] (scratch); dims T, K (= n·D), STEPS;
// scalars eps, norm_eps.
cc::Kernel build_hc_pre_grad_mix(int64_t n, const std::string& name) {
  const int64_t m = mixes_of(n);
  cc::KernelBuilder kb(name);
  // Sinkhorn's forward states per step, tokens innermost so that a warp's stores coalesce.
  const MixGradParams pm =
      declare_mix_grad_params(kb, n, [](const cc::Dim& steps, const cc::Dim& tokens, int64_t n) {
        return std::vector<cc::Val>{steps, cc::Val(n * n + n), tokens};
      });
  const cc::Dim &tokens = pm.tokens, &k = pm.k, &steps = pm.steps;
  const cc::Val &eps = pm.eps, &norm_eps = pm.norm_eps;
  const cc::Buf &sums = pm.sums, &mix = pm.mix, &scale = pm.scale, &base = pm.base,
                &dpost = pm.dpost, &dcomb = pm.dcomb, &coef = pm.coef, &tape = pm.tape;
  auto da = [&](const cc::Val& tok, const cc::Val& j) { return pm.da(tok, j); };
  kb.body({cc::ceildiv(tokens, kGradTokenThreads)}, kGradTokenThreads, [&](cc::Scope& s) {
    std::vector<cc::Buf> lg = sinkhorn_vector(s, "lg", m, kGradTokenThreads);
    SinkhornFrags q(s, "q", n, kGradTokenThreads), g(s, "g", n, kGradTokenThreads);
    std::vector<cc::Buf> d = sinkhorn_vector(s, "d", n, kGradTokenThreads);
    std::vector<cc::Buf> dot = sinkhorn_vector(s, "dot", n, kGradTokenThreads);
    s.parallel(kGradTokenThreads, [&](cc::Idx t) {
      cc::Idx tok = s.block_idx(0) * kGradTokenThreads + t;
      s.if_then(tok < tokens, [&] {
        cc::Val r = logits_into(s, lg, sums(tok, 0), mix, scale, base, tok, t, k, n, norm_eps);
        for (int64_t e = 0; e < n * n; ++e) g.v[e](t) = dcomb(tok, e);
        const SinkhornTape taped{
            .q = [&](const cc::Val& step, int64_t e) { return tape(step, cc::Val(e), tok); },
            .d = [&](const cc::Val& step,
                     int64_t a) { return tape(step, cc::Val(n * n + a), tok); }};
        sinkhorn_backward_taped(s, q, g, d, dot, comb_logit(lg, t, n), t, eps, steps, taped);
        for (int64_t i = 0; i < n; ++i) {
          cc::Val sp = s.let(cc::sigmoid(lg[i](t)), "sp");
          cc::Val sq = s.let(cc::sigmoid(lg[n + i](t)), "sq");
          da(tok, i) = sums(tok, 1 + i) * sp * (1.0f - sp);
          da(tok, n + i) = dpost(tok, i) * 2.0f * sq * (1.0f - sq);
          coef(tok, i) = sp + eps;
        }
        for (int64_t e = 0; e < n * n; ++e) da(tok, 2 * n + e) = g.v[e](t);
        write_mix_grads(
            s, [&](int64_t j) { return cc::Val(da(tok, cc::Val(j))); }, pm, tok, r, n);
      });
    });
  });
  return kb.build();
}

// hc_pre_grad_mix with a thread per matrix entry (build_hc_pre_grad_mix's parameters, but the
// tape [STEPS, 2, T·n²]: each lane's entry and divisor after every step), then one thread per
// token for the mixes' sums, which run in mix order.
cc::Kernel build_hc_pre_grad_mix_lanes(int64_t n, const std::string& name) {
  const int64_t m = mixes_of(n), g = SinkhornLanes::group(n), per_block = lane_tokens(n);
  cc::KernelBuilder kb(name);
  const MixGradParams pm =
      declare_mix_grad_params(kb, n, [](const cc::Dim& steps, const cc::Dim& tokens, int64_t n) {
        return std::vector<cc::Val>{steps, cc::Val(2), tokens * cc::Val(SinkhornLanes::group(n))};
      });
  const cc::Dim &tokens = pm.tokens, &k = pm.k, &steps = pm.steps;
  const cc::Val &eps = pm.eps, &norm_eps = pm.norm_eps;
  const cc::Buf &sums = pm.sums, &mix = pm.mix, &scale = pm.scale, &base = pm.base,
                &dpost = pm.dpost, &dcomb = pm.dcomb, &coef = pm.coef, &tape = pm.tape;
  auto da = [&](const cc::Val& tok, const cc::Val& j) { return pm.da(tok, j); };
  kb.body({cc::ceildiv(tokens, per_block)}, kLaneThreads, [&](cc::Scope& s) {
    SinkhornLanes lanes(s, "sk", n, kLaneThreads);
    cc::Buf lg = s.alloc_fragment("lg", DType::F32, {kLaneThreads});
    cc::Buf q = s.alloc_fragment("q", DType::F32, {kLaneThreads});
    cc::Buf d = s.alloc_fragment("d", DType::F32, {kLaneThreads});
    cc::Buf gr = s.alloc_fragment("gr", DType::F32, {kLaneThreads});
    cc::Buf dash = s.alloc_shared("dash", DType::F32, {per_block, m});
    comb_logits(s, lanes, lg, sums, mix, scale, base, tokens, k, norm_eps, n);
    s.parallel(kLaneThreads, [&](cc::Idx t) {
      LaneToken lt = lane_token(s, t, n, tokens);
      gr(t) = 0.0f;
      s.if_then(lt.inside, [&] { gr(t) = dcomb(lt.tok, lt.e); });
    });
    // The forward once, each step's entry and divisor on the tape.
    auto record = [&](const cc::Val& step) {
      s.parallel(kLaneThreads, [&](cc::Idx t) {
        LaneToken lt = lane_token(s, t, n, tokens);
        s.if_then(lt.inside, [&] {
          tape(step, 0, lt.tok * g + lt.e) = q(t);
          tape(step, 1, lt.tok * g + lt.e) = d(t);
        });
      });
    };
    auto replay = [&](const cc::Val& step) {
      s.parallel(kLaneThreads, [&](cc::Idx t) {
        LaneToken lt = lane_token(s, t, n, tokens);
        q(t) = 0.0f;
        d(t) = 0.0f;
        s.if_then(lt.inside, [&] {
          q(t) = tape(step, 0, lt.tok * g + lt.e);
          d(t) = tape(step, 1, lt.tok * g + lt.e);
        });
      });
    };
    lanes.softmax(q, lg, eps, true);
    s.serial((cc::Val(steps) - 1) / 2, [&](cc::Idx it) {
      lanes.normalize(q, d, eps, true);
      record(2 * it);
      lanes.normalize(q, d, eps, false);
      record(2 * it + 1);
    });
    lanes.normalize(q, d, eps, true);
    // The adjoints, last step first: the last one's state is still in q and d.
    lanes.adjoint(gr, q, d, true);
    s.serial((cc::Val(steps) - 1) / 2, [&](cc::Idx r) {
      cc::Val it = s.let((cc::Val(steps) - 1) / 2 - 1 - r, "it");
      replay(2 * it + 1);
      lanes.adjoint(gr, q, d, false);
      replay(2 * it);
      lanes.adjoint(gr, q, d, true);
    });
    lanes.softmax_adjoint(gr, q, lg, eps);
    // da: comb's entries from the lanes, the σ splits' on lane j % n² (mix j < 2n).
    s.parallel(kLaneThreads, [&](cc::Idx t) {
      LaneToken lt = lane_token(s, t, n, tokens);
      cc::Val slot = s.let(t / g, "slot");
      s.if_then(lt.inside, [&] {
        {
          cc::Val j = s.let(2 * n + lt.e, "j");
          da(lt.tok, j) = gr(t);
          dash(slot, j) = gr(t);
        }
        cc::Val r = s.let(token_rsqrt(sums, lt.tok, k, norm_eps), "r");
        for (int64_t c = 0; c * g < 2 * n; ++c) {
          cc::Val j = s.let(lt.e + c * g, "j");
          s.if_then(j < cc::Val(2 * n), [&] {
            cc::Val sg = s.let(cc::sigmoid(mix_logit(mix, scale, base, lt.tok, j, r, n)), "sg");
            s.if_then_else(
                j < cc::Val(n),
                [&] {
                  cc::Val v = s.let(sums(lt.tok, 1 + j) * sg * (1.0f - sg), "v");
                  da(lt.tok, j) = v;
                  dash(slot, j) = v;
                  coef(lt.tok, j) = sg + eps;
                },
                [&] {
                  cc::Val v = s.let(dpost(lt.tok, j - n) * 2.0f * sg * (1.0f - sg), "v");
                  da(lt.tok, j) = v;
                  dash(slot, j) = v;
                });
          });
        }
      });
    });
    s.barrier();
    // dmix, dscale and the coefficient of x in mix order, a thread a token.
    s.parallel(per_block, [&](cc::Idx slot) {
      cc::Val tok = s.let(s.block_idx(0) * per_block + slot, "tok");
      s.if_then(tok < tokens, [&] {
        cc::Val r = s.let(token_rsqrt(sums, tok, k, norm_eps), "r");
        write_mix_grads(
            s, [&](int64_t j) { return cc::Val(dash(slot, j)); }, pm, tok, r, n);
      });
    });
  });
  return kb.build();
}

// dx[t, i, :] = coef[t, i]·dy[t, :] + coef[t, n]·x[t, i, :] + dxf[t, i, :] (the GEMM's part), one
// block per token; with `addend`, plus addend[t, i, :] after (an add's rounding). Parameters
// coef, x, dy, dxf, (addend,) dx; dims T, D.
cc::Kernel build_hc_pre_grad_dx(int64_t n, const std::string& name, bool addend) {
  cc::KernelBuilder kb(name);
  cc::Dim tokens = kb.dim("T"), dd = kb.dim("D");
  cc::Buf coef = kb.input("coef", DType::F32, {tokens, cc::Val(n + 1)});
  cc::Buf x = kb.input("x", DType::F32, {tokens, cc::Val(n), dd});
  cc::Buf dy = kb.input("dy", DType::F32, {tokens, dd});
  cc::Buf dxf = kb.input("dxf", DType::F32, {tokens, cc::Val(n), dd});
  cc::Buf add = addend ? kb.input("addend", DType::F32, {tokens, cc::Val(n), dd}) : cc::Buf{};
  cc::Buf dx = kb.output("dx", DType::F32, {tokens, cc::Val(n), dd});
  kb.body({tokens}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    s.parallel(cc::Val(n), dd, [&](cc::Idx i, cc::Idx c) {
      cc::Val v =
          s.let(coef(tok, i) * dy(tok, c) + coef(tok, n) * x(tok, i, c) + dxf(tok, i, c), "dx");
      dx(tok, i, c) = addend ? cc::Val(v + add(tok, i, c)) : v;
    });
  });
  return kb.build();
}

// out[t, q, :] = post[t, q]·f[t, :] + Σ_p comb[t, p, q]·x[t, p, :], p in order; one block per
// token. Parameters f, x, post, comb, out; dims T, D.
cc::Kernel build_hc_post(int64_t n, DType fdt, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim tokens = kb.dim("T"), dd = kb.dim("D");
  cc::Buf f = kb.input("f", fdt, {tokens, dd});
  cc::Buf x = kb.input("x", DType::F32, {tokens, cc::Val(n), dd});
  cc::Buf post = kb.input("post", DType::F32, {tokens, cc::Val(n)});
  cc::Buf comb = kb.input("comb", DType::F32, {tokens, cc::Val(n), cc::Val(n)});
  cc::Buf out = kb.output("out", DType::F32, {tokens, cc::Val(n), dd});
  kb.body({tokens}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    s.parallel(cc::Val(n), dd, [&](cc::Idx q, cc::Idx c) {
      cc::Val v = s.let(post(tok, q) * cc::to_f32(f(tok, c)), "out");
      for (int64_t p = 0; p < n; ++p) v = s.let(v + comb(tok, p, q) * x(tok, p, c), "out");
      out(tok, q, c) = v;
    });
  });
  return kb.build();
}

// hc_post over tiles of kPostCols columns (D a multiple of 4): blocks (token, column tile), each
// thread's 16-byte pieces of f and of the n streams loaded into registers before any store, the
// token's coefficients read once before them. One block per token walking all n·D outputs took 32
// loads and stores a thread in turn, each load waiting behind the stores before it (the inputs
// may alias the output, as far as the hardware knows). The same sums in the same order: the same
// bits. Parameters and dims as build_hc_post's.
constexpr int64_t kPostCols = 512;

cc::Kernel build_hc_post_tiled(int64_t n, DType fdt, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim tokens = kb.dim("T"), dd = kb.dim("D", {.divisible_by = 4});
  cc::Buf f = kb.input("f", fdt, {tokens, dd});
  cc::Buf x = kb.input("x", DType::F32, {tokens, cc::Val(n), dd});
  cc::Buf post = kb.input("post", DType::F32, {tokens, cc::Val(n)});
  cc::Buf comb = kb.input("comb", DType::F32, {tokens, cc::Val(n), cc::Val(n)});
  cc::Buf out = kb.output("out", DType::F32, {tokens, cc::Val(n), dd});
  kb.body({tokens, cc::ceildiv(dd, kPostCols)}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    cc::Idx c0 = s.let(s.block_idx(1) * kPostCols, "c0");
    std::vector<cc::Val> pq, cpq;  // post[q]; comb[p, q] at p·n + q
    for (int64_t q = 0; q < n; ++q) pq.push_back(s.let(post(tok, q), "post"));
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = 0; q < n; ++q) cpq.push_back(s.let(comb(tok, p, q), "comb"));
    cc::Buf fr = s.alloc_fragment("fr", DType::F32, {kPostCols});
    std::vector<cc::Buf> xr;
    for (int64_t p = 0; p < n; ++p)
      xr.push_back(s.alloc_fragment("x" + std::to_string(p), DType::F32, {kPostCols}));
    // The tile wholly inside D runs without a guard (a guard keeps accesses scalar).
    auto tile = [&](bool guarded) {
      auto each = [&](const cc::Idx& j, const std::function<void(const cc::Idx&)>& body) {
        cc::Idx c = s.let(c0 + j, "c");
        if (guarded)
          s.if_then(c < dd, [&] { body(c); });
        else
          body(c);
      };
      s.annotate_layout(4);
      s.parallel(cc::Val(kPostCols), [&](cc::Idx j) {
        each(j, [&](const cc::Idx& c) {
          fr(j) = cc::to_f32(f(tok, c));
          for (int64_t p = 0; p < n; ++p) xr[p](j) = x(tok, p, c);
        });
      });
      s.parallel(cc::Val(kPostCols), [&](cc::Idx j) {
        each(j, [&](const cc::Idx& c) {
          for (int64_t q = 0; q < n; ++q) {
            cc::Val v = s.let(pq[q] * fr(j), "out");
            for (int64_t p = 0; p < n; ++p) v = s.let(v + cpq[p * n + q] * xr[p](j), "out");
            out(tok, q, c) = v;
          }
        });
      });
    };
    s.if_then_else(
        c0 + kPostCols <= dd, [&] { tile(false); }, [&] { tile(true); });
  });
  return kb.build();
}

// hc_post's backward, one block per token, in one sweep over D: thread t takes columns t, t + 128,
// ..., writes df and dx there (sums over q in order) and folds its columns' terms of dpost and
// dcomb (n + n² sums) into per-thread partials; then one thread per sum adds the 128 partials in
// thread order. (n + n² block-wide reductions, each with its barriers, re-read dout and x for
// every sum: 32 us a kernel at T = 1024 on the H200, against a floor of 12.) Parameters f, x,
// post, comb, dout, df, dx, dpost, dcomb; dims T, D.
// With `fixed_d` (> 0, a multiple of kThreads) D is that constant, and each thread loads all of
// its columns' values (and the token's coefficients) into registers before its first store: the
// general kernel's loads of a column wait behind the previous column's stores (the inputs may
// alias the outputs, as far as the hardware knows), D / 128 round trips in turn. The same sums in
// the same order: the same bits. Then its dim is T alone.
cc::Kernel build_hc_post_grad(int64_t n, DType fdt, const std::string& name, int64_t fixed_d = 0) {
  cc::KernelBuilder kb(name);
  cc::Dim tokens = kb.dim("T");
  const cc::Val dd = fixed_d > 0 ? cc::Val(fixed_d) : cc::Val(kb.dim("D"));
  const cc::Val nv(n);
  const int64_t count = n + n * n;  // dpost's sums, then dcomb's (p, q) at n + p·n + q
  cc::Buf f = kb.input("f", fdt, {tokens, dd});
  cc::Buf x = kb.input("x", DType::F32, {tokens, nv, dd});
  cc::Buf post = kb.input("post", DType::F32, {tokens, nv});
  cc::Buf comb = kb.input("comb", DType::F32, {tokens, nv, nv});
  cc::Buf dout = kb.input("dout", DType::F32, {tokens, nv, dd});
  cc::Buf df = kb.output("df", fdt, {tokens, dd});  // rounded to f's dtype as it is stored
  cc::Buf dx = kb.output("dx", DType::F32, {tokens, nv, dd});
  cc::Buf dpost = kb.output("dpost", DType::F32, {tokens, nv});
  cc::Buf dcomb = kb.output("dcomb", DType::F32, {tokens, nv, nv});
  kb.body({tokens}, kThreads, [&](cc::Scope& s) {
    cc::Idx tok = s.block_idx(0);
    std::vector<cc::Buf> acc = sinkhorn_vector(s, "acc", count, kThreads);
    cc::Buf part = s.alloc_shared("part", DType::F32, {count, kThreads});
    // Column c's values (dout by q, f, x by p) and their terms, given how each value is read.
    using Read = std::function<cc::Val(int, int64_t)>;  // (what: 0 dout, 1 f, 2 x; q or p)
    auto column = [&](const cc::Idx& t, const cc::Idx& c, const Read& read,
                      const std::function<cc::Val(int64_t)>& post_q,
                      const std::function<cc::Val(int64_t, int64_t)>& comb_pq) {
      std::vector<cc::Val> d;
      for (int64_t q = 0; q < n; ++q) d.push_back(read(0, q));
      cc::Val v = s.let(post_q(0) * d[0], "df");
      for (int64_t q = 1; q < n; ++q) v = s.let(v + post_q(q) * d[q], "df");
      df(tok, c) = v;
      for (int64_t p = 0; p < n; ++p) {
        cc::Val w = s.let(comb_pq(p, 0) * d[0], "dx");
        for (int64_t q = 1; q < n; ++q) w = s.let(w + comb_pq(p, q) * d[q], "dx");
        dx(tok, p, c) = w;
      }
      cc::Val fc = read(1, 0);
      for (int64_t q = 0; q < n; ++q) acc[q](t) = acc[q](t) + d[q] * fc;
      for (int64_t p = 0; p < n; ++p) {
        cc::Val xp = read(2, p);
        for (int64_t q = 0; q < n; ++q) acc[n + p * n + q](t) = acc[n + p * n + q](t) + xp * d[q];
      }
    };
    s.parallel(kThreads, [&](cc::Idx t) {
      for (int64_t o = 0; o < count; ++o) acc[o](t) = -0.0f;  // -0: the sum's identity
      if (fixed_d > 0) {
        // Everything this thread reads, first: the coefficients, then its D / 128 columns.
        std::vector<cc::Val> pq, cpq;
        for (int64_t q = 0; q < n; ++q) pq.push_back(s.let(post(tok, q), "post"));
        for (int64_t p = 0; p < n; ++p)
          for (int64_t q = 0; q < n; ++q) cpq.push_back(s.let(comb(tok, p, q), "comb"));
        const int64_t iters = fixed_d / kThreads, per = 2 * n + 1;  // dout by q, f, x by p
        std::vector<cc::Buf> held;
        for (int64_t i = 0; i < iters * per; ++i)
          held.push_back(s.alloc_fragment("held" + std::to_string(i), DType::F32, {kThreads}));
        for (int64_t i = 0; i < iters; ++i) {
          cc::Idx c = s.let(t + i * kThreads, "c");
          for (int64_t q = 0; q < n; ++q) held[i * per + q](t) = dout(tok, q, c);
          held[i * per + n](t) = cc::to_f32(f(tok, c));
          for (int64_t p = 0; p < n; ++p) held[i * per + n + 1 + p](t) = x(tok, p, c);
        }
        for (int64_t i = 0; i < iters; ++i) {
          cc::Idx c = s.let(t + i * kThreads, "c");
          column(
              t, c,
              [&](int what, int64_t j) {
                const int64_t at = what == 0 ? j : what == 1 ? n : n + 1 + j;
                return s.let(held[i * per + at](t), what == 0 ? "dout" : what == 1 ? "f" : "x");
              },
              [&](int64_t q) { return pq[q]; },
              [&](int64_t p, int64_t q) { return cpq[p * n + q]; });
        }
      } else {
        s.serial(cc::ceildiv(dd, cc::Val(kThreads)), [&](cc::Idx i) {
          cc::Idx c = s.let(i * kThreads + t, "c");
          s.if_then(c < dd, [&] {
            column(
                t, c,
                [&](int what, int64_t j) {
                  return what == 0   ? s.let(dout(tok, j, c), "dout")
                         : what == 1 ? s.let(cc::to_f32(f(tok, c)), "f")
                                     : s.let(x(tok, j, c), "x");
                },
                [&](int64_t q) { return cc::Val(post(tok, q)); },
                [&](int64_t p, int64_t q) { return cc::Val(comb(tok, p, q)); });
          });
        });
      }
      for (int64_t o = 0; o < count; ++o) part(cc::Val(o), t) = acc[o](t);
    });
    s.barrier();
    // Each sum: its partials in thread order, from -0.
    cc::Buf totp = s.alloc_fragment("totp", DType::F32, {n});
    s.parallel(nv, [&](cc::Idx q) {
      totp(q) = -0.0f;
      s.serial(cc::Val(int64_t{kThreads}), [&](cc::Idx j) { totp(q) = totp(q) + part(q, j); });
      dpost(tok, q) = totp(q);
    });
    cc::Buf totc = s.alloc_fragment("totc", DType::F32, {n, n});
    s.parallel(nv, nv, [&](cc::Idx p, cc::Idx q) {
      totc(p, q) = -0.0f;
      s.serial(cc::Val(int64_t{kThreads}),
               [&](cc::Idx j) { totc(p, q) = totc(p, q) + part(nv + p * nv + q, j); });
      dcomb(tok, p, q) = totc(p, q);
    });
  });
  return kb.build();
}

std::string name_of(const std::string& kernel, int64_t n) {
  return kernel + "_n" + std::to_string(n);
}

// Appends the matmul family's expansion of c = a·op(b) (a [T, K] f32, b the op's input `b_slot`
// [K, M], or [M, K] read transposed) to `ex`, its scratch after ex's, its operands bound to a,
// the input and c.
void append_matmul(OpExpansion& ex, const TensorType& a, const TensorType& b, bool tb,
                   KernelArg a_arg, int b_slot, KernelArg c_arg) {
  const OpSchema* matmul = op_registry().find("matmul");
  const std::vector<TensorType> mm_in = {a, b};
  const Attrs mm_attrs = {{"transpose_a", false}, {"transpose_b", tb}};
  append_expansion(ex, matmul->expand(mm_in, matmul->infer(mm_in, mm_attrs), mm_attrs),
                   {a_arg, input_slot(b_slot)}, {c_arg});
}

ExpandFn expand_hc_pre(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    const int64_t t = in[0].shape[0], n = in[0].shape[1], d = in[0].shape[2];
    // Scratch: mix = x·fn [T, M] (the op's output instead when it gives it), pre [T, n], the
    // sums of squares [T, 1].
    OpExpansion ex{
        .scratch = {{DType::F32, {t, mixes_of(n)}}, {DType::F32, {t, n}}, {DType::F32, {t, 1}}}};
    const KernelArg mix = out.size() > 3 ? output_slot(3) : scratch_slot(0);
    append_matmul(ex, {DType::F32, {t, n * d}}, in[1], false, input_slot(0), 1, mix);
    const std::string sums = name_of("hc_token_sums", n),
                      split = name_of(
                          SinkhornLanes::fits(n) ? "hc_pre_split_lanes" : "hc_pre_split", n),
                      combine = name_of("hc_pre_combine", n);
    ex.calls.push_back(
        {.kernel = cache->get(sums, [&] { return build_hc_token_sums(n, false, sums); }),
         .buffers = {input_slot(0), scratch_slot(2)},
         .dims = {t, d, n * d}});
    ex.calls.push_back({.kernel = cache->get(split,
                                             [&] {
                                               return SinkhornLanes::fits(n)
                                                          ? build_hc_pre_split_lanes(n, split)
                                                          : build_hc_pre_split(n, split);
                                             }),
                        .buffers = {scratch_slot(2), mix, input_slot(2), input_slot(3),
                                    scratch_slot(1), output_slot(1), output_slot(2)},
                        .dims = {t, n * d, steps_of(attrs)},
                        .scalars = {attr_float(attrs, "eps"), attr_float(attrs, "norm_eps")}});
    ex.calls.push_back(
        {.kernel = cache->get(combine, [&] { return build_hc_pre_combine(n, combine); }),
         .buffers = {scratch_slot(1), input_slot(0), output_slot(0)},
         .dims = {t, d}});
    return ex;
  };
}

ExpandFn expand_hc_pre_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const int64_t t = in[0].shape[0], n = in[0].shape[1], d = in[0].shape[2], m = mixes_of(n);
    const bool lanes = SinkhornLanes::fits(n);
    const bool addend = in.size() > 8;
    const std::string mix = name_of(lanes ? "hc_pre_grad_mix_lanes" : "hc_pre_grad_mix", n),
                      dx = name_of(addend ? "hc_pre_grad_dx_add" : "hc_pre_grad_dx", n);
    // Scratch: coef [T, n + 1], dxf = dmix·fnᵀ [T, n·D], sums [T, 1 + n], Sinkhorn's tape
    // [STEPS, n² + n, T] (or [STEPS, 2, T·n²] for the lane kernel).
    OpExpansion ex{.scratch = {{DType::F32, {t, n + 1}},
                               {DType::F32, {t, n * d}},
                               {DType::F32, {t, n + 1}},
                               lanes ? TensorType{DType::F32,
                                                  {steps_of(attrs), 2, t * SinkhornLanes::group(n)}}
                                     : TensorType{DType::F32, {steps_of(attrs), n * n + n, t}}}};
    const std::string sums = name_of("hc_token_sums_dy", n);
    ex.calls.push_back(
        {.kernel = cache->get(sums, [&] { return build_hc_token_sums(n, true, sums); }),
         .buffers = {input_slot(0), input_slot(4), scratch_slot(2)},
         .dims = {t, d, n * d}});
    ex.calls.push_back({.kernel = cache->get(mix,
                                             [&] {
                                               return lanes ? build_hc_pre_grad_mix_lanes(n, mix)
                                                            : build_hc_pre_grad_mix(n, mix);
                                             }),
                        .buffers = {scratch_slot(2), input_slot(7), input_slot(2), input_slot(3),
                                    input_slot(5), input_slot(6), output_slot(1), output_slot(2),
                                    scratch_slot(0), scratch_slot(3)},
                        .dims = {t, n * d, steps_of(attrs)},
                        .scalars = {attr_float(attrs, "eps"), attr_float(attrs, "norm_eps")}});
    append_matmul(ex, {DType::F32, {t, m}}, in[1], true, output_slot(1), 1, scratch_slot(1));
    ex.calls.push_back(
        {.kernel = cache->get(dx, [&] { return build_hc_pre_grad_dx(n, dx, addend); }),
         .buffers = {scratch_slot(0), input_slot(0), input_slot(4), scratch_slot(1),
                     output_slot(0)},
         .dims = {t, d}});
    if (addend) ex.calls.back().buffers.insert(ex.calls.back().buffers.end() - 1, input_slot(8));
    return ex;
  };
}

// hc_post_grad's fixed-D kernel holds this many values a thread at most (n = 4, D = 1024: 72).
constexpr int64_t kFixedPostGradValues = 72;

ExpandFn expand_hc_post(std::shared_ptr<KernelCache> cache, bool grad) {
  return [cache, grad](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                       const Attrs&) {
    const int64_t t = in[1].shape[0], n = in[1].shape[1], d = in[1].shape[2];
    const DType fdt = in[0].dtype;
    const bool tiled = !grad && d % 4 == 0;
    // The backward with D constant where a thread's values fit in registers.
    const bool fixed =
        grad && d % kThreads == 0 && (d / kThreads) * (2 * n + 1) <= kFixedPostGradValues;
    const std::string name =
        name_of(grad    ? fixed ? "hc_post_grad_d" + std::to_string(d) : "hc_post_grad"
                : tiled ? "hc_post_cols" + std::to_string(kPostCols)
                        : "hc_post",
                n) +
        (fdt == DType::F32 ? "" : "_f" + std::string(dtype_name(fdt)));
    KernelCall call{.kernel = cache->get(name,
                                         [&] {
                                           return grad    ? build_hc_post_grad(n, fdt, name,
                                                                            fixed ? d : 0)
                                                  : tiled ? build_hc_post_tiled(n, fdt, name)
                                                          : build_hc_post(n, fdt, name);
                                         }),
                    .dims = fixed ? std::vector<int64_t>{t} : std::vector<int64_t>{t, d}};
    call.buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3)};
    if (grad)
      for (KernelArg a :
           {input_slot(4), output_slot(0), output_slot(1), output_slot(2), output_slot(3)})
        call.buffers.push_back(a);
    else
      call.buffers.push_back(output_slot(0));
    return OpExpansion{.calls = {call}};
  };
}

std::vector<AttrSpec> hc_pre_attrs() {
  return {{.name = "iters",
           .kind = AttrKind::Int,
           .default_value = AttrValue{int64_t{20}},
           .doc = "Sinkhorn rounds: one column normalisation, then iters - 1 row-and-column"},
          {.name = "eps",
           .kind = AttrKind::Float,
           .default_value = AttrValue{1e-6},
           .doc = "added to pre, to the softmax and to every Sinkhorn sum"},
          {.name = "norm_eps",
           .kind = AttrKind::Float,
           .default_value = AttrValue{1e-6},
           .doc = "added to the streams' mean square",
           .positive = true}};
}

std::vector<AttrSpec> hc_pre_forward_attrs() {
  std::vector<AttrSpec> attrs = hc_pre_attrs();
  attrs.push_back({.name = "mix",
                   .kind = AttrKind::Bool,
                   .default_value = AttrValue{false},
                   .doc =
                       "also give mix = x·fn [T, M] (no gradient), which the backward then reads "
                       "instead of computing the GEMM again"});
  return attrs;
}

}  // namespace

void register_hc(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "hc_pre",
                .doc =
                    "mHC pre (V4): from streams x [T, n, D], y = Σₙ preₙ·xₙ [T, D], post "
                    "[T, n] and comb [T, n, n] (sinkhorn) from one projection fn [n·D, n² + 2n] "
                    "of x scaled by rsqrt(mean(x²) + norm_eps), by scale [3], plus base; "
                    "f32, n <= 8; with mix, also mix = x·fn [T, M] (no gradient; the backward "
                    "reads it instead of recomputing the GEMM); gradient hc_pre_grad and matmuls",
                .inputs = {"x", "fn", "scale", "base"},
                .outputs = {"y", "post", "comb", "mix"},
                .optional_outputs = 1,
                .attrs = hc_pre_forward_attrs(),
                .dtypes = {DType::F32},
                .infer = infer_hc_pre,
                .reference = ref_hc_pre,
                .gradient = grad_hc_pre,
                .detached_outputs = {3},
                .expand = expand_hc_pre(cache),
                .tests = hc_pre_tests()});
  registry.add({.name = "hc_pre_grad",
                .doc = "hc_pre's backward from (x, fn, scale, base, dy, dpost, dcomb) and the "
                       "forward's mix = x·fn: dx (plus addend: x's other gradient), dmix (dfn = "
                       "xᵀ·dmix), and per token dab [T, M + 3]: da (dbase's terms) then dscale's "
                       "three; Sinkhorn recomputed",
                .inputs = {"x", "fn", "scale", "base", "dy", "dpost", "dcomb", "mix", "addend"},
                .optional_inputs = 1,
                .addend_input = 8,
                .outputs = {"dx", "dmix", "dab"},
                .attrs = hc_pre_attrs(),
                .dtypes = {DType::F32},
                .infer = infer_hc_pre_grad,
                .reference = ref_hc_pre_grad,
                .expand = expand_hc_pre_grad(cache),
                .tests = hc_pre_grad_tests()});
  registry.add({.name = "hc_post",
                .doc = "mHC post (V4): out[t, q] = post[t, q]·f[t] + Σ_p comb[t, p, q]·x[t, p] "
                       "from f [T, D], streams x [T, n, D], post [T, n], comb [T, n, n]; f32 but "
                       "for f, read exactly in any float dtype",
                .inputs = {"f", "x", "post", "comb"},
                .outputs = {"out"},
                .input_dtypes = {{1, DType::F32}, {2, DType::F32}, {3, DType::F32}},
                .output_dtypes = {{0, DType::F32}},
                .infer = infer_hc_post,
                .reference = ref_hc_post,
                .gradient = grad_hc_post,
                .expand = expand_hc_post(cache, false),
                .tests = hc_post_tests()});
  registry.add(
      {.name = "hc_post_grad",
       .doc = "(df, dx, dpost, dcomb) of hc_post from (f, x, post, comb, dout); df in "
              "f's dtype",
       .inputs = {"f", "x", "post", "comb", "dout"},
       .outputs = {"df", "dx", "dpost", "dcomb"},
       .input_dtypes = {{1, DType::F32}, {2, DType::F32}, {3, DType::F32}, {4, DType::F32}},
       .output_dtypes = {{1, DType::F32}, {2, DType::F32}, {3, DType::F32}},
       .infer = infer_hc_post_grad,
       .reference = ref_hc_post_grad,
       .expand = expand_hc_post(cache, true),
       .tests = hc_post_grad_tests()});
}

}  // namespace tilerun::kernels
