// sparse_attention on the tensor cores: the forward, kernel A and kernel B that
// sparse_attention_kernel.cc picks for 16-bit q and kv when the shape fits
// (sparse_attention_tc.h).
#include "kernels/sparse_attention_tc.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/layout.h"

namespace tilerun::kernels::sparse_attention_detail {

namespace cc = tilerun::compiler;

namespace {

// ---- On the tensor cores (bf16/f16; H a multiple of 8 up to 256, K of 64, E of 8) -----------
// One warpgroup per token. Scores are S^T = K·Q^T: per 64 selected slots a gemm of the gathered
// rows [64 slots, 64 columns] (K-major, the gemm's a) by the token's heads [H, 64] (b^T), E in
// steps of 64 (the gemm's k), each slot block into its own [64, H] accumulator. The output is
// O^T = V^T·P^T: the same rows gathered again into the same tiles, now read transposed (one
// MN-major panel of a), times the probabilities. 16-bit operands carry p (and ds) to the tensor
// core as two parts, head = round(p) and tail = round(p - head), so the products keep p to about
// 2^-17 of itself rather than 2^-9. Each sum follows the MMA model's order (ir.h Gemm); the CPU
// runs the same model, so the bits match.
//
// The backward's dkv: per token, each selected slot's row of contributions
// g[t·K + j, :] = Σ_h scale·ds[h, j]·q[t, h, :] + p[h, j]·dy[t, h, :], one gemm per 64 slots and
// 16 heads of [64 slots, (ds head, ds tail, p head, p tail) × 16 heads] by [(q, q, dy, dy) × 16
// heads, 64 columns], written once in f32; then kernel B sums each key's rows in counting_sort's
// order (sparse_attention_keys.cc; the SIMT kernel B re-read all H heads of q and dy for every
// pair: 13.6 ms at T = 4096).
constexpr int kTcTokThreads = 128;
// Where token t's window coefficients start along its cw rows (the band kernel, below).
constexpr int64_t kBandShift = 8;
cc::Val band_shift(const cc::Val& t) { return i64(kBandShift - 1) - t % kBandShift; }
constexpr int64_t kTcSlots = 64, kTcCols = 64, kTcGroup = 16;  // heads per contribution gemm

int64_t head_groups(int64_t h) { return (h + kTcGroup - 1) / kTcGroup; }

// p's rows are K + kProbPad floats apart. With K a multiple of 32 every row started in bank 0:
// the stores from the score fragments (8 slots by 4 heads a warp) met 4 ways in a bank, and the
// softmax's stretches (4 heads by 8 stretches a warp, each a thread walking its own slots) met 32
// ways at every step. With 4 more, a head's row starts 4 banks on: the fragment stores are
// conflict-free, the (interleaved) stretches and the packing meet at most 2 ways.
constexpr int64_t kProbPad = 4;

// The shared bytes of the forward (or kernel A) with `stages` steps of E in flight.
int64_t tc_shared_bytes(const SparseAttentionShape& sh, bool backward, int64_t stages) {
  const int64_t tiles = stages * sh.k * kTcCols * 2;                      // the gathered rows
  const int64_t rows = (backward ? 2 : 1) * stages * sh.h * kTcCols * 2;  // q (and dy) steps
  const int64_t probs = sh.h * (sh.k + kProbPad) * 4;                     // p (then ds) in f32
  const int64_t extra =
      backward ? head_groups(sh.h) * (sh.k + stages * kTcCols) * kTcCols * 2 +  // packed, rows
                     kTcCols * (2 * kTcGroup + 1) * 4                           // osh
               : sh.h * sh.k * 2 * 2;                                           // p's two parts
  return tiles + rows + probs + extra + sh.k * 4 + (3 + 16) * sh.h * 4;
}

constexpr int64_t kTcSharedLimit = 200 * 1024;

// Blocks an SM holds by shared memory (228 KiB an SM, 1 KiB of it reserved a block).
int64_t blocks_per_sm(int64_t shared_bytes) { return 228 * 1024 / (shared_bytes + 1024); }

// Two steps of E in flight (the next step's gathers land while this one's gemms run) only where
// the SM still holds as many blocks as with one: measured on the H200 at H = 16, K = 256, another
// resident block hides a step's gathers better than a second stage (kernel A 847 -> 745 us at
// T = 1024 with one stage and two blocks an SM, the forward 793 -> 712 at T = 4096).
int64_t tc_stages(const SparseAttentionShape& sh, bool backward) {
  const int64_t one = tc_shared_bytes(sh, backward, 1), two = tc_shared_bytes(sh, backward, 2);
  return two <= kTcSharedLimit && blocks_per_sm(two) >= blocks_per_sm(one) ? 2 : 1;
}

struct TcToken {
  cc::Scope& s;
  DType dt;
  int64_t h, k, blocks, stages;
  cc::Idx t;
  cc::Val s_dim;               // kv's rows
  cc::Buf ids, p, m, d, part;  // as Token's; part: the softmax's per-stretch maxima and sums
  std::vector<cc::Buf> keys;   // per slot block: stages × [64 slots, 64 columns]
  std::vector<cc::Buf> acc;    // per slot block: [64 slots, H] scores

