// compress_pool: V4's compressor pooling in one op. x [C, M, 2L] holds, for each window c of M
// tokens, the candidates' values (the first L channels) and their gate logits (the last L, as
// one projection to [values | gates] gives them); entry c pools the 2M candidates of windows
// c - 1 and c with a softmax per channel over the gates plus a learned position bias [2M, L]:
//
//   y[c, l] = Σⱼ wⱼ·vⱼ,  w = softmax over j of (gateⱼ + bias[j, l]),
//   candidate j < M: token j of window c - 1 (absent for c = 0), j >= M: token j - M of window c.
//
// Its backward op compress_pool_grad gives dx (both halves) and dbias. Where the composed form
// took two with_prev, an add, a softmax, a mul and a sum forward (eight kernels backward), this
// is one kernel forward and two backward.
//
// Kernels: `compress_pool` a thread per (entry, channel), the 2M candidates in registers, f32
// throughout (one rounding, at the store); absent candidates are selected out (weight 0, no
// term), never read past the tensor (the row index is clamped). `compress_pool_grad` a thread
// per (chunk of entries, channel): for each entry c of its chunk it recomputes windows c
// and c + 1 (the two windows that read window c's tokens), writes dx for window c's tokens, and
// adds window c's logit gradients into its bias partial [P, 2M, L] (f32 scratch); then
// `compress_pool_bias_sum` (rmsnorm's dgamma sum) adds the P partials in a fixed order. No
// atomics: the same bits every run.
#include <algorithm>
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/norm_util.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;
constexpr int64_t kMaxChunk = 8;   // entries a backward thread walks (and one bias partial)
constexpr int64_t kMaxWindow = 8;  // M: the candidates live in registers

// ---- Shapes --------------------------------------------------------------------------------

struct PoolShape {
  int64_t c, m, l;
};

PoolShape shape_of(const TensorType& x, const TensorType& bias) {
  expect_float(x, "x");
  expect_rank(x, 3, "x");
  const int64_t c = x.shape[0], m = x.shape[1], two_l = x.shape[2];
  if (m < 1 || m > kMaxWindow || two_l % 2 != 0 || c < 1)
    throw ShapeError("input 'x' is " + to_string(x) + ", expected [C, M, 2L] with 1 <= M <= " +
                     std::to_string(kMaxWindow) + " (values, then gate logits)");
  const int64_t l = two_l / 2;
  bool ok = bias.shape.size() >= 2 && bias.shape[bias.shape.size() - 2] == 2 * m &&
            bias.shape.back() == l;
  for (size_t i = 0; ok && i + 2 < bias.shape.size(); ++i) ok = bias.shape[i] == 1;
  if (!ok)
    throw ShapeError("input 'bias' is " + to_string(bias) + ", expected [" + std::to_string(2 * m) +
                     ", " + std::to_string(l) +
                     "] (one per candidate and channel; leading 1s allowed) for x " + to_string(x));
  if (bias.dtype != x.dtype)
    throw ShapeError("input 'bias' is " + to_string(bias) + ", expected x's dtype");
  return {c, m, l};
}

std::vector<TensorType> infer_pool(const std::vector<TensorType>& in, const Attrs&) {
  const PoolShape p = shape_of(in[0], in[1]);
  return {{in[0].dtype, {p.c, p.l}}};
}

std::vector<TensorType> infer_pool_grad(const std::vector<TensorType>& in, const Attrs&) {
  const PoolShape p = shape_of(in[0], in[1]);
  expect_same(in[2], "dy", {in[0].dtype, {p.c, p.l}}, "y");
  return {in[0], in[1]};
}

// ---- References (double) ---------------------------------------------------------------------

// Window c's candidates at channel l: their weights (0 where absent) and values.
struct RefWindow {
  std::vector<double> w, v;
};

