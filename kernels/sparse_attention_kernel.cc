// The per-token kernels (forward, backward A) run one block of kThreads per token: the token's K
// key ids staged once, then E in chunks of kCols columns, each chunk of the K gathered kv rows
// staged in shared memory and shared by all H heads (MQA: one kv head), a thread per (head, key)
// score accumulating its dot product across the chunks in column order. The softmax runs per
// head over the shared [H, K] scores (max, then exp in parallel, then the sum in key order after
// the sink's term); P·V (and dS·K for dq) takes a second pass over the chunks, a thread per
// (head, column) summing over the keys in key order. Kernel B owns dkv: a block per (key,
// column tile), a thread per column, adding the (t, j) pairs counting_sort lists for the key in
// that order (each pair's heads in order), so no store is shared and nothing is atomic.
// These are the SIMT kernels (f32, and shapes the tensor cores do not take); 16-bit q and kv of
// a fitting shape take the tensor-core kernels of sparse_attention_tc.cc instead.
#include "kernels/sparse_attention_kernel.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "compiler/ir/builder.h"
#include "compiler/ir/layout.h"
#include "kernels/reduce_kernel.h"
#include "kernels/sparse_attention_tc.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace sparse_attention_detail {

cc::Val nan_f32() { return cc::Val(std::numeric_limits<float>::quiet_NaN()); }

std::string kernel_name(const std::string& base, DType dt, const SparseAttentionShape& sh) {
  return base + "_h" + std::to_string(sh.h) + "_k" + std::to_string(sh.k) +
         (sh.w > 0 ? "_w" + std::to_string(sh.w) : "") +
         (sh.off > 0 ? "_o" + std::to_string(sh.off) : "") + "_" + std::string(dtype_name(dt));
}

cc::Val slot_score(const cc::Val& id, const cc::Val& z) {
  return cc::select(id >= 0, z,
                    cc::select(id == i64(kEmptySlot),
                               cc::Val(-std::numeric_limits<float>::infinity()), nan_f32()));
}

// ids[j]: the window's keys t - j (kEmptySlot past the first key), then off + idx[t, j - W], or
// -1 for an id outside [0, S - off). Barrier after it.
void stage_token_ids(cc::Scope& s, const SparseAttentionShape& sh, const cc::Idx& t,
                     const cc::Buf& ids, const cc::Buf& idx, const cc::Val& s_dim) {
  s.parallel(sh.k - sh.w, [&](cc::Idx j) {
    cc::Val id = s.let(cc::to_i64(idx(t, j)), "id");
    if (sh.off > 0) {
      cc::Val key = s.let(id + sh.off, "key");
      ids(sh.w + j) = cc::to_i32(cc::select(id >= 0 && key < s_dim, key, i64(-1)));
    } else {
      ids(sh.w + j) = cc::to_i32(cc::select(id >= 0 && id < s_dim, id, i64(-1)));
    }
  });
  if (sh.w > 0)
    s.parallel(sh.w,
               [&](cc::Idx j) { ids(j) = cc::to_i32(cc::select(j <= t, t - j, i64(kEmptySlot))); });
  s.barrier();
}

// mass[t, j] = Σ_h p[h, j] in head order, from the probabilities in shared memory.
void write_mass(cc::Scope& s, int64_t h, int64_t k, const cc::Idx& t, const cc::Buf& p,
                const cc::Buf& mass) {
  cc::Buf sum = s.alloc_fragment("mass_sum", DType::F32, {k});
  s.parallel(k, [&](cc::Idx j) {
    sum(j) = p(i64(0), j);
    s.serial(h - 1, [&](cc::Idx hh) { sum(j) = sum(j) + p(hh + 1, j); });
    mass(t, j) = sum(j);
  });
}