  TcToken(cc::Scope& scope, DType dtype, int64_t heads, int64_t slots, int64_t steps_in_flight,
          cc::Idx token, cc::Val rows)
      : s(scope),
        dt(dtype),
        h(heads),
        k(slots),
        blocks(slots / kTcSlots),
        stages(steps_in_flight),
        t(std::move(token)),
        s_dim(std::move(rows)) {
    const cc::Swizzle sw = cc::tensor_core_swizzle(128, 2);
    ids = s.alloc_shared("ids", DType::I32, {k});
    p = s.alloc_shared("p", DType::F32, {h, k + kProbPad});
    m = s.alloc_shared("m", DType::F32, {h});
    d = s.alloc_shared("d", DType::F32, {h});
    part = s.alloc_shared("part", DType::F32, {h, lanes()});
    for (int64_t b = 0; b < blocks; ++b) {
      const std::string n = std::to_string(b);
      keys.push_back(s.alloc_shared("keys" + n, dt, {stages, kTcSlots, kTcCols}, sw));
      acc.push_back(s.alloc_fragment("acc" + n, DType::F32, {kTcSlots, h}));
    }
  }

  // The softmax's stretches per head: K / lanes() slots each.
  int64_t lanes() const { return std::min<int64_t>(16, std::max<int64_t>(1, kTcTokThreads / h)); }

  // A stack of [H, 64] tiles of x[t, :, step] staged beside the keys, a step per stage.
  struct Staged {
    cc::Buf src, tile;
  };
  Staged staged(const std::string& name, const cc::Buf& src) {
    return {src, s.alloc_shared(name, dt, {stages, h, kTcCols}, cc::tensor_core_swizzle(128, 2))};
  }

  // Issues the async copies of one step into stage `st`: slot block b's rows of kv, columns
  // [e0, e0 + 64), gathered by id straight into shared memory (16-byte pieces, no registers),
  // and each staged tile's [H, 64] box of x. A bad id's row and the columns past E are zeros
  // (a bad id's scores are NaN whatever its row holds).
  void issue(const cc::Buf& kv, const std::vector<Staged>& rows, const cc::Val& st,
             const cc::Val& e0) {
    const int64_t lanes = 8;  // 16 bytes of bf16/f16
    for (int64_t b = 0; b < blocks; ++b) {
      s.parallel(kTcSlots, kTcCols / lanes, [&](cc::Idx i, cc::Idx c) {
        cc::Val id = s.let(cc::to_i64(ids(b * kTcSlots + i)), "id");
        s.copy_async_piece(keys[b], {st, i, c * lanes}, kv, {id, e0 + c * lanes});
      });
    }
    for (const Staged& r : rows)
      s.copy_async(r.tile.region({st, i64(0), i64(0)}, {1, h, kTcCols}),
                   r.src.region({t, i64(0), e0}, {1, h, kTcCols}));
  }

  // body(st, e0) for each step of 64 columns of E, with stage st of keys (and of the staged
  // tiles, and whatever `more` issued) holding the step's rows. With two stages, step c + 1's
  // copies are issued before step c's body runs its gemms, so the gathers' latency hides behind
  // them. A barrier after each body.
  void steps(const cc::Buf& kv, const std::vector<Staged>& rows, const cc::Val& e_dim,
             const std::function<void(const cc::Val&, const cc::Val&)>& more,
             const std::function<void(const cc::Val&, const cc::Val&)>& body) {
    cc::Val n = s.let(cc::ceildiv(e_dim, i64(kTcCols)), "steps");
    auto issue_step = [&](const cc::Val& st, const cc::Val& e0) {
      issue(kv, rows, st, e0);
      if (more) more(st, e0);
    };
    auto stage_of = [&](const cc::Val& step) {
      return stages == 1 ? cc::Val(i64(0)) : s.let(step % stages, "st");
    };
    if (stages > 1) {  // E has at least one step
      issue_step(i64(0), i64(0));
      s.async_commit();
    }
    s.serial(n, [&](cc::Idx chunk) {
      cc::Val ahead = stages == 1 ? cc::Val(chunk) : chunk + (stages - 1);
      s.if_then(ahead < n, [&] { issue_step(stage_of(ahead), ahead * kTcCols); });
      s.async_commit();
      s.async_wait(static_cast<int>(stages - 1));
      s.barrier();
      body(stage_of(chunk), s.let(chunk * kTcCols, "e0"));
      s.barrier();
    });
  }