RefWindow ref_window(const RefTensor& x, const RefTensor& bias, const PoolShape& p, int64_t c,
                     int64_t l) {
  RefWindow win{std::vector<double>(2 * p.m, 0.0), std::vector<double>(2 * p.m, 0.0)};
  std::vector<double> logit(2 * p.m, -INFINITY);
  double top = -INFINITY;
  for (int64_t j = 0; j < 2 * p.m; ++j) {
    const int64_t row = j < p.m ? c - 1 : c, i = j % p.m;
    if (row < 0) continue;
    win.v[j] = x.data[(row * p.m + i) * 2 * p.l + l];
    logit[j] = x.data[(row * p.m + i) * 2 * p.l + p.l + l] + bias.data[j * p.l + l];
    top = std::max(top, logit[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < 2 * p.m; ++j) sum += logit[j] == -INFINITY ? 0 : std::exp(logit[j] - top);
  for (int64_t j = 0; j < 2 * p.m; ++j)
    win.w[j] = logit[j] == -INFINITY ? 0 : std::exp(logit[j] - top) / sum;
  return win;
}

std::vector<RefTensor> ref_pool(const std::vector<RefTensor>& in, const Attrs&) {
  const PoolShape p = shape_of({DType::F32, in[0].shape}, {DType::F32, in[1].shape});
  RefTensor y = ref_zeros({p.c, p.l});
  for (int64_t c = 0; c < p.c; ++c)
    for (int64_t l = 0; l < p.l; ++l) {
      const RefWindow win = ref_window(in[0], in[1], p, c, l);
      for (int64_t j = 0; j < 2 * p.m; ++j) y.data[c * p.l + l] += win.w[j] * win.v[j];
    }
  return {y};
}

// dvⱼ = wⱼ·dy, dlogitⱼ = wⱼ·(vⱼ·dy − Σₖ wₖ·vₖ·dy), each landing on the token it came from.
std::vector<RefTensor> ref_pool_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const PoolShape p = shape_of({DType::F32, in[0].shape}, {DType::F32, in[1].shape});
  RefTensor dx = ref_zeros(in[0].shape), dbias = ref_zeros(in[1].shape);
  for (int64_t c = 0; c < p.c; ++c)
    for (int64_t l = 0; l < p.l; ++l) {
      const RefWindow win = ref_window(in[0], in[1], p, c, l);
      const double dy = in[2].data[c * p.l + l];
      double dot = 0;
      for (int64_t j = 0; j < 2 * p.m; ++j) dot += win.w[j] * win.v[j] * dy;
      for (int64_t j = 0; j < 2 * p.m; ++j) {
        const int64_t row = j < p.m ? c - 1 : c, i = j % p.m;
        if (row < 0) continue;
        const double dlogit = win.w[j] * (win.v[j] * dy - dot);
        dx.data[(row * p.m + i) * 2 * p.l + l] += win.w[j] * dy;
        dx.data[(row * p.m + i) * 2 * p.l + p.l + l] += dlogit;
        dbias.data[j * p.l + l] += dlogit;
      }
    }
  return {dx, dbias};
}

std::vector<GradOp> grad_pool(const std::vector<TensorType>&, const Attrs&,
                              const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1]) return {};
  return {{"compress_pool_grad",
           {"x0", "x1", "dy0"},
           {needs[0] ? "dx0" : "unused_dx", needs[1] ? "dx1" : "unused_dbias"},
           {}}};
}

// ---- Kernels -------------------------------------------------------------------------------

// Parameters shared by the kernels: x [C, M, 2L], bias [2M, L]; dims C, L.
struct PoolParams {
  cc::Dim c, l;
  cc::Buf x, bias;
};

PoolParams declare_pool(cc::KernelBuilder& kb, DType dtype, int64_t m) {
  cc::Dim c = kb.dim("C"), l = kb.dim("L");
  return {c, l, kb.input("x", dtype, {c, cc::Val(m), 2 * l}),
          kb.input("bias", dtype, {cc::Val(2 * m), l})};
}

// Window `c`'s candidates at channel `col` in registers: weights w (0 where absent) and values v.
// `has_prev`: window c - 1 exists (c > 0); its rows are read at max(c - 1, 0), in range either
// way, and selected out when absent (weight and value 0, whatever the row holds: an inf or NaN
// there reaches nothing, as in the reference). The weights are exp(gate + bias - max) / Σ, in j
// order.
struct Window {
  std::vector<cc::Val> w, v;
};