TokenParams declare_token_params(cc::KernelBuilder& kb, DType dt, const SparseAttentionShape& sh,
                                 int64_t e_divisible_by) {
  TokenParams p{
      .t = kb.dim("T"), .s = kb.dim("S"), .e = kb.dim("E", {.divisible_by = e_divisible_by})};
  const cc::Val h(sh.h), k(sh.k);
  p.q = kb.input("q", dt, {p.t, h, p.e});
  p.kv = kb.input("kv", dt, {p.s, p.e});
  p.idx = kb.input("idx", DType::I32, {p.t, cc::Val(sh.selected())});
  p.bias = kb.input("bias", dt, {p.t, k});
  p.sink = kb.input("sink", dt, {h});
  return p;
}

void write_sink_and_bias_grads(cc::Scope& s, const SparseAttentionShape& sh, const cc::Idx& t,
                               const TokenGrads& g) {
  s.parallel(cc::Val(sh.h), [&](cc::Idx hh) {
    g.sink_part(t, hh) = -(cc::exp(g.sink(hh) - g.m(hh)) / g.d(hh)) * g.delta(hh);
  });
  s.barrier();
  cc::Buf db = s.alloc_fragment("db", DType::F32, {sh.k});
  s.parallel(cc::Val(sh.k), [&](cc::Idx j) {
    db(j) = g.ds(i64(0), j);
    s.serial(cc::Val(sh.h - 1), [&](cc::Idx hh) { db(j) = db(j) + g.ds(hh + 1, j); });
    g.dbias(t, j) = db(j);
  });
}

ForwardParams declare_forward_params(cc::KernelBuilder& kb, DType dt,
                                     const SparseAttentionShape& sh, bool with_mass,
                                     int64_t e_divisible_by) {
  ForwardParams p;
  p.in = declare_token_params(kb, dt, sh, e_divisible_by);
  p.y = kb.output("y", dt, {p.in.t, cc::Val(sh.h), p.in.e});
  if (with_mass) p.mass = kb.output("mass", dt, {p.in.t, cc::Val(sh.k)});
  p.scale = kb.scalar_f32("scale");
  return p;
}

KeyRun key_run(cc::Scope& s, const cc::Buf& offsets, const cc::Idx& key, const cc::Val& keys,
               const cc::Val& n) {
  cc::Val begin = s.let(cc::min(cc::max(cc::to_i64(offsets(key)), i64(0)), n), "begin");
  cc::Val next = s.let(cc::to_i64(offsets(cc::min(key + 1, keys - 1))), "next");
  cc::Val end = s.let(cc::select(key + 1 < keys, cc::min(cc::max(next, begin), n), n), "end");
  return {begin, end};
}

KeyRun key_run_shifted(cc::Scope& s, const cc::Buf& offsets, const cc::Idx& key,
                       const cc::Val& s_dim, const cc::Val& n, int64_t off) {
  if (off == 0) return key_run(s, offsets, key, s_dim, n);
  const KeyRun r = key_run(s, offsets, cc::max(key - off, i64(0)), s_dim - off, n);
  cc::Val named = s.let(key >= off, "named");
  return {s.let(cc::select(named, r.begin, i64(0)), "sbegin"),
          s.let(cc::select(named, r.end, i64(0)), "send")};
}

}  // namespace sparse_attention_detail

namespace {

using namespace sparse_attention_detail;

constexpr int kThreads = 256;     // per-token kernels
constexpr int64_t kCols = 32;     // the columns of E staged per step (128-byte rows)
constexpr int kKeyThreads = 128;  // kernel B: columns per block

// p [H, K] holds z (NaN for a bad id): each head's row becomes its softmax with sink[h] in the
// denominator; m and d keep each head's max and denominator. Barrier after it.
void softmax_rows(cc::Scope& s, int64_t h, int64_t k, const cc::Buf& p, const cc::Buf& m,
                  const cc::Buf& d, const cc::Buf& sink) {
  s.parallel(h, [&](cc::Idx hh) {
    m(hh) = p(hh, i64(0));
    s.serial(k - 1, [&](cc::Idx j) { m(hh) = cc::max(m(hh), p(hh, j + 1)); });
    m(hh) = cc::max(m(hh), sink(hh));
  });
  s.barrier();
  s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) { p(hh, j) = cc::exp(p(hh, j) - m(hh)); });
  s.barrier();
  s.parallel(h, [&](cc::Idx hh) {
    d(hh) = cc::exp(sink(hh) - m(hh));
    s.serial(k, [&](cc::Idx j) { d(hh) = d(hh) + p(hh, j); });
  });
  s.barrier();
  s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) { p(hh, j) = p(hh, j) / d(hh); });
  s.barrier();
}