  // rows[st, row0 + r, c] = x[t, head(r), e0 + c] for r < n_rows (0 where head(r) >= H or past
  // E), as async pieces.
  void stage_rows(const cc::Buf& rows, const cc::Val& st, int64_t row0, int64_t n_rows,
                  const std::function<cc::Val(cc::Idx)>& head, const cc::Buf& x,
                  const cc::Val& e0) {
    const int64_t lanes = 8;
    s.parallel(n_rows, kTcCols / lanes, [&](cc::Idx r, cc::Idx c) {
      cc::Val hh = s.let(head(r), "hh");
      s.copy_async_piece(rows, {st, row0 == 0 ? cc::Val(r) : row0 + r, c * lanes}, x,
                         {t, hh, e0 + c * lanes});
    });
  }

  void zero(const std::vector<cc::Buf>& frags) {
    for (const cc::Buf& f : frags)
      s.parallel(kTcSlots, h, [&](cc::Idx i, cc::Idx hh) { f(i, hh) = 0.0f; });
  }

  // frags[b][i, hh] += keys[b][i, :] · rows[hh, :] for this step's columns (stage st).
  void dot(const std::vector<cc::Buf>& frags, const cc::Buf& rows, const cc::Val& st) {
    for (int64_t b = 0; b < blocks; ++b)
      s.gemm_at(st, frags[b], keys[b], rows, /*trans_a=*/false, /*trans_b=*/true);
  }

  // p = the softmax with the sink of scale · acc + bias (NaN for a bad id): each head's row in
  // lanes() interleaved stretches (stretch g: slots g, g + lanes(), ..., so that a warp's threads
  // read neighbouring slots), the stretches' maxima and sums, then the head's over its stretches
  // in order (the sink's term first in the sum).
  void softmax(const cc::Buf& bias, const cc::Buf& sink, const cc::Val& scale) {
    for (int64_t b = 0; b < blocks; ++b) {
      s.parallel(kTcSlots, h, [&](cc::Idx i, cc::Idx hh) {
        cc::Idx j = b * kTcSlots + i;
        p(hh, j) = slot_score(cc::to_i64(ids(j)), scale * acc[b](i, hh) + bias(t, j));
      });
    }
    s.barrier();
    const int64_t g_n = lanes(), span = k / g_n;
    auto stretch = [&](const std::function<cc::Val(cc::Val, cc::Val)>& op) {
      s.parallel(h, g_n, [&](cc::Idx hh, cc::Idx g) {
        part(hh, g) = p(hh, g);
        s.serial(span - 1,
                 [&](cc::Idx j) { part(hh, g) = op(part(hh, g), p(hh, g + (j + 1) * g_n)); });
      });
      s.barrier();
    };
    stretch([](cc::Val a, cc::Val b) { return cc::max(a, b); });
    s.parallel(h, [&](cc::Idx hh) {
      m(hh) = sink(hh);
      s.serial(g_n, [&](cc::Idx g) { m(hh) = cc::max(m(hh), part(hh, g)); });
    });
    s.barrier();
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) { p(hh, j) = cc::exp(p(hh, j) - m(hh)); });
    s.barrier();
    stretch([](cc::Val a, cc::Val b) { return a + b; });
    s.parallel(h, [&](cc::Idx hh) {
      d(hh) = cc::exp(sink(hh) - m(hh));
      s.serial(g_n, [&](cc::Idx g) { d(hh) = d(hh) + part(hh, g); });
    });
    s.barrier();
    s.parallel(h, k, [&](cc::Idx hh, cc::Idx j) { p(hh, j) = p(hh, j) / d(hh); });
    s.barrier();
  }
};

}  // namespace