Window window_at(cc::Scope& s, const PoolParams& p, int64_t m, const cc::Val& c,
                 const cc::Val& has_prev, const cc::Val& col) {
  cc::Val prev = s.let(cc::max(c - 1, cc::Val(int64_t{0})), "prev");
  std::vector<cc::Val> logit;
  Window win;
  for (int64_t j = 0; j < 2 * m; ++j) {
    const cc::Val row = j < m ? prev : c;
    const int64_t i = j % m;
    // An absent candidate's value is 0 (with its weight 0, no term: not 0·inf = NaN).
    cc::Val v = cc::to_f32(p.x(row, i, col));
    win.v.push_back(s.let(j < m ? cc::select(has_prev, v, cc::Val(0.0f)) : v, "v"));
    logit.push_back(
        s.let(cc::to_f32(p.x(row, i, p.l + col)) + cc::to_f32(p.bias(j, col)), "logit"));
  }
  cc::Val own_top = logit[m];
  for (int64_t j = m + 1; j < 2 * m; ++j) own_top = cc::max(own_top, logit[j]);
  cc::Val prev_top = logit[0];
  for (int64_t j = 1; j < m; ++j) prev_top = cc::max(prev_top, logit[j]);
  cc::Val top = s.let(cc::select(has_prev, cc::max(prev_top, own_top), own_top), "top");
  std::vector<cc::Val> e;
  cc::Val sum = cc::Val(0.0f);
  for (int64_t j = 0; j < 2 * m; ++j) {
    cc::Val ej = cc::exp(logit[j] - top);
    e.push_back(s.let(j < m ? cc::select(has_prev, ej, cc::Val(0.0f)) : ej, "e"));
    sum = sum + e.back();
  }
  cc::Val total = s.let(sum, "total");
  for (int64_t j = 0; j < 2 * m; ++j) win.w.push_back(s.let(e[j] / total, "w"));
  return win;
}

std::string suffix(int64_t m, DType dtype) {
  return "_m" + std::to_string(m) + "_" + std::string(dtype_name(dtype));
}

// Parameters x, bias, y [C, L]; dims C, L. Grid (C, L / kThreads).
cc::Kernel build_pool(DType dtype, int64_t m) {
  cc::KernelBuilder kb("compress_pool" + suffix(m, dtype));
  const PoolParams p = declare_pool(kb, dtype, m);
  cc::Buf y = kb.output("y", dtype, {p.c, p.l});
  kb.body({p.c, cc::ceildiv(p.l, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx c = s.let(s.block_idx(0), "c"), l0 = s.let(s.block_idx(1) * kThreads, "l0");
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx col = s.let(l0 + t, "col");
      s.if_then(col < p.l, [&] {
        const Window win = window_at(s, p, m, c, c > 0, col);
        cc::Val acc = cc::Val(0.0f);
        for (int64_t j = 0; j < 2 * m; ++j) acc = acc + win.w[j] * win.v[j];
        y(c, col) = acc;
      });
    });
  });
  return kb.build();
}

// Window c's gradients at its candidates: dvⱼ = wⱼ·dy, dlogitⱼ = wⱼ·(vⱼ·dy − Σₖ wₖ·vₖ·dy).
struct WindowGrad {
  std::vector<cc::Val> dv, dlogit;
};

WindowGrad window_grad(cc::Scope& s, const Window& win, const cc::Val& dy, int64_t m) {
  std::vector<cc::Val> t;
  cc::Val dot = cc::Val(0.0f);
  for (int64_t j = 0; j < 2 * m; ++j) {
    t.push_back(s.let(win.v[j] * dy, "t"));
    dot = dot + win.w[j] * t.back();
  }
  cc::Val d = s.let(dot, "dot");
  WindowGrad g;
  for (int64_t j = 0; j < 2 * m; ++j) {
    g.dv.push_back(s.let(win.w[j] * dy, "dv"));
    g.dlogit.push_back(s.let(win.w[j] * (t[j] - d), "dl"));
  }
  return g;
}