// A token's shared tiles and the steps the forward and kernel A share.
struct Token {
  cc::Scope& s;
  int64_t h, k;
  cc::Idx t;
  cc::Buf ids;   // i32 [K]: idx[t, j], or -1 outside [0, S) (its scores become NaN)
  cc::Buf keys;  // f32 [K, kCols]: the chunk's kv rows, padded to kCols + 1 (no bank conflicts)
  cc::Buf p;     // f32 [H, K]: scores, then probabilities
  cc::Buf m, d;  // f32 [H]: each head's max and denominator
  cc::Val rows;  // kv's rows S (stage_ids)

  Token(cc::Scope& scope, int64_t heads, int64_t keys_per_token, cc::Idx token)
      : s(scope), h(heads), k(keys_per_token), t(std::move(token)) {
    ids = s.alloc_shared("ids", DType::I32, {k});
    keys =
        s.alloc_shared("keys", DType::F32, {k, kCols}, cc::make_layout({k, kCols}, {kCols + 1, 1}));
    p = s.alloc_shared("p", DType::F32, {h, k});
    m = s.alloc_shared("m", DType::F32, {h});
    d = s.alloc_shared("d", DType::F32, {h});
  }

  void stage_ids(const SparseAttentionShape& sh, const cc::Buf& idx, const cc::Val& s_dim) {
    stage_token_ids(s, sh, t, ids, idx, s_dim);
    rows = s_dim;
  }

  // keys[j, c] = kv[ids[j], e0 + c] (0 past E or for a bad or empty id). Barrier after it. ids
  // are below S by construction (stage_token_ids); the clamp says so to the analysis, which
  // cannot bound a value read from shared memory.
  void stage_keys(const cc::Buf& kv, const cc::Val& e0, const cc::Val& e_dim) {
    s.parallel(k, kCols, [&](cc::Idx j, cc::Idx c) {
      cc::Val id = s.let(cc::to_i64(ids(j)), "id");
      cc::Idx col = e0 + c;
      s.if_then_else(
          id >= 0 && col < e_dim, [&] { keys(j, c) = kv(cc::min(id, rows - 1), col); },
          [&] { keys(j, c) = 0.0f; });
    });
  }

  // rows[hh, c] = x[t, hh, e0 + c] (0 past E).
  void stage_rows(const cc::Buf& rows, const cc::Buf& x, const cc::Val& e0, const cc::Val& e_dim) {
    s.parallel(h, kCols, [&](cc::Idx hh, cc::Idx c) {
      cc::Idx col = e0 + c;
      s.if_then_else(
          col < e_dim, [&] { rows(hh, c) = x(t, hh, col); }, [&] { rows(hh, c) = 0.0f; });
    });
  }

