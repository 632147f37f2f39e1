// grouped_matmul's tensor-core kernels (grouped_matmul_tc.h), on matmul_tc.h's K loop: every
// output is the tensor core's chain over its K tiles in k order from +0, the tiling a constant.
//  - forward: a 128 x 128 tile of y per block. The block walks e over all E; where expert e's
//    segment meets its rows, the whole K loop runs against w[e] into a fresh accumulator, which
//    is then added to the segment's rows only (a row's bits: +0 + its own expert's chain,
//    whatever shares its tile: batch invariant). A barrier after each such pass, since the next
//    one restages the shared tiles another warpgroup may still be reading.
//    Where K (and N, b not transposed) are multiples of 8, the same pass on the tensor memory
//    accelerator's K loop (matmul_tc.h tc_async_steps; its mbarriers invalidated after each
//    pass and initialised again before the next): the same chains, so the same bits.
//  - wgrad: a block per (128 of K, 128 of N, expert; 64 of K on the TMA loop): the K
//    loop of the gemm runs over the segment's rows, 64 at a time from its first (x^T and dy both
//    staged from [rows, ..] tensors), zeros past its end, so dw[e] depends only on the segment's
//    rows; empty: zeros. Where K and N are multiples of 8, the same on the TMA K loop (x as
//    a transposed a in MN-major panels), the rows past the segment's end zeroed in the last step's
//    tiles.
#include "kernels/grouped_matmul_tc.h"

#include "compiler/base/check.h"
#include "compiler/transforms/narrow_float.h"
#include "kernels/matmul_tc.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace {
// The async wgrad's tile of dw's K rows and its buffers (build_grouped_wgrad_tc_async).
constexpr int64_t kWgradRows = 64;
constexpr int kWgradStages = 3;

// The TMA forward kernels' dims and operands, in parameter order: R, N, K, E; x [R, K], w
// [E, K, N] ([E, N, K] transposed). K a multiple of 8 (x's rows 16-byte aligned for its boxes),
// N too either way (y's rows, for the epilogue's vectors).
struct TmaOperands {
  cc::Dim r, n, k, experts;
  cc::Buf x, w;
};
TmaOperands declare_tma_operands(cc::KernelBuilder& kb, DType dtype, bool tb) {
  cc::Dim r = kb.dim("R"), n = kb.dim("N", {.min = 1, .divisible_by = 8}),
          k = kb.dim("K", {.min = 0, .divisible_by = 8}), experts = kb.dim("E");
  cc::Buf x = kb.input("x", dtype, {r, k});
  cc::Buf w = kb.input(
      "w", dtype, tb ? std::vector<cc::Val>{experts, n, k} : std::vector<cc::Val>{experts, k, n});
  return {r, n, k, experts, x, w};
}

// The forward's TMA boxes for rows [r0, r0 + 128) of x against expert e's matrix: x's [128, 64]
// at step j, w[e]'s [128 (n), 64 (k)] transposed or its two [64 (k), 64 (n)] panels. The boxes
// may reach past the segment (rows computed and dropped) or past R (zeros).
TcAsyncBoxes expert_boxes(const cc::Buf& x, const cc::Buf& w, bool tb, const cc::Val& r0,
                          const cc::Val& n0, const cc::Val& e) {
  return {.a =
              [=](const cc::Val& j, int) {
                return x.region({r0, j * kTcK}, {kTcM, kTcK});
              },
          .b =
              [=](const cc::Val& j, int h) {
                return tb ? w.region({e, n0, j * kTcK}, {1, kTcN, kTcK})
                          : w.region({e, j * kTcK, n0 + h * 64}, {1, kTcK, 64});
              }};
}
}  // namespace