cc::Kernel build_forward_tc(DType dt, const SparseAttentionShape& sh, bool with_mass) {
  cc::KernelBuilder kb(
      kernel_name(with_mass ? "sparse_attention_tc_mass" : "sparse_attention_tc", dt, sh));
  const ForwardParams fp = declare_forward_params(kb, dt, sh, with_mass, 8);
  const TokenParams& prm = fp.in;
  const cc::Dim t = prm.t, sd = prm.s, e = prm.e;
  const cc::Val h(sh.h), k(sh.k);
  const cc::Buf q = prm.q, kv = prm.kv, idx = prm.idx, bias = prm.bias, sink = prm.sink;
  const cc::Buf y = fp.y, mass = fp.mass;
  const cc::Val scale = fp.scale;
  kb.body({t}, kTcTokThreads, [&](cc::Scope& s) {
    TcToken tok(s, dt, sh.h, sh.k, tc_stages(sh, /*backward=*/false), s.block_idx(0), sd);
    const cc::Swizzle sw = cc::tensor_core_swizzle(128, 2);
    const TcToken::Staged qs = tok.staged("qs", q);
    stage_token_ids(s, sh, tok.t, tok.ids, idx, sd);
    tok.zero(tok.acc);
    tok.steps(kv, {qs}, e, nullptr,
              [&](const cc::Val& st, const cc::Val&) { tok.dot(tok.acc, qs.tile, st); });
    tok.softmax(bias, sink, scale);
    if (with_mass) write_mass(s, sh.h, sh.k, tok.t, tok.p, mass);
    // y^T = V^T·P^T: p as head and tail [H, 64] per slot block, a [64 columns, H] accumulator.
    std::vector<cc::Buf> head, tail;
    for (int64_t b = 0; b < tok.blocks; ++b) {
      head.push_back(s.alloc_shared("head" + std::to_string(b), dt, {sh.h, kTcSlots}, sw));
      tail.push_back(s.alloc_shared("tail" + std::to_string(b), dt, {sh.h, kTcSlots}, sw));
      s.parallel(h, kTcSlots, [&](cc::Idx hh, cc::Idx i) {
        cc::Val v = s.let(tok.p(hh, b * kTcSlots + i), "pv");
        head[b](hh, i) = v;
        tail[b](hh, i) = v - head[b](hh, i);
      });
    }
    cc::Buf o = s.alloc_fragment("o", DType::F32, {kTcCols, sh.h});
    tok.steps(kv, {}, e, nullptr, [&](const cc::Val& st, const cc::Val& e0) {
      s.parallel(kTcCols, h, [&](cc::Idx c, cc::Idx hh) { o(c, hh) = 0.0f; });
      for (int64_t b = 0; b < tok.blocks; ++b) {
        s.gemm_at_a(st, o, tok.keys[b], head[b], /*trans_a=*/true, /*trans_b=*/true);
        s.gemm_at_a(st, o, tok.keys[b], tail[b], /*trans_a=*/true, /*trans_b=*/true);
      }
      s.parallel(kTcCols, h, [&](cc::Idx c, cc::Idx hh) {
        s.if_then(e0 + c < e, [&] { y(tok.t, hh, e0 + c) = o(c, hh); });
      });
    });
  });
  return kb.build();
}