  // acc[hh, j] += rows[hh, :] · keys[j, :] over the chunk, in column order.
  void dot_chunk(const cc::Buf& acc, const cc::Buf& rows) {
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) {
      s.serial(kCols,
               [&](cc::Idx c) { acc(hh, j) = cc::fma(rows(hh, c), keys(j, c), acc(hh, j)); });
    });
  }

  // p = softmax with the sink of z = scale · acc + bias (NaN for a bad id), per head; m and d
  // keep each head's max and denominator.
  void softmax(const cc::Buf& acc, const cc::Buf& bias, const cc::Buf& sink, const cc::Val& scale) {
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) {
      p(hh, j) = slot_score(cc::to_i64(ids(j)), scale * acc(hh, j) + bias(t, j));
    });
    s.barrier();
    softmax_rows(s, h, k, p, m, d, sink);
  }
  // out[t, hh, col] = factor · Σ_j p[hh, j] · kv[ids[j], col] in key order, over E's chunks.
  void weighted_rows(const cc::Buf& kv, const cc::Buf& out, const cc::Val& e_dim,
                     const cc::Val& factor) {
    cc::Buf sum = s.alloc_fragment("sum", DType::F32, {h, kCols});
    s.serial(cc::ceildiv(e_dim, i64(kCols)), [&](cc::Idx chunk) {
      cc::Val e0 = chunk * kCols;
      stage_keys(kv, e0, e_dim);
      s.barrier();
      s.parallel(h, kCols, [&](cc::Idx hh, cc::Idx c) {
        sum(hh, c) = 0.0f;
        s.serial(k, [&](cc::Idx j) { sum(hh, c) = cc::fma(p(hh, j), keys(j, c), sum(hh, c)); });
        s.if_then(e0 + c < e_dim, [&] { out(t, hh, e0 + c) = factor * sum(hh, c); });
      });
      s.barrier();
    });
  }
};

cc::Kernel build_forward(DType dt, const SparseAttentionShape& sh, bool with_mass) {
  cc::KernelBuilder kb(
      kernel_name(with_mass ? "sparse_attention_mass" : "sparse_attention", dt, sh));
  const ForwardParams fp = declare_forward_params(kb, dt, sh, with_mass);
  const TokenParams& prm = fp.in;
  const cc::Dim t = prm.t, sd = prm.s, e = prm.e;
  const cc::Val h(sh.h), k(sh.k);
  const cc::Buf q = prm.q, kv = prm.kv, idx = prm.idx, bias = prm.bias, sink = prm.sink;
  const cc::Buf y = fp.y, mass = fp.mass;
  const cc::Val scale = fp.scale;
  kb.body({t}, kThreads, [&](cc::Scope& s) {
    Token tok(s, sh.h, sh.k, s.block_idx(0));
    cc::Buf qs = s.alloc_shared("qs", DType::F32, {sh.h, kCols});
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {sh.h, sh.k});
    tok.stage_ids(sh, idx, sd);
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) { acc(hh, j) = 0.0f; });
    s.serial(cc::ceildiv(e, i64(kCols)), [&](cc::Idx chunk) {
      tok.stage_keys(kv, chunk * kCols, e);
      tok.stage_rows(qs, q, chunk * kCols, e);
      s.barrier();
      tok.dot_chunk(acc, qs);
      s.barrier();
    });
    tok.softmax(acc, bias, sink, scale);
    if (with_mass) write_mass(s, sh.h, sh.k, tok.t, tok.p, mass);
    tok.weighted_rows(kv, y, e, cc::Val(1.0f));
  });
  return kb.build();
}