std::pair<cc::Val, cc::Val> grouped_segment(cc::Scope& s, const cc::Buf& offsets, const cc::Val& e,
                                            const cc::Dim& experts, const cc::Dim& rows) {
  cc::Val lo = s.let(cc::max(cc::min(cc::to_i64(offsets(e)), rows), cc::Val(0)), "lo");
  // The next segment's start; the last one ends at R (the load is clamped to stay in range).
  cc::Val next = cc::to_i64(offsets(cc::min(e + 1, experts - 1)));
  cc::Val end = cc::select(e + 1 < experts, next, rows);
  cc::Val hi = s.let(cc::max(cc::min(end, rows), lo), "hi");
  return {lo, hi};
}

std::string grouped_tc_name(bool tb) {
  return std::string("grouped_matmul_tc_") + (tb ? "nt" : "nn") + "_128x128x64";
}

cc::Kernel build_grouped_tc(DType dtype, bool tb) {
  cc::KernelBuilder kb(grouped_tc_name(tb) + "_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), n = kb.dim("N"), k = kb.dim("K"), experts = kb.dim("E");
  cc::Buf x = kb.input("x", dtype, {r, k});
  cc::Buf w = kb.input(
      "w", dtype, tb ? std::vector<cc::Val>{experts, n, k} : std::vector<cc::Val>{experts, k, n});
  cc::Buf offsets = kb.input("offsets", DType::I32, {experts});
  cc::Buf y = kb.output("y", dtype, {r, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(r, kTcM)}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx n0 = s.let(s.block_idx(0) * kTcN, "n0"), r0 = s.let(s.block_idx(1) * kTcM, "r0");
    TcStaging st = tc_staging(s, dtype, /*a_k_major=*/true, /*b_k_major=*/tb);
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcM, kTcN});
    cc::Buf out = s.alloc_fragment("out", DType::F32, {kTcM, kTcN});
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { out(i, j) = 0.0f; });
    s.serial(experts, [&](cc::Idx e) {
      const auto [lo_v, hi_v] = grouped_segment(s, offsets, e, experts, r);
      const cc::Val lo = lo_v, hi = hi_v;  // plain names, captured by the lambdas
      cc::Val meets = s.let(lo < hi && lo < r0 + kTcM && hi > r0, "meets");
      // A 0-or-1-trip loop, not an if: the pass holds barriers and gemms.
      s.serial(cc::select(meets, cc::Val(1), cc::Val(0)), [&](cc::Idx) {
        s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
        tc_gemm_steps(s, st, {.buf = x, .r0 = r0, .rows = r},
                      {.buf = w, .r0 = n0, .rows = n, .lead = e}, acc, cc::Val(), k);
        s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) {
          cc::Idx row = r0 + i;
          out(i, j) = cc::select(row >= lo && row < hi, out(i, j) + acc(i, j), out(i, j));
        });
        s.barrier();  // the next pass restages the tiles
      });
    });
    s.copy(y.region({r0, n0}, {kTcM, kTcN}), out);
  });
  return kb.build();
}

std::string grouped_tc_async_name(bool tb) {
  return std::string("grouped_matmul_tc_") + (tb ? "nt" : "nn") + "_128x128x64_tma";
}