// Kernel A on the tensor cores. Parameters q, kv, idx, bias, sink, y, dy, dq, dbias, g,
// sink_part; T, S, E; scale. delta first; dp^T = K·dy^T beside the scores; then per
// step of E, with the step's rows gathered again, dq^T = scale · K^T·ds^T and the rows of g.
cc::Kernel build_grad_token_tc(DType dt, const SparseAttentionShape& sh) {
  cc::KernelBuilder kb(kernel_name("sparse_attention_tc_grad_token", dt, sh));
  const TokenParams prm = declare_token_params(kb, dt, sh, 8);
  const cc::Dim t = prm.t, sd = prm.s, e = prm.e;
  const cc::Val h(sh.h), k(sh.k);
  const cc::Buf q = prm.q, kv = prm.kv, idx = prm.idx, bias = prm.bias, sink = prm.sink;
  cc::Buf y = kb.input("y", dt, {t, h, e}), dy = kb.input("dy", dt, {t, h, e});
  cc::Buf dq = kb.output("dq", dt, {t, h, e}), dbias = kb.output("dbias", dt, {t, k});
  // g: the rows of idx's slots only (the window's go to cw, for the band kernel).
  const int64_t groups = head_groups(sh.h), window_blocks = sh.w / kTcSlots;
  cc::Buf g_out = kb.output("g", DType::F32, {t * cc::Val(sh.selected()), e});
  cc::Buf sink_part = kb.output("sink_part", DType::F32, {t, h});
  cc::Buf cw;
  if (sh.w > 0)
    cw = kb.output("cw", dt, {t * band_table_rows_per_token(sh), cc::Val(band_table_width(sh))});
  cc::Val scale = kb.scalar_f32("scale");
  kb.body({t}, kTcTokThreads, [&](cc::Scope& s) {
    TcToken tok(s, dt, sh.h, sh.k, tc_stages(sh, /*backward=*/true), s.block_idx(0), sd);
    const cc::Swizzle sw = cc::tensor_core_swizzle(128, 2);
    const TcToken::Staged qs = tok.staged("qs", q), dys = tok.staged("dys", dy);
    cc::Buf delta = s.alloc_shared("delta", DType::F32, {sh.h});
    std::vector<cc::Buf> dp;
    for (int64_t b = 0; b < tok.blocks; ++b)
      dp.push_back(s.alloc_fragment("dp" + std::to_string(b), DType::F32, {kTcSlots, sh.h}));
    stage_token_ids(s, sh, tok.t, tok.ids, idx, sd);
    // delta[hh] = y[t, hh, :]·dy[t, hh, :]: each head's columns in lanes() interleaved stretches
    // (stretch g: columns g, g + lanes(), ..., so that a warp's loads are neighbours; as blocks
    // of E / lanes() columns each thread read its own 128 bytes, a third of the kernel's global
    // sectors wasted), each summed in column order by its own thread, then the stretches in
    // order. Computed once up front by every thread: inside the steps, H threads summed 64
    // columns each while the block waited at the barrier.
    {
      const int64_t g_n = tok.lanes();
      cc::Buf dacc = s.alloc_fragment("dacc", DType::F32, {sh.h, g_n});
      s.parallel(h, g_n, [&](cc::Idx hh, cc::Idx g) {
        cc::Val n = s.let(cc::ceildiv(cc::max(cc::Val(e) - g, i64(0)), i64(g_n)), "dn");
        dacc(hh, g) = 0.0f;
        s.serial(n, [&](cc::Idx c) {
          cc::Val col = s.let(g + c * g_n, "col");
          dacc(hh, g) = cc::fma(y(tok.t, hh, col), dy(tok.t, hh, col), dacc(hh, g));
        });
        tok.part(hh, g) = dacc(hh, g);
      });
      s.barrier();
      s.parallel(h, [&](cc::Idx hh) {
        delta(hh) = tok.part(hh, 0);
        s.serial(i64(g_n - 1), [&](cc::Idx g) { delta(hh) = delta(hh) + tok.part(hh, g + 1); });
      });
      s.barrier();
    }
    tok.zero(tok.acc);
    tok.zero(dp);
    tok.steps(kv, {qs, dys}, e, nullptr, [&](const cc::Val& st, const cc::Val&) {
      tok.dot(tok.acc, qs.tile, st);
      tok.dot(dp, dys.tile, st);
    });
    tok.softmax(bias, sink, scale);
    // packed[b][gi][i, 16 part + r] for head hh = 16 gi + r (0 past H): parts 0 and 1 are
    // scale·ds's head and tail, 2 and 3 p's. p's parts first: ds then takes p's place.
    std::vector<std::vector<cc::Buf>> packed(tok.blocks);
    auto pack = [&](int part0, const std::function<cc::Val(cc::Val, cc::Val)>& value) {
      for (int64_t b = 0; b < tok.blocks; ++b) {
        for (int64_t gi = 0; gi < groups; ++gi) {
          const cc::Buf& a = packed[b][gi];
          s.parallel(kTcSlots, kTcGroup, [&](cc::Idx i, cc::Idx r) {
            cc::Val hh = s.let(gi * kTcGroup + r, "hh");
            s.if_then_else(
                hh < h,
                [&] {
                  cc::Val v = s.let(value(hh, b * kTcSlots + i), "v");
                  a(i, part0 * kTcGroup + r) = v;
                  a(i, (part0 + 1) * kTcGroup + r) = v - a(i, part0 * kTcGroup + r);
                },
                [&] {
                  a(i, part0 * kTcGroup + r) = 0.0f;
                  a(i, (part0 + 1) * kTcGroup + r) = 0.0f;
                });
          });
        }
      }
    };
    for (int64_t b = 0; b < tok.blocks; ++b)
      for (int64_t gi = 0; gi < groups; ++gi)
        packed[b].push_back(s.alloc_shared("packed" + std::to_string(b) + "_" + std::to_string(gi),
                                           dt, {kTcSlots, kTcCols}, sw));
    pack(2, [&](cc::Val hh, cc::Val j) { return tok.p(hh, j); });
    s.barrier();
    // ds = p · (dp - delta), in place of p.
    for (int64_t b = 0; b < tok.blocks; ++b) {
      s.parallel(kTcSlots, h, [&](cc::Idx i, cc::Idx hh) {
        cc::Idx j = b * kTcSlots + i;
        tok.p(hh, j) = tok.p(hh, j) * (dp[b](i, hh) - delta(hh));
      });
    }
    write_sink_and_bias_grads(s, sh, tok.t,
                              {.ds = tok.p,
                               .m = tok.m,
                               .d = tok.d,
                               .sink = sink,
                               .delta = delta,
                               .sink_part = sink_part,
                               .dbias = dbias});
    pack(0, [&](cc::Val hh, cc::Val j) { return scale * tok.p(hh, j); });
    // rows[gi][st, 16 part + r, c]: q for parts 0 and 1, dy for 2 and 3, of head 16 gi + r,
    // a step per stage beside the keys.
    std::vector<cc::Buf> rows;
    for (int64_t gi = 0; gi < groups; ++gi)
      rows.push_back(
          s.alloc_shared("rows" + std::to_string(gi), dt, {tok.stages, kTcCols, kTcCols}, sw));
    cc::Buf o = s.alloc_fragment("o", DType::F32, {kTcCols, kTcCols});
    cc::Buf osh = s.alloc_shared("osh", DType::F32, {kTcCols, 2 * kTcGroup + 1});
    cc::Buf gacc = s.alloc_fragment("gacc", DType::F32, {kTcSlots, kTcCols});
    auto stage_q_dy = [&](const cc::Val& st, const cc::Val& e0) {
      for (int64_t gi = 0; gi < groups; ++gi) {
        auto head_of = [&](cc::Idx r) { return gi * kTcGroup + r % kTcGroup; };
        tok.stage_rows(rows[gi], st, 0, 2 * kTcGroup, head_of, q, e0);
        tok.stage_rows(rows[gi], st, 2 * kTcGroup, 2 * kTcGroup, head_of, dy, e0);
      }
    };
    tok.steps(kv, {}, e, stage_q_dy, [&](const cc::Val& st, const cc::Val& e0) {
      // dq^T: o[c, 16 part + r] = Σ_j kv[ids[j], e0 + c]·packed[j, 16 part + r]; parts 0 + 1.
      for (int64_t gi = 0; gi < groups; ++gi) {
        s.parallel(kTcCols, kTcCols, [&](cc::Idx c, cc::Idx n) { o(c, n) = 0.0f; });
        for (int64_t b = 0; b < tok.blocks; ++b)
          s.gemm_at_a(st, o, tok.keys[b], packed[b][gi], /*trans_a=*/true, /*trans_b=*/false);
        // Through shared memory: a thread holds either part of a head, not both.
        s.parallel(kTcCols, kTcCols, [&](cc::Idx c, cc::Idx n) {
          s.if_then(n < 2 * kTcGroup, [&] { osh(c, n) = o(c, n); });
        });
        s.barrier();
        s.parallel(kTcGroup, kTcCols, [&](cc::Idx r, cc::Idx c) {
          cc::Val hh = s.let(gi * kTcGroup + r, "hh");
          s.if_then(hh < h && e0 + c < e,
                    [&] { dq(tok.t, hh, e0 + c) = osh(c, r) + osh(c, r + kTcGroup); });
        });
        s.barrier();
      }
      // g's rows: gacc[i, c] = Σ over head groups of packed[b][gi][i, :]·rows[gi][:, c].
      const cc::Val sel(sh.selected());
      for (int64_t b = window_blocks; b < tok.blocks; ++b) {
        s.parallel(kTcSlots, kTcCols, [&](cc::Idx i, cc::Idx c) { gacc(i, c) = 0.0f; });
        for (int64_t gi = 0; gi < groups; ++gi)
          s.gemm_at_b(st, gacc, packed[b][gi], rows[gi], /*trans_a=*/false, /*trans_b=*/false);
        s.parallel(kTcSlots, kTcCols, [&](cc::Idx i, cc::Idx c) {
          s.if_then(e0 + c < e, [&] {
            g_out(tok.t * sel + (b - window_blocks) * kTcSlots + i, e0 + c) = gacc(i, c);
          });
        });
      }
    });
    // The window's slots: their packed columns as cw's rows, cw[(t·G + gi)·64 + c,
    // band_shift(t) + j] (slot j along the row, so that the band kernel's boxes slide along it
    // token by token), zeros around them.
    if (window_blocks > 0) {
      cc::Val shift = s.let(band_shift(tok.t), "shift");
      for (int64_t gi = 0; gi < groups; ++gi) {
        // One element a thread at a time: a warp reads 32 neighbouring slots of one column of
        // the packed tile (4 ways a bank under the swizzle) and stores 64 contiguous bytes. As
        // 8-slot vectors the warp's slots were 8 apart, all 32 in one bank: on the H200 at
        // T = 1024 kernel A took 508 us with that write, 383 with this one, 344 without any.
        s.annotate_layout(1);
        s.parallel(kTcCols, band_table_width(sh), [&](cc::Idx c, cc::Idx at) {
          cc::Val j = s.let(at - shift, "j");
          cc::Val jc = s.let(cc::min(cc::max(j, i64(0)), i64(sh.w - 1)), "jc");
          cc::Val v = cc::Val(0.0f);
          for (int64_t b = window_blocks - 1; b >= 0; --b)
            v = cc::select(j >= b * kTcSlots && j < (b + 1) * kTcSlots,
                           packed[b][gi](jc - b * kTcSlots, c), v);
          cw((tok.t * groups + gi) * kTcCols + c, at) = v;
        });
      }
    }
  });
  return kb.build();
}