// Kernel A. Parameters q, kv, idx, bias, sink, y, dy, dq, dbias, p, ds, sink_part; T, S, E;
// scale.
cc::Kernel build_grad_token(DType dt, const SparseAttentionShape& sh) {
  cc::KernelBuilder kb(kernel_name("sparse_attention_grad_token", dt, sh));
  const TokenParams prm = declare_token_params(kb, dt, sh);
  const cc::Dim t = prm.t, sd = prm.s, e = prm.e;
  const cc::Val h(sh.h), k(sh.k);
  const cc::Buf q = prm.q, kv = prm.kv, idx = prm.idx, bias = prm.bias, sink = prm.sink;
  cc::Buf y = kb.input("y", dt, {t, h, e}), dy = kb.input("dy", dt, {t, h, e});
  cc::Buf dq = kb.output("dq", dt, {t, h, e}), dbias = kb.output("dbias", dt, {t, k});
  cc::Buf p_out = kb.output("probs", DType::F32, {t, h, k});
  cc::Buf ds_out = kb.output("dscores", DType::F32, {t, h, k});
  cc::Buf sink_part = kb.output("sink_part", DType::F32, {t, h});
  cc::Val scale = kb.scalar_f32("scale");
  kb.body({t}, kThreads, [&](cc::Scope& s) {
    Token tok(s, sh.h, sh.k, s.block_idx(0));
    cc::Buf qs = s.alloc_shared("qs", DType::F32, {sh.h, kCols});
    cc::Buf dys = s.alloc_shared("dys", DType::F32, {sh.h, kCols});
    cc::Buf delta = s.alloc_shared("delta", DType::F32, {sh.h});
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {sh.h, sh.k});
    cc::Buf dp = s.alloc_fragment("dp", DType::F32, {sh.h, sh.k});
    tok.stage_ids(sh, idx, sd);
    // delta[hh] = y[t, hh, :] · dy[t, hh, :] in column order.
    s.parallel(h, [&](cc::Idx hh) {
      delta(hh) = 0.0f;
      s.serial(
          e, [&](cc::Idx c) { delta(hh) = cc::fma(y(tok.t, hh, c), dy(tok.t, hh, c), delta(hh)); });
    });
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) {
      acc(hh, j) = 0.0f;
      dp(hh, j) = 0.0f;
    });
    s.serial(cc::ceildiv(e, i64(kCols)), [&](cc::Idx chunk) {
      tok.stage_keys(kv, chunk * kCols, e);
      tok.stage_rows(qs, q, chunk * kCols, e);
      tok.stage_rows(dys, dy, chunk * kCols, e);
      s.barrier();
      tok.dot_chunk(acc, qs);
      tok.dot_chunk(dp, dys);
      s.barrier();
    });
    tok.softmax(acc, bias, sink, scale);
    // ds = p · (dp - delta), kept in place of p for dbias and dq.
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) {
      cc::Val pv = s.let(tok.p(hh, j), "pv");
      cc::Val ds = s.let(pv * (dp(hh, j) - delta(hh)), "ds");
      p_out(tok.t, hh, j) = pv;
      ds_out(tok.t, hh, j) = ds;
      tok.p(hh, j) = ds;
    });
    write_sink_and_bias_grads(s, sh, tok.t,
                              {.ds = tok.p,
                               .m = tok.m,
                               .d = tok.d,
                               .sink = sink,
                               .delta = delta,
                               .sink_part = sink_part,
                               .dbias = dbias});
    tok.weighted_rows(kv, dq, e, scale);
  });
  return kb.build();
}