// The forward's scheme on matmul_tc.h's TMA K loop: x's boxes are rows [r0, r0 + 128) of
// x, which may run past the segment (those rows are computed and dropped) but read zeros past
// R; w's are boxes of the matrix w[e].
cc::Kernel build_grouped_tc_async(DType dtype, bool tb) {
  cc::KernelBuilder kb(grouped_tc_async_name(tb) + "_" + std::string(dtype_name(dtype)));
  const TmaOperands op = declare_tma_operands(kb, dtype, tb);
  const cc::Dim r = op.r, n = op.n, k = op.k, experts = op.experts;  // (lambdas capture these)
  const cc::Buf x = op.x, w = op.w;
  cc::Buf offsets = kb.input("offsets", DType::I32, {experts});
  cc::Buf y = kb.output("y", dtype, {r, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(r, kTcM)}, kTcThreads, [&](cc::Scope& s) {
    // n0 not let-bound: the copies' origins must show themselves multiples of 8 (tile_verifier).
    cc::Idx n0 = s.block_idx(0) * kTcN, r0 = s.let(s.block_idx(1) * kTcM, "r0");
    TcAsyncStaging st = tc_async_staging(s, dtype, /*ta=*/false, tb, kTcM, kTcAsyncStages,
                                         /*again=*/true);
    cc::Buf out = s.alloc_fragment("out", DType::F32, {kTcM, kTcN});
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { out(i, j) = 0.0f; });
    s.serial(experts, [&](cc::Idx e) {
      const auto [lo_v, hi_v] = grouped_segment(s, offsets, e, experts, r);
      const cc::Val lo = lo_v, hi = hi_v;  // plain names, captured by the lambdas
      cc::Val meets = s.let(lo < hi && lo < r0 + kTcM && hi > r0, "meets");
      // A 0-or-1-trip loop, not an if: the pass holds barriers and gemms.
      s.serial(cc::select(meets, cc::Val(1), cc::Val(0)), [&](cc::Idx) {
        s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { st.acc(i, j) = 0.0f; });
        tc_async_steps(s, st, expert_boxes(x, w, tb, r0, n0, e), k);
        s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) {
          cc::Idx row = r0 + i;
          out(i, j) = cc::select(row >= lo && row < hi, out(i, j) + st.acc(i, j), out(i, j));
        });
        s.barrier();  // the next pass refills the tiles
      });
    });
    tc_store_through_shared(s, dtype, {out}, kTcM, r0, n0, r, n,
                            [&](const cc::Val& row, const cc::Val& col) { return y(row, col); });
  });
  return kb.build();
}

std::string grouped_tc_aligned_name(bool tb) {
  return std::string("grouped_matmul_tc_") + (tb ? "nt" : "nn") + "_128x128x64_tma_aligned";
}

std::string grouped_fp4_aligned_name(bool tb, int64_t block) {
  return std::string("grouped_matmul_fp4_tc_") + (tb ? "nt" : "nn") + "_128x128x64_tma_aligned_b" +
         std::to_string(block);
}