bool use_tensor_cores(DType dt, const SparseAttentionShape& sh) {
  return (dt == DType::BF16 || dt == DType::F16) && sh.h % 8 == 0 && sh.h <= 256 && sh.e % 8 == 0 &&
         sh.k % kTcSlots == 0 && sh.w % kTcSlots == 0 &&
         tc_shared_bytes(sh, /*backward=*/true, 1) <= kTcSharedLimit;
}

// ---- The window's key gradients as a band ----------------------------------------------------
// Key s's window pairs are the tokens t = s + j, j < W (t < T), each adding
// Σ_h scale·ds[t, h, j]·q[t, h, :] + p[t, h, j]·dy[t, h, :]: for 64 keys [s0, s0 + 64) a product
// over the tokens [s0, s0 + 63 + W) whose coefficients slide by one slot a token. A block per
// (64 keys, 256 columns) walks those tokens (and head groups), one step each: the token's four
// coefficient tiles (scale·ds and p, each as head and tail) come from cw by the tensor memory
// accelerator as [16 (head), 64 (key)] boxes from slot t - s0 - 63: row r of the tile is key
// s0 + 63 - r (reversed, so that the slots j = t - s ascend along it). The hardware takes a box
// only at a whole 16 bytes along the row (an illegal instruction otherwise, measured on the
// H200), so kernel A stores token t's row band_shift(t) = 7 - t % 8 slots on, which puts every
// box at a multiple of 8, zeros around the W slots; slots before the row or past it arrive as
// the box's zero fill, so the band's edges cost nothing. q's and dy's [16 (head), 64 (column)]
// boxes are the other operands: four gemms of k = 16 a step into one [64 keys, 256 columns]
// accumulator, the copies kBandStages - 2 steps ahead, issued before the step's gemms, which are
// left running. Every sum in token order, then head order: fixed by the shape.
constexpr int kBandStages = 8;
constexpr int64_t kBandCols = 256;                    // columns a block: one wgmma of n = 256
constexpr int64_t kBandPanels = kBandCols / kTcCols;  // q's and dy's 64-column boxes a step
constexpr int kBandBoxes = 4 + 2 * kBandPanels;       // and the four coefficient tiles