// Kernel B: dkv[key, col] = Σ over the key's pairs (t, j) of
// Σ_h (scale · ds[t, h, j] · q[t, h, col] + p[t, h, j] · dy[t, h, col]): first its window's pairs
// (t = key + j for j < W, t < T: a band, no sort needed), then the pairs counting_sort lists for
// it in order[offsets[key] .. end) (idx's slots j = W + i). An entry outside [0, T·(K - W)) or
// naming a slot whose id is not the key makes the row NaN (a wrong inverse is never a silently
// wrong sum). Parameters q, idx, dy, order, offsets, p, ds, dkv; T, S, E; scale.
cc::Kernel build_grad_keys(DType dt, const SparseAttentionShape& sh) {
  cc::KernelBuilder kb(kernel_name("sparse_attention_grad_keys", dt, sh));
  cc::Dim t = kb.dim("T"), sd = kb.dim("S"), e = kb.dim("E");
  const cc::Val h(sh.h), k(sh.k), sel(sh.selected());
  cc::Buf q = kb.input("q", dt, {t, h, e}), idx = kb.input("idx", DType::I32, {t, sel});
  cc::Buf dy = kb.input("dy", dt, {t, h, e});
  cc::Buf order = kb.input("order", DType::I32, {t * sel}),
          offsets = kb.input("offsets", DType::I32, {sd - sh.off});
  cc::Buf p = kb.input("p", DType::F32, {t, h, k}), ds = kb.input("ds", DType::F32, {t, h, k});
  cc::Buf dkv = kb.output("dkv", dt, {sd, e});
  cc::Val scale = kb.scalar_f32("scale");
  kb.body({sd, cc::ceildiv(e, i64(kKeyThreads))}, kKeyThreads, [&](cc::Scope& s) {
    cc::Idx key = s.block_idx(0), base = s.block_idx(1) * kKeyThreads;
    cc::Val n = s.let(t * sel, "n");
    // idx's id of this key (keys below off have none: their run is empty).
    const cc::Val id = sh.off > 0 ? s.let(key - sh.off, "id") : cc::Val(key);
    const KeyRun run = key_run_shifted(s, offsets, key, sd, n, sh.off);
    const cc::Val begin = run.begin, end = run.end;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kKeyThreads});
    cc::Buf bad = s.alloc_fragment("bad", DType::F32, {kKeyThreads});
    auto add_pair = [&](const cc::Idx& i, const cc::Idx& col, const cc::Val& tt, const cc::Val& j) {
      s.serial(h, [&](cc::Idx hh) {
        acc(i) = cc::fma(p(tt, hh, j), dy(tt, hh, col),
                         cc::fma(scale * ds(tt, hh, j), q(tt, hh, col), acc(i)));
      });
    };
    s.parallel(kKeyThreads, [&](cc::Idx i) {
      cc::Idx col = base + i;
      s.if_then(col < e, [&] {
        acc(i) = 0.0f;
        bad(i) = 0.0f;
        if (sh.w > 0)
          s.serial(i64(sh.w), [&](cc::Idx j) {
            s.if_then(key + j < t, [&] { add_pair(i, col, key + j, j); });
          });
        s.serial(end - begin, [&](cc::Idx r) {
          cc::Val o = s.let(cc::to_i64(order(begin + r)), "o");
          s.if_then_else(
              o >= 0 && o < n,
              [&] {
                cc::Val tt = s.let(o / sel, "tt"), j = s.let(o % sel, "j");
                s.if_then_else(
                    cc::to_i64(idx(tt, j)) == id, [&] { add_pair(i, col, tt, j + sh.w); },
                    [&] { bad(i) = 1.0f; });
              },
              [&] { bad(i) = 1.0f; });
        });
        dkv(key, col) = cc::select(bad(i) == 0.0f, acc(i), nan_f32());
      });
    });
  });
  return kb.build();
}

std::vector<int64_t> dims_of(const SparseAttentionShape& sh) { return {sh.t, sh.s, sh.e}; }

}  // namespace

OpExpansion sparse_attention_expansion(KernelCache& cache, DType dtype,
                                       const SparseAttentionShape& shape, double scale, bool mass) {
  const bool tc = use_tensor_cores(dtype, shape);
  const std::string base =
      std::string(tc ? "sparse_attention_tc" : "sparse_attention") + (mass ? "_mass" : "");
  auto kernel = cache.get(kernel_name(base, dtype, shape), [&] {
    return tc ? build_forward_tc(dtype, shape, mass) : build_forward(dtype, shape, mass);
  });
  std::vector<KernelArg> buffers = {input_slot(0), input_slot(1), input_slot(2),
                                    input_slot(3), input_slot(4), output_slot(0)};
  if (mass) buffers.push_back(output_slot(1));
  KernelCall call{.kernel = kernel, .buffers = buffers, .dims = dims_of(shape), .scalars = {scale}};
  return OpExpansion{.calls = {call}};
}