namespace {

// FP4 weights: w's codes as bytes (two a byte, the even element in the low nibble) [E, N, K/2]
// transposed or [E, K, N/2], and their e8m0 scales, one per `block` along w's last axis. Each
// step's box of bytes lands in a stage of its own, [128 (n), 32] or [64 (k), 64]; unpack_b
// decodes it into the 16-bit tile the gemm reads: code times scale, exact in bf16 (two
// significant bits, a power of two within e8m0's range: bf16 has f32's exponents).
struct Fp4Weights {
  int64_t block = 0;  // 0: w is 16-bit, no decoding
  cc::Buf scale;
};

// The boxes' stage of bytes and the step's decoding into st.bs (matmul_tc.h TcAsyncStaging's
// b_landing and unpack_b). The scales' row and block indices are clamped: past N (rows of the
// tile not stored) any scale will do; K is a multiple of the step, so every k is inside.
void unpack_fp4(cc::Scope& s, TcAsyncStaging& st, const Fp4Weights& fp4, bool tb, const cc::Val& e,
                const cc::Val& n0, const cc::Dim& n) {
  st.b_landing_tile =
      tb ? std::vector<int64_t>{kTcN, kTcK / 2} : std::vector<int64_t>{kTcK, kTcN / 2};
  std::vector<int64_t> stack{st.stages};
  stack.insert(stack.end(), st.b_landing_tile.begin(), st.b_landing_tile.end());
  // Swizzled as TMA writes a box of 32-byte (tb) or 64-byte rows.
  st.b_landing = s.alloc_shared("Bp", DType::U8, stack,
                                cc::tensor_core_swizzle(static_cast<int>(st.b_landing_tile[1]), 1));
  const cc::Buf packed = st.b_landing, bs = st.bs, scale = fp4.scale;
  const int64_t block = fp4.block;
  st.unpack_b = [&s, packed, bs, scale, block, tb, e, n0, n](const cc::Val& stage,
                                                             const cc::Val& j) {
    const cc::Val k0 = j * kTcK;
    // An element's code: its byte's low nibble for an even column, the high one for an odd.
    auto code = [&](const cc::Val& byte_index, const cc::Val& column) {
      cc::Val byte = cc::to_i32(byte_index);
      cc::Val shift = cc::to_i32(column % 2) * cc::literal(cc::Type::I32, 4);
      cc::Val c = cc::shr_logical(byte, shift) & cc::literal(cc::Type::I32, 0xf);
      return cc::Val(cc::narrow_float_to_f32(DType::FP4E2M1, c.expr(), "w"));
    };
    // Eight consecutive elements of a row a thread (a 16-byte chunk of the swizzle, one block of
    // scales). The stores still go one element at a time: vectorize_accesses moves global
    // accesses and shared loads as vectors, not shared stores (why this decode is slow today,
    // bench/RESULTS.md, fortieth session).
    s.annotate_layout(8);
    if (tb) {
      // Row i of the tile is w[e]'s row n0 + i, its column c the code k0 + c.
      s.parallel(kTcN, kTcK, [&](cc::Idx i, cc::Idx c) {
        cc::Val sc = scale(e, cc::min(n0 + i, n - 1), (k0 + c) / block);
        bs(stage, i, c) = code(packed(stage, i, c / 2), c) * sc;
      });
      return;
    }
    // Row kk of the tile is w[e]'s row k0 + kk, its column c the code n0 + c, in panel c / 64 of
    // the N-major tile.
    const cc::Val last_block = n / block - 1;
    s.parallel(kTcK, kTcN, [&](cc::Idx kk, cc::Idx c) {
      cc::Val sc = scale(e, k0 + kk, cc::min((n0 + c) / block, last_block));
      bs(stage, c / 64, kk, c % 64) = code(packed(stage, kk, c / 2), c) * sc;
    });
  };
}

// Proved race-free by the analysis from the sorted contract alone: two blocks of one segment
// write rows 128 apart by their slots, and segments e < e' end no later than the other starts
// (offsets[e + 1] <= offsets[e']), whatever the search found.
cc::Kernel build_aligned(DType dtype, bool tb, const Fp4Weights& fp4_spec) {
  const bool fp4 = fp4_spec.block > 0;
  cc::KernelBuilder kb(
      (fp4 ? grouped_fp4_aligned_name(tb, fp4_spec.block) : grouped_tc_aligned_name(tb)) + "_" +
      std::string(dtype_name(dtype)));
  cc::Dim r, n, k, experts;
  cc::Buf x, w;
  Fp4Weights fp4w = fp4_spec;
  if (!fp4) {
    const TmaOperands op = declare_tma_operands(kb, dtype, tb);
    r = op.r, n = op.n, k = op.k, experts = op.experts, x = op.x, w = op.w;
  } else {
    // K a multiple of the step (no step reads codes past K: a zero code times a scale past the
    // end could be a NaN); w's rows of bytes 16-byte aligned for the boxes.
    r = kb.dim("R");
    n = kb.dim("N", {.min = 1, .divisible_by = tb ? 8 : 32});
    k = kb.dim("K", {.min = kTcK, .divisible_by = kTcK});
    experts = kb.dim("E");
    x = kb.input("x", dtype, {r, k});
    w = kb.input(
        "w", DType::U8,
        tb ? std::vector<cc::Val>{experts, n, k / 2} : std::vector<cc::Val>{experts, k, n / 2});
    fp4w.scale = kb.input("scale", DType::E8M0,
                          tb ? std::vector<cc::Val>{experts, n, k / fp4_spec.block}
                             : std::vector<cc::Val>{experts, k, n / fp4_spec.block});
  }
  cc::Buf offsets = kb.sorted_input("offsets", experts, r + 1);
  cc::Buf status = kb.input("status", DType::I32, {2});
  cc::Buf y = kb.output("y", dtype, {r, n});
  // Slots: floor(R / 128) + E + 1 (segment e's first at floor(offsets[e] / 128) + e + 1).
  kb.body({cc::ceildiv(n, kTcN), r / kTcM + experts + 1}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx n0 = s.block_idx(0) * kTcN, slot = s.block_idx(1);
    const cc::Val zero(int64_t{0});
    auto start = [&](const cc::Val& v) { return cc::max(cc::min(v, r), zero); };
    // The segment of this slot: the one e in [-1, E) whose slots [first(e), first(e + 1)) hold
    // it, found by E + 1 threads at once (each reads its segment's start and the next one's) and
    // written by that one thread; the analysis proves the shared store unique from the sorted
    // contract (two segments' slot ranges never overlap). The bounds below are read again from
    // offsets, so the proof of the tile's rows needs nothing of how e was found.
    cc::Buf found = s.alloc_shared("segment", DType::I32, {1});
    s.parallel(experts + 1, [&](cc::Idx c1) {
      cc::Val c = c1 - 1;
      cc::Val at = s.let(cc::to_i64(offsets(cc::max(c, zero))), "at");
      cc::Val after = s.let(cc::to_i64(offsets(cc::min(c + 1, experts - 1))), "after");
      cc::Val first = cc::select(c < 0, zero, start(at) / kTcM + c + 1);
      cc::Val next = start(after) / kTcM + c + 2;  // first(c + 1), for c + 1 < E
      s.if_then(first <= slot && (c + 1 >= experts || next > slot),
                [&] { found(cc::Val(int64_t{0})) = cc::to_i32(c); });
    });
    s.barrier();
    cc::Val e = s.let(
        cc::max(cc::min(cc::to_i64(found(cc::Val(int64_t{0}))), experts - 1), cc::Val(int64_t{-1})),
        "e");
    // The segment's bounds, from lets of the loads themselves (what the sorted contract speaks
    // of); e = -1 is the rows before the first segment, [0, offsets[0]).
    cc::Val first_load = s.let(cc::to_i64(offsets(cc::max(e, zero))), "seg_first");
    cc::Val next_load = s.let(cc::to_i64(offsets(cc::min(e + 1, experts - 1))), "seg_next");
    cc::Val lo = s.let(cc::select(e < 0, zero, start(first_load)), "lo");
    cc::Val hi = s.let(cc::select(e + 1 < experts, cc::max(cc::min(next_load, r), lo), r), "hi");
    cc::Val first_slot = s.let(cc::select(e < 0, zero, lo / kTcM + e + 1), "first_slot");
    cc::Val r0 = s.let(lo + (slot - first_slot) * kTcM, "r0");
    cc::Val present = s.let(status(0) < 0 && slot >= first_slot && r0 < hi, "present");
    TcAsyncStaging st = tc_async_staging(s, dtype, /*ta=*/false, tb, kTcM, kTcAsyncStages);
    const cc::Val we = cc::max(e, zero);
    if (fp4) unpack_fp4(s, st, fp4w, tb, we, n0, n);
    // A 0-or-1-trip loop, not an if: the pass holds barriers and gemms.
    s.serial(cc::select(present, cc::Val(int64_t{1}), zero), [&](cc::Idx) {
      s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { st.acc(i, j) = 0.0f; });
      TcAsyncBoxes boxes = expert_boxes(x, w, tb, r0, n0, we);
      if (fp4)
        boxes.b = [=](const cc::Val& j, int) {
          return tb ? w.region({we, n0, j * (kTcK / 2)}, {1, kTcN, kTcK / 2})
                    : w.region({we, j * kTcK, n0 / 2}, {1, kTcK, kTcN / 2});
        };
      // The rows before the first segment stay zeros: no K loop.
      s.serial(cc::select(e >= 0, cc::Val(int64_t{1}), zero),
               [&](cc::Idx) { tc_async_steps(s, st, boxes, k); });
      // Rows past the segment's end (the next expert's, computed and dropped) are not stored.
      tc_store_through_shared(s, dtype, {st.acc}, kTcM, r0, n0, hi, n,
                              [&](const cc::Val& row, const cc::Val& col) { return y(row, col); });
    });
  });
  return kb.build();
}

}  // namespace