std::string band_name(DType dt, const SparseAttentionShape& sh) {
  return kernel_name("sparse_attention_tc_grad_band", dt, sh);
}

cc::Kernel build_grad_band_tc(DType dt, const SparseAttentionShape& sh) {
  cc::KernelBuilder kb(band_name(dt, sh));
  const int64_t groups = head_groups(sh.h);
  cc::Dim t = kb.dim("T"), e = kb.dim("E", {.divisible_by = 8});
  const cc::Val h(sh.h);
  cc::Buf q = kb.input("q", dt, {t, h, e}), dy = kb.input("dy", dt, {t, h, e});
  cc::Buf cw =
      kb.input("cw", dt, {t * band_table_rows_per_token(sh), cc::Val(band_table_width(sh))});
  cc::Buf band = kb.output("band", DType::F32, {t, e});
  kb.body(
      {cc::ceildiv(t, i64(kTcSlots)), cc::ceildiv(e, i64(kBandCols))}, kTcTokThreads,
      [&](cc::Scope& s) {
        const cc::Swizzle sw = cc::tensor_core_swizzle(128, 2);
        cc::Val s0 = s.let(s.block_idx(0) * kTcSlots, "s0");
        cc::Val c0 = s.let(s.block_idx(1) * kBandCols, "c0");
        cc::Buf full = s.alloc_shared("full", DType::I64, {kBandStages});
        std::vector<cc::Buf> coef;
        for (int x = 0; x < 4; ++x)
          coef.push_back(s.alloc_shared("coef" + std::to_string(x), dt,
                                        {kBandStages, 1, kTcGroup, kTcSlots}, sw));
        cc::Buf qs = s.alloc_shared("qs", dt, {kBandStages, kBandPanels, kTcGroup, kTcCols}, sw);
        cc::Buf dys = s.alloc_shared("dys", dt, {kBandStages, kBandPanels, kTcGroup, kTcCols}, sw);
        cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcSlots, kBandCols});
        s.parallel(kTcSlots, kBandCols, [&](cc::Idx r, cc::Idx c) { acc(r, c) = 0.0f; });
        // The tokens whose windows reach the block's keys, each head group a step.
        cc::Val tokens = s.let(cc::min(s0 + i64(kTcSlots - 1 + sh.w), cc::Val(t)) - s0, "tokens");
        cc::Val steps = s.let(tokens * groups, "steps");
        const cc::Val stages32 = cc::literal(cc::Type::I32, kBandStages);
        auto slot = [&](const cc::Val& j) {
          return cc::to_i64(cc::to_i32(steps - 1 - j) % stages32);
        };
        auto parity = [&](const cc::Val& j) {
          return cc::to_i64(cc::to_i32(j) / stages32 % cc::literal(cc::Type::I32, 2));
        };
        auto issue = [&](const cc::Val& j) {
          cc::Val sl = s.let(slot(j), "slot");
          s.if_then(j < steps, [&] {
            cc::Val tok = s.let(s0 + j / groups, "tok"), gi = s.let(j % groups, "gi");
            for (int x = 0; x < 4; ++x)
              s.copy_tma(
                  coef[x].region({sl, i64(0), i64(0), i64(0)}, {1, 1, kTcGroup, kTcSlots}),
                  cw.region({(tok * groups + gi) * kTcCols + x * kTcGroup,
                             tok / 8 * 8 - s0 - (kTcSlots - kBandShift)},  // + band_shift(tok)
                            {kTcGroup, kTcSlots}),
                  full, sl);
            for (int64_t pn = 0; pn < kBandPanels; ++pn) {
              s.copy_tma(qs.region({sl, i64(pn), i64(0), i64(0)}, {1, 1, kTcGroup, kTcCols}),
                         q.region({tok, gi * kTcGroup, c0 + pn * kTcCols}, {1, kTcGroup, kTcCols}),
                         full, sl);
              s.copy_tma(dys.region({sl, i64(pn), i64(0), i64(0)}, {1, 1, kTcGroup, kTcCols}),
                         dy.region({tok, gi * kTcGroup, c0 + pn * kTcCols}, {1, kTcGroup, kTcCols}),
                         full, sl);
            }
          });
        };
        // The step's four gemms; the last leaves them running (pending 4) or waits.
        auto gemms = [&](const cc::Val& st, int last_pending) {
          for (int x = 0; x < 4; ++x)
            s.gemm_at(st, acc, coef[x], x < 2 ? qs : dys, /*trans_a=*/true,
                      /*trans_b=*/false, x < 3 ? cc::Gemm::kMaxPending : last_pending);
        };
        const int ahead = kBandStages - 2;
        s.mbarrier_init(full, kBandBoxes);
        s.barrier();
        for (int d = 0; d < ahead; ++d) issue(cc::Val(int64_t{d}));
        s.serial(steps - 1, [&](cc::Idx ko) {
          s.mbarrier_wait(full, slot(ko), parity(ko));
          s.barrier();
          issue(ko + ahead);
          gemms(s.let(slot(ko), "cur"), 4);
        });
        s.mbarrier_wait(full, i64(0), parity(steps - 1));
        s.barrier();
        gemms(i64(0), 0);
        s.parallel(kTcSlots, kBandCols, [&](cc::Idx r, cc::Idx c) {
          cc::Val key = s.let(s0 + (kTcSlots - 1) - r, "key");
          s.if_then(key < t && c0 + c < e, [&] { band(key, c0 + c) = acc(r, c); });
        });
      });
  return kb.build();
}

int64_t band_table_rows_per_token(const SparseAttentionShape& sh) {
  return head_groups(sh.h) * kTcCols;
}
int64_t band_table_width(const SparseAttentionShape& sh) { return sh.w + kBandShift; }

}  // namespace tilerun::kernels::sparse_attention_detail