OpExpansion sparse_attention_grad_expansion(KernelCache& cache, DType dtype,
                                            const SparseAttentionShape& shape, double scale) {
  if (use_tensor_cores(dtype, shape)) {
    // Scratch: g and part [T·(K - W), E] f32, sink_part [T, H], seg_key [T·(K - W)]; with a
    // window, cw [T·G·64, W] and band [T, E] f32 too.
    const int64_t n = shape.t * shape.selected();
    OpExpansion ex{.scratch = {TensorType{DType::F32, {n, shape.e}},
                               TensorType{DType::F32, {shape.t, shape.h}},
                               TensorType{DType::F32, {n, shape.e}}, TensorType{DType::I32, {n}}}};
    std::vector<KernelArg> token_buffers = {input_slot(0),   input_slot(1),  input_slot(2),
                                            input_slot(3),   input_slot(4),  input_slot(5),
                                            input_slot(6),   output_slot(0), output_slot(2),
                                            scratch_slot(0), scratch_slot(1)};
    if (shape.w > 0) {
      ex.scratch.push_back(
          TensorType{dtype, {shape.t * band_table_rows_per_token(shape), band_table_width(shape)}});
      ex.scratch.push_back(TensorType{DType::F32, {shape.t, shape.e}});
      token_buffers.push_back(scratch_slot(4));
    }
    ex.calls.push_back(
        {.kernel = cache.get(kernel_name("sparse_attention_tc_grad_token", dtype, shape),
                             [&] { return build_grad_token_tc(dtype, shape); }),
         .buffers = token_buffers,
         .dims = dims_of(shape),
         .scalars = {scale}});
    if (shape.w > 0)
      ex.calls.push_back(
          {.kernel =
               cache.get(band_name(dtype, shape), [&] { return build_grad_band_tc(dtype, shape); }),
           .buffers = {input_slot(0), input_slot(6), scratch_slot(4), scratch_slot(5)},
           .dims = {shape.t, shape.e}});
    // Kernel B: the order's windows summed by key segment, then each key's window partials.
    ex.calls.push_back(
        {.kernel = cache.get(kernel_name("sparse_attention_tc_grad_key_windows", dtype, shape),
                             [&] { return build_grad_key_windows_tc(dtype, shape); }),
         .buffers = {input_slot(2), input_slot(7), input_slot(8), scratch_slot(0), scratch_slot(2),
                     scratch_slot(3)},
         .dims = dims_of(shape)});
    std::vector<KernelArg> sums_buffers = {input_slot(8), scratch_slot(2), scratch_slot(3)};
    if (shape.w > 0) sums_buffers.push_back(scratch_slot(5));
    sums_buffers.push_back(output_slot(1));
    ex.calls.push_back(
        {.kernel = cache.get(kernel_name("sparse_attention_tc_grad_key_sums", dtype, shape),
                             [&] { return build_grad_key_sums_tc(dtype, shape); }),
         .buffers = sums_buffers,
         .dims = dims_of(shape)});
    ex.calls.push_back(reduce_call(cache, ReduceKind::Sum, DType::F32, dtype,
                                   AxisView{.outer = 1, .extent = shape.t, .inner = shape.h},
                                   scratch_slot(1), output_slot(3)));
    return ex;
  }
  const TensorType per_slot{DType::F32, {shape.t, shape.h, shape.k}};  // every slot's p, ds
  OpExpansion ex{.scratch = {per_slot, per_slot, TensorType{DType::F32, {shape.t, shape.h}}}};
  ex.calls.push_back(
      {.kernel = cache.get(kernel_name("sparse_attention_grad_token", dtype, shape),
                           [&] { return build_grad_token(dtype, shape); }),
       .buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3), input_slot(4),
                   input_slot(5), input_slot(6), output_slot(0), output_slot(2), scratch_slot(0),
                   scratch_slot(1), scratch_slot(2)},
       .dims = dims_of(shape),
       .scalars = {scale}});
  ex.calls.push_back({.kernel = cache.get(kernel_name("sparse_attention_grad_keys", dtype, shape),
                                          [&] { return build_grad_keys(dtype, shape); }),
                      .buffers = {input_slot(0), input_slot(2), input_slot(6), input_slot(7),
                                  input_slot(8), scratch_slot(0), scratch_slot(1), output_slot(1)},
                      .dims = dims_of(shape),
                      .scalars = {scale}});
  // dsink[h] = Σ_t sink_part[t, h]: the lane-order sum over tokens (reduce_kernel.h).
  ex.calls.push_back(reduce_call(cache, ReduceKind::Sum, DType::F32, dtype,
                                 AxisView{.outer = 1, .extent = shape.t, .inner = shape.h},
                                 scratch_slot(2), output_slot(3)));
  return ex;
}

}  // namespace tilerun::kernels