cc::Kernel build_grouped_tc_aligned(DType dtype, bool tb) { return build_aligned(dtype, tb, {}); }

cc::Kernel build_grouped_fp4_aligned(DType dtype, bool tb, int64_t block) {
  TR_CHECK(block >= 2 && block % 2 == 0, "an fp4 scale block of an even width");
  return build_aligned(dtype, tb, {.block = block});
}

std::string grouped_wgrad_tc_name(bool tb) {
  return std::string("grouped_matmul_wgrad_tc_") + (tb ? "t" : "n") + "_128x128x64";
}

cc::Kernel build_grouped_wgrad_tc(DType dtype, bool tb) {
  cc::KernelBuilder kb(grouped_wgrad_tc_name(tb) + "_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), k = kb.dim("K"), n = kb.dim("N"), experts = kb.dim("E");
  cc::Buf x = kb.input("x", dtype, {r, k});
  cc::Buf dy = kb.input("dy", dtype, {r, n});
  cc::Buf offsets = kb.input("offsets", DType::I32, {experts});
  cc::Buf dw = kb.output(
      "dw", dtype, tb ? std::vector<cc::Val>{experts, n, k} : std::vector<cc::Val>{experts, k, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(k, kTcM), experts}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx n0 = s.let(s.block_idx(0) * kTcN, "n0"), k0 = s.let(s.block_idx(1) * kTcM, "k0");
    cc::Idx e = s.block_idx(2);
    const auto [lo, hi] = grouped_segment(s, offsets, e, experts, r);
    // Both operands are [rows, ..]: the gemm's K runs along their rows (k-outer staging).
    TcStaging st = tc_staging(s, dtype, /*a_k_major=*/false, /*b_k_major=*/false);
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcM, kTcN});
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
    tc_gemm_steps(s, st, {.buf = x, .r0 = k0, .rows = k}, {.buf = dy, .r0 = n0, .rows = n}, acc, lo,
                  hi);
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) {
      cc::Idx kc = k0 + i, nc = n0 + j;
      s.if_then(kc < k && nc < n, [&] {
        if (tb)
          dw(e, nc, kc) = acc(i, j);
        else
          dw(e, kc, nc) = acc(i, j);
      });
    });
  });
  return kb.build();
}