// Entries a backward thread walks: one while a thread per (entry, channel) stays under 2^17
// threads (the walk is a serial chain of dependent loads and exps, so threads are what hide its
// latency), up to kMaxChunk past that (fewer bias partials to add).
int64_t chunk_of(const PoolShape& p) {
  int64_t chunk = 1;
  while (chunk < kMaxChunk && p.c * p.l / (2 * chunk) >= (int64_t{1} << 17)) chunk *= 2;
  return chunk;
}

std::string grad_name(int64_t chunk, int64_t m, DType dtype) {
  return "compress_pool_grad_c" + std::to_string(chunk) + suffix(m, dtype);
}

// Parameters x, bias, dy [C, L], dx [C, M, 2L], part [P, 2M, L] (f32 scratch); dims C, L, P.
// Grid (P, L / kThreads): thread (p, col) walks entries p·chunk .. p·chunk + chunk - 1.
cc::Kernel build_pool_grad(DType dtype, int64_t m, int64_t chunk) {
  cc::KernelBuilder kb(grad_name(chunk, m, dtype));
  const PoolParams p = declare_pool(kb, dtype, m);
  cc::Dim parts = kb.dim("P");
  cc::Buf dy = kb.input("dy", dtype, {p.c, p.l});
  cc::Buf dx = kb.output("dx", dtype, {p.c, cc::Val(m), 2 * p.l});
  cc::Buf part = kb.output("part", DType::F32, {parts, cc::Val(2 * m), p.l});
  kb.body({parts, cc::ceildiv(p.l, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx part_idx = s.let(s.block_idx(0), "part"), l0 = s.let(s.block_idx(1) * kThreads, "l0");
    // A partial per candidate slot (a fragment is indexed by its thread alone).
    std::vector<cc::Buf> acc;
    for (int64_t j = 0; j < 2 * m; ++j)
      acc.push_back(s.alloc_fragment("acc" + std::to_string(j), DType::F32, {kThreads}));
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx col = s.let(l0 + t, "col");
      s.if_then(col < p.l, [&] {
        for (int64_t j = 0; j < 2 * m; ++j) acc[j](t) = cc::Val(0.0f);
        s.serial(chunk, [&](cc::Idx k) {
          cc::Idx c = s.let(part_idx * chunk + k, "c");
          s.if_then(c < p.c, [&] {
            // Window c (its own tokens' second-half terms, the bias partial) and window c + 1
            // (its first-half terms on window c's tokens; none past the last window, whose
            // reads are clamped to it and selected out).
            const Window own = window_at(s, p, m, c, c > 0, col);
            const WindowGrad g = window_grad(s, own, cc::to_f32(dy(c, col)), m);
            cc::Val has_next = s.let(c + 1 < p.c, "has_next");
            cc::Idx next = s.let(cc::min(c + 1, p.c - 1), "next");
            const Window after = window_at(s, p, m, next, next > 0, col);
            const WindowGrad gn = window_grad(s, after, cc::to_f32(dy(next, col)), m);
            for (int64_t i = 0; i < m; ++i) {
              dx(c, i, col) = g.dv[m + i] + cc::select(has_next, gn.dv[i], cc::Val(0.0f));
              dx(c, i, p.l + col) =
                  g.dlogit[m + i] + cc::select(has_next, gn.dlogit[i], cc::Val(0.0f));
            }
            // The bias partial: window c's logit gradients (none for absent candidates).
            cc::Val has_prev = s.let(c > 0, "has_prev");
            for (int64_t j = 0; j < 2 * m; ++j)
              acc[j](t) = acc[j](t) +
                          (j < m ? cc::select(has_prev, g.dlogit[j], cc::Val(0.0f)) : g.dlogit[j]);
          });
        });
        for (int64_t j = 0; j < 2 * m; ++j) part(part_idx, j, col) = acc[j](t);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_pool(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const PoolShape p = shape_of(in[0], in[1]);
    const DType dt = in[0].dtype;
    KernelCall call{.kernel = cache->get(kernel_key("compress_pool" + suffix(p.m, dt), dt),
                                         [&] { return build_pool(dt, p.m); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {p.c, p.l}};
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_pool_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const PoolShape p = shape_of(in[0], in[1]);
    const DType dt = in[0].dtype;
    const int64_t chunk = chunk_of(p), parts = (p.c + chunk - 1) / chunk, n = 2 * p.m * p.l;
    const std::string grad = grad_name(chunk, p.m, dt);
    OpExpansion ex{.scratch = {{DType::F32, {parts, 2 * p.m, p.l}}}};
    ex.calls.push_back(
        {.kernel =
             cache->get(kernel_key(grad, dt), [&] { return build_pool_grad(dt, p.m, chunk); }),
         .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0), scratch_slot(0)},
         .dims = {p.c, p.l, parts}});
    ex.calls.push_back({.kernel = cache->get(
                            kernel_key("compress_pool_bias_sum", dt),
                            [&] { return build_partial_column_sum(dt, "compress_pool_bias_sum"); }),
                        .buffers = {scratch_slot(0), output_slot(1)},
                        .dims = {parts, n}});
    return ex;
  };
}

}  // namespace

void register_compress_pool(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "compress_pool",
       .doc = "y[c] = Σⱼ softmaxⱼ(gateⱼ + bias[j])·valueⱼ over the 2M candidates of windows c - 1 "
              "and c (x [C, M, 2L]: values, then gate logits; bias [2M, L]): V4's compressor",
       .inputs = {"x", "bias"},
       .outputs = {"y"},
       .infer = infer_pool,
       .reference = ref_pool,
       .gradient = grad_pool,
       .expand = expand_pool(cache),
       // V4's window (M = 4) over 512 channels and a partial block of channels; M = 1 and 3;
       // a bias with its leading 1; a single window (C = 1).
       .tests = {.kernel = {{.shapes = {{9, 4, 2 * 160}, {1, 8, 160}}},
                            {.shapes = {{5, 3, 2 * 7}, {6, 7}}},
                            {.shapes = {{3, 1, 2 * 130}, {2, 130}}},
                            {.shapes = {{1, 4, 2 * 5}, {8, 5}}}},
                 .gradient = {{.shapes = {{3, 2, 2 * 3}, {1, 4, 3}}},
                              {.shapes = {{2, 3, 2 * 2}, {6, 2}}}},
                 // Entry 1 weighs its candidates (values 1, 3) by 1/2 each; an inf value stays
                 // inf (entry 0 has no candidate before it: no 0·inf term).
                 .examples = {{.inputs = {{{2, 1, 2}, {1, 0, 3, 0}}, {{2, 1}, {0, 0}}},
                               .outputs = {{{2, 1}, {1, 2}}}},
                              {.inputs = {{{2, 1, 2}, {kInf(), 0, 3, 0}}, {{2, 1}, {0, 0}}},
                               .outputs = {{{2, 1}, {kInf(), kInf()}}}}}}});
  registry.add(
      {.name = "compress_pool_grad",
       .doc = "dx (values and gates) and dbias of compress_pool from dy: each candidate's "
              "gradient on the token it came from; dbias summed over the windows in order",
       .inputs = {"x", "bias", "dy"},
       .outputs = {"dx", "dbias"},
       .infer = infer_pool_grad,
       .reference = ref_pool_grad,
       .expand = expand_pool_grad(cache),
       // V4's window over a partial block of channels; 261 windows of 1024 channels
       // (two entries a thread, the last chunk partial); M = 3; a single window.
       .tests = {.kernel = {{.shapes = {{19, 4, 2 * 160}, {1, 8, 160}, {19, 160}}},
                            {.shapes = {{261, 1, 2 * 1024}, {2, 1024}, {261, 1024}}},
                            {.shapes = {{5, 3, 2 * 7}, {6, 7}, {5, 7}}},
                            {.shapes = {{1, 4, 2 * 5}, {8, 5}, {1, 5}}}},
                 // compress_pool's example with dy = 1: entry 1 weighs its candidates
                 // (values 1, 3) by 1/2 each, so their gates get ±1/2.
                 .examples = {
                     {.inputs = {{{2, 1, 2}, {1, 0, 3, 0}}, {{2, 1}, {0, 0}}, {{2, 1}, {1, 1}}},
                      .outputs = {{{2, 1, 2}, {1.5, -0.5, 0.5, 0.5}}, {{2, 1}, {-0.5, 0.5}}}}}}});
}

}  // namespace tilerun::kernels