std::string grouped_wgrad_tc_async_name(bool tb) {
  return std::string("grouped_matmul_wgrad_tc_") + (tb ? "t" : "n") + "_64x128x64_tma" +
         std::to_string(kWgradStages);
}

// The wgrad's scheme on the tensor memory accelerator's K loop, 64 of K by 128 of N per block (one
// warpgroup) and three stages: a segment is ~2 steps of 64 rows on average (MoE at T = 1024), so
// the block's time is its prologue and epilogue, and 128 x 128 tiles with five stages (160 KB, 170
// registers) held an SM to one block at a time; these take 72 KB, so two or three blocks an SM
// overlap. Step j's boxes are the segment's rows
// [lo + 64 j, +64) of x (read as a transposed a: k0's two 64-wide panels) and of dy (N-major b).
// Rows past the segment's end land too (up to R; zeros after), so the last step's tiles are
// zeroed from row hi on before its gemm: every product past the end is +0 * +0, as the
// register-staged kernel reads. Empty segment: one step, all zeros.
cc::Kernel build_grouped_wgrad_tc_async(DType dtype, bool tb) {
  cc::KernelBuilder kb(grouped_wgrad_tc_async_name(tb) + "_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), k = kb.dim("K", {.min = 1, .divisible_by = 8}),
          n = kb.dim("N", {.min = 1, .divisible_by = 8}), experts = kb.dim("E");
  cc::Buf x = kb.input("x", dtype, {r, k});
  cc::Buf dy = kb.input("dy", dtype, {r, n});
  cc::Buf offsets = kb.input("offsets", DType::I32, {experts});
  cc::Buf dw = kb.output(
      "dw", dtype, tb ? std::vector<cc::Val>{experts, n, k} : std::vector<cc::Val>{experts, k, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(k, kWgradRows), experts},
          static_cast<int>(2 * kWgradRows), [&](cc::Scope& s) {
            // Not let-bound: the copies' origins must show themselves multiples of 8
            // (tile_verifier).
            cc::Idx n0 = s.block_idx(0) * kTcN, k0 = s.block_idx(1) * kWgradRows;
            cc::Idx e = s.block_idx(2);
            const auto [lo_v, hi_v] = grouped_segment(s, offsets, e, experts, r);
            const cc::Val lo = lo_v, hi = hi_v;  // plain names, captured by the lambdas
            TcAsyncStaging st =
                tc_async_staging(s, dtype, /*ta=*/true, /*tb=*/false, kWgradRows, kWgradStages);
            s.parallel(kWgradRows, kTcN, [&](cc::Idx i, cc::Idx j) { st.acc(i, j) = 0.0f; });
            cc::Val steps =
                s.let(cc::max(cc::ceildiv(hi - lo, cc::Val(kTcK)), cc::Val(int64_t{1})), "wsteps");
            // Rows of the last step still inside the segment.
            cc::Val valid = s.let(hi - (lo + (steps - 1) * kTcK), "valid");
            tc_async_steps(s, st,
                           {.a =
                                [&](const cc::Val& j, int h) {
                                  return x.region({lo + j * kTcK, k0 + h * 64}, {kTcK, 64});
                                },
                            .b =
                                [&](const cc::Val& j, int h) {
                                  return dy.region({lo + j * kTcK, n0 + h * 64}, {kTcK, 64});
                                }},
                           hi - lo, [&] {
                             // Only the rows past the end: a loop over every row with a guard
                             // was ~40% of the block's instructions (most segments end mid-step).
                             cc::Val past = s.let(cc::Val(kTcK) - valid, "past");
                             for (int64_t p = 0; p < kWgradRows / 64; ++p)
                               s.parallel(past, 64, [&](cc::Idx q, cc::Idx c) {
                                 st.as(0, p, valid + q, c) = 0.0f;
                               });
                             for (int64_t p = 0; p < kTcN / 64; ++p)
                               s.parallel(past, 64, [&](cc::Idx q, cc::Idx c) {
                                 st.bs(0, p, valid + q, c) = 0.0f;
                               });
                           });
            // dw's rows run along N, or transposed along K: either way 16-byte vectors. The
            // tile lies in dy's stage 0 (two panels of [64, 64]: 128 x 64 elements either way),
            // so the block's shared memory is its stages' 72 KB and three blocks fit an SM (with
            // a tile of its own, two).
            tc_store_through_shared(
                s, dtype, {st.acc}, kWgradRows, k0, n0, k, n,
                [&](const cc::Val& kc, const cc::Val& nc) {
                  return tb ? dw(e, nc, kc) : dw(e, kc, nc);
                },
                tb,
                [&](const cc::Val& r, const cc::Val& c) {
                  // (n, k) transposed: panel n / 64, row n % 64; else (k, n): row k, panel n / 64.
                  return tb ? st.bs(cc::Val(int64_t{0}), r / 64, r % 64, c)
                            : st.bs(cc::Val(int64_t{0}), c / 64, r, c % 64);
                });
          });
  return kb.build();
}

}  // namespace tilerun::kernels
