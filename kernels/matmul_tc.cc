// over 600 lines: the tensor-core matmul kernels (matmul_tc.h) are one tiling with two ways of
// staging the tiles (registers, TMA), each with its split-K and batched forms, sharing the K loops
// and the epilogue that grouped_matmul and sparse attention reuse.
#include "kernels/matmul_tc.h"

#include "compiler/base/check.h"
#include "compiler/ir/builder.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace {

// ---- Staged through registers ---------------------------------------------------------------
// One 128 x 128 output tile per block of two warpgroups (256 threads), K in steps of 64: both
// operands staged K-major into 128B-swizzled shared tiles (a as [128, 64], b as [128 (n), 64];
// a transposed global operand is transposed on its way from registers to shared memory), then
// one gemm (ir.h Gemm: wgmma on sm_90a, the tensor core's model on the CPU). The shared tiles
// rotate through kTcStages buffers and each gemm may be left running (kGemmsInFlight: 1 is what
// three buffers allow; main keeps 0, each gemm waited for as the H200 verified, until
// tensor_core_gpu_test has run 1 there) while the block stores the next step's tiles and loads
// the one after into registers: one barrier per step. Three buffers, not two: step ko overwrites
// the tiles of gemm ko - 3, which every warpgroup waited for in step ko - 2, before step ko - 1's
// barrier. The last gemm waits for all. 96 KB of dynamic shared memory. The tiling is a
// constant, so it depends on neither M nor the device: every output is the same chain of
// 16-wide tensor-core steps in k order whatever the number of rows (batch invariance). Ragged
// edges read zeros.
// (kTcM, kTcN, kTcK and kTcThreads: matmul_tc.h.)
constexpr int kTcStages = 3, kGemmsInFlight = 0;
// The asynchronous kernel's buffers (its copies run kAsyncStages - 1 steps ahead of the gemms).
constexpr int kAsyncStages = kTcAsyncStages;

}  // namespace

std::string tc_kernel_name(const std::string& base, DType dtype) {
  if (dtype != DType::F32) return base + "_" + std::string(dtype_name(dtype));
  std::string name = base;
  if (const size_t at = name.find("x64"); at != std::string::npos) name.replace(at, 3, "x32");
  const std::string tma = "_tma" + std::to_string(kTcAsyncStages);
  if (const size_t at = name.find(tma); at != std::string::npos)
    name.replace(at, tma.size(), "_tma" + std::to_string(tc_async_stages(dtype)));
  return name + "_tf32";
}

std::string tc_matmul_name(bool ta, bool tb) {
  return std::string("matmul_tc_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_128x128x64_s" +
         std::to_string(kTcStages);
}

TcStaging tc_staging(cc::Scope& s, DType dtype, bool a_k_major, bool b_k_major) {
  const int64_t kk = tc_k_step(dtype);
  const cc::Swizzle sw = cc::tensor_core_swizzle(128, static_cast<int>(dtype_bytes(dtype, 1)));
  TcStaging st{.a_k_major = a_k_major, .b_k_major = b_k_major, .k_step = kk};
  for (int i = 0; i < kTcStages; ++i) {
    st.as.push_back(s.alloc_shared("As" + std::to_string(i), dtype, {kTcM, kk}, sw));
    st.bs.push_back(s.alloc_shared("Bs" + std::to_string(i), dtype, {kTcN, kk}, sw));
  }
  // The next step's tiles in registers, in the operands' dtype (staging moves bits:
  // lower_storage_types copies a 16-bit float to its own dtype raw). A K-major operand (a
  // [m, k], b^T [n, k]) is held as its [rows, 64] tile; a k-outer one (a^T [k, m], b [k, n]) as
  // [rows / 8, 64, 8]: a thread still reads 8 consecutive global elements (one 16-byte load),
  // but the threads of a warp run along k, so its transposing 2-byte stores fill consecutive
  // addresses of one shared row instead of 16 rows that share a bank under the swizzle.
  auto frag_shape = [kk](bool k_major, int64_t rows) {
    return k_major ? std::vector<int64_t>{rows, kk} : std::vector<int64_t>{rows / 8, kk, 8};
  };
  st.ra = s.alloc_fragment("ra", dtype, frag_shape(a_k_major, kTcM));
  st.rb = s.alloc_fragment("rb", dtype, frag_shape(b_k_major, kTcN));
  return st;
}

void tc_gemm_steps(cc::Scope& s, const TcStaging& st, const TcOperand& a, const TcOperand& b,
                   const cc::Buf& acc, const cc::Val& k_lo, const cc::Val& k_hi) {
  // k_lo undefined: the whole K axis of 2-d operands, read as build_tc_matmul always has.
  const bool whole = !k_lo.defined();
  const int64_t ks = st.k_step;  // the K step
  cc::Val steps = s.let(cc::ceildiv(whole ? k_hi : k_hi - k_lo, cc::Val(ks)), "steps");
  // A tile wholly inside its operand loads unguarded (its loads issue back to back); an edge
  // tile reads zeros outside (outside [k_lo, k_hi) too).
  auto load_tile = [&](const cc::Buf& frag, const TcOperand& op, bool k_major, int64_t r_len,
                       const cc::Val& k0) {
    const cc::Val &r0 = op.r0, &rows = op.rows;
    auto at = [&](const cc::Val& row, const cc::Val& kk) {
      return op.lead.defined() ? op.buf(op.lead, row, kk) : op.buf(row, kk);
    };
    auto at_k_outer = [&](const cc::Val& kk, const cc::Val& row) {
      return op.lead.defined() ? op.buf(op.lead, kk, row) : op.buf(kk, row);
    };
    cc::Val inside = k0 + ks <= k_hi && r0 + r_len <= rows;
    if (k_major) {
      std::vector<int64_t> tile{r_len, ks};
      s.if_then_else(
          inside,
          [&] {
            s.parallel(r_len, ks, [&](cc::Idx i, cc::Idx j) { frag(i, j) = at(r0 + i, k0 + j); });
          },
          [&] {
            if (whole && !op.lead.defined()) return s.copy(frag, op.buf.region({r0, k0}, tile));
            s.parallel(r_len, ks, [&](cc::Idx i, cc::Idx j) {
              s.if_then_else(
                  k0 + j < k_hi && r0 + i < rows, [&] { frag(i, j) = at(r0 + i, k0 + j); },
                  [&] { frag(i, j) = 0.0f; });
            });
          });
      return;
    }
    s.if_then_else(
        inside,
        [&] {
          s.parallel(r_len / 8, ks, 8, [&](cc::Idx c, cc::Idx kk, cc::Idx l) {
            frag(c, kk, l) = at_k_outer(k0 + kk, r0 + c * 8 + l);
          });
        },
        [&] {
          s.parallel(r_len / 8, ks, 8, [&](cc::Idx c, cc::Idx kk, cc::Idx l) {
            s.if_then_else(
                k0 + kk < k_hi && r0 + c * 8 + l < rows,
                [&] { frag(c, kk, l) = at_k_outer(k0 + kk, r0 + c * 8 + l); },
                [&] { frag(c, kk, l) = 0.0f; });
          });
        });
  };
  auto load = [&](const cc::Val& ko) {
    cc::Val k0 = s.let(whole ? ko * ks : k_lo + ko * ks, "k0");
    load_tile(st.ra, a, st.a_k_major, kTcM, k0);
    load_tile(st.rb, b, st.b_k_major, kTcN, k0);
  };
  // Registers into the K-major shared tiles.
  auto store_tile = [&](const cc::Buf& dst, const cc::Buf& frag, bool k_major, int64_t r_len) {
    if (k_major) {
      s.parallel(r_len, ks, [&](cc::Idx i, cc::Idx j) { dst(i, j) = frag(i, j); });
    } else {
      s.parallel(r_len / 8, ks, 8,
                 [&](cc::Idx c, cc::Idx kk, cc::Idx l) { dst(c * 8 + l, kk) = frag(c, kk, l); });
    }
  };
  auto store = [&](int i) {
    store_tile(st.as[i], st.ra, st.a_k_major, kTcM);
    store_tile(st.bs[i], st.rb, st.b_k_major, kTcN);
  };
  // Step ko goes through buffer (steps - 1 - ko) % kTcStages (from the end: the last step's is
  // buffer 0): registers to that buffer (an if per buffer), one barrier, step ko + 1's loads,
  // and its gemm runs on (kGemmsInFlight) while the next step stores. A gemm names its tiles, so
  // 0-or-1-trip loops pick it (gemms may not sit under an if); the loads are written once (a
  // loop unrolled by three spilled). The last step is peeled off, unconditional, buffer 0,
  // pending 0: unless every path to the epilogue passes a wait, ptxas waits in the loop's
  // latch (C7517) or serialises every wgmma (C7514). K = 0 adds products of zeros to +0.
  const cc::Val zero(int64_t{0}), one(int64_t{1});
  load(zero);
  s.serial(cc::max(steps - 1, zero), [&](cc::Idx ko) {
    cc::Val slot = s.let((steps - 1 - ko) % kTcStages, "slot");
    for (int i = 0; i < kTcStages; ++i) s.if_then(slot == i, [&] { store(i); });
    s.barrier();
    load(ko + 1);  // in flight during the gemm
    for (int i = 0; i < kTcStages; ++i)
      s.serial(cc::select(slot == i, one, zero), [&](cc::Idx) {
        s.gemm(acc, st.as[i], st.bs[i], /*trans_a=*/false, /*trans_b=*/true, kGemmsInFlight);
      });
  });
  store(0);
  s.barrier();
  s.gemm(acc, st.as[0], st.bs[0], /*trans_a=*/false, /*trans_b=*/true, /*pending=*/0);
}

cc::Kernel build_tc_matmul(DType dtype, bool ta, bool tb) {
  cc::KernelBuilder kb(tc_kernel_name(tc_matmul_name(ta, tb), dtype));
  cc::Dim m = kb.dim("M"), n = kb.dim("N"), k = kb.dim("K");
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf c = kb.output("c", dtype, {m, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(m, kTcM)}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx bx = s.block_idx(0), by = s.block_idx(1);
    TcStaging st = tc_staging(s, dtype, !ta, tb);
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcM, kTcN});
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
    tc_gemm_steps(s, st, {.buf = a, .r0 = by * kTcM, .rows = m},
                  {.buf = b, .r0 = bx * kTcN, .rows = n}, acc, cc::Val(), k);
    s.copy(c.region({by * kTcM, bx * kTcN}, {kTcM, kTcN}), acc);
  });
  return kb.build();
}

// ---- Split K ----------------------------------------------------------------------------------
// Dims M, N, K, L (the slice, a multiple of kTcK so that a slice's 16-wide tensor-core steps are
// those of the whole K axis) and S (the splits: grid z). A slice past K (none as matmul.cc
// splits) runs no step and writes zeros.

std::string tc_splitk_name(bool ta, bool tb) { return tc_matmul_name(ta, tb) + "_splitk"; }

cc::Kernel build_tc_matmul_splitk(DType dtype, bool ta, bool tb) {
  cc::KernelBuilder kb(tc_kernel_name(tc_splitk_name(ta, tb), dtype));
  cc::Dim m = kb.dim("M"), n = kb.dim("N"), k = kb.dim("K");
  cc::Dim slice = kb.dim("L", {.min = kTcK, .divisible_by = kTcK}), splits = kb.dim("S");
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf part = kb.output("part", DType::F32, {splits, m, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(m, kTcM), splits}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx n0 = s.let(s.block_idx(0) * kTcN, "n0"), m0 = s.let(s.block_idx(1) * kTcM, "m0");
    cc::Idx z = s.block_idx(2);
    cc::Val k_lo = s.let(cc::min(z * slice, k), "k_lo");
    cc::Val k_hi = s.let(cc::min(k_lo + slice, k), "k_hi");
    TcStaging st = tc_staging(s, dtype, !ta, tb);
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcM, kTcN});
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
    tc_gemm_steps(s, st, {.buf = a, .r0 = m0, .rows = m}, {.buf = b, .r0 = n0, .rows = n}, acc,
                  k_lo, k_hi);
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) {
      cc::Idx row = m0 + i, col = n0 + j;
      s.if_then(row < m && col < n, [&] { part(z, row, col) = acc(i, j); });
    });
  });
  return kb.build();
}

std::string tc_splitk_sum_name(bool flat) {
  return flat ? "matmul_splitk_sum_flat" : "matmul_splitk_sum";
}

// c[r, j] = ((part[0] + part[1]) + ..) + part[S - 1] at [r, j], f32 adds in split order, rounded
// once to c's dtype. A block per 256 columns of a row, the rows on grid x (up to 2^31 - 1; grid y
// stops at 65535, which a batch folded into the rows passes); `flat`, for narrow rows, a thread
// per element of the flat [M, N] (N = 24 left 232 of a block's 256 threads idle).
cc::Kernel build_tc_splitk_sum(DType dtype, bool flat) {
  constexpr int64_t kThreads = 256;
  cc::KernelBuilder kb(tc_splitk_sum_name(flat) + "_" + std::string(dtype_name(dtype)));
  cc::Dim m = kb.dim("M"), n = kb.dim("N"), splits = kb.dim("S", {.min = 1});
  cc::Buf part = kb.input("part", DType::F32, {splits, m, n});
  cc::Buf c = kb.output("c", dtype, {m, n});
  std::vector<cc::Val> grid = {m, cc::ceildiv(n, kThreads)};
  if (flat) grid = {cc::ceildiv(m * n, kThreads)};
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Idx c0 = s.let(s.block_idx(flat ? 0 : 1) * kThreads, "c0");
    // Thread t's element of c, and whether it lies inside c.
    struct Element {
      cc::Val row, col, inside;
    };
    auto at = [&](const cc::Idx& t) {
      cc::Val e = c0 + t;
      return flat ? Element{e / n, e % n, e < m * n} : Element{s.block_idx(0), e, e < n};
    };
    cc::Buf sum = s.alloc_fragment("sum", DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      const Element x = at(t);
      s.if_then(x.inside, [&] { sum(t) = part(0, x.row, x.col); });
    });
    if (!flat) {
      s.serial(splits - 1, [&](cc::Idx z) {
        s.parallel(kThreads, [&](cc::Idx t) {
          const Element x = at(t);
          s.if_then(x.inside, [&] { sum(t) = sum(t) + part(z + 1, x.row, x.col); });
        });
      });
    } else {
      // Narrow c: kLoadsAhead partials loaded before they are added (in split order: the same
      // adds). One at a time, each add waited on its own load: 16 slices of [1024, 24] took
      // 4.7 us, 3.0 this way (H200). A block a row keeps one at a time: its wide rows have
      // loads enough in flight, and four ahead measured slower there (5.3 -> 6.5 us, T = 4096).
      constexpr int64_t kLoadsAhead = 4;
      s.serial(cc::ceildiv(splits - 1, cc::Val(kLoadsAhead)), [&](cc::Idx zb) {
        s.parallel(kThreads, [&](cc::Idx t) {
          const Element x = at(t);
          s.if_then(x.inside, [&] {
            std::vector<cc::Val> z, v;
            for (int64_t q = 0; q < kLoadsAhead; ++q) {
              z.push_back(s.let(zb * kLoadsAhead + (q + 1), "z"));
              v.push_back(s.let(part(cc::min(z.back(), splits - 1), x.row, x.col), "p"));
            }
            for (int64_t q = 0; q < kLoadsAhead; ++q)
              sum(t) = cc::select(z[q] < splits, sum(t) + v[q], sum(t));
          });
        });
      });
    }
    s.parallel(kThreads, [&](cc::Idx t) {
      const Element x = at(t);
      s.if_then(x.inside, [&] { c(x.row, x.col) = sum(t); });
    });
  });
  return kb.build();
}

// ---- Staged by the tensor memory accelerator ---------------------------------------------------
// The same output tile (128 x 128 on two warpgroups, or 64 x 128 on one: `rows`) and 64-wide
// K steps, but the tiles go from global to shared memory without the registers, by the tensor
// memory accelerator: thread 0 issues one box a tile (copy_tma), which completes on its stage's
// mbarrier, kAsyncStages buffers deep. (Through copy_async, every thread issued 16-byte copies
// with their own address and guard arithmetic on each step's critical path: 454.6 us for 4096^3
// on the H200, where the boxes take 308.3.) a [m, k] lands K-major in a [rows, 64] tile, a
// transposed one as m's panels [rows / 64, 64 (k), 64 (m)]; b as given: transposed ([n, k])
// K-major in a [128, 64] tile, else ([k, n], rows of N) as n's two panels [2, 64 (k), 64 (n)],
// 128-byte rows under the same swizzle, which one gemm of n = 128 reads (the wgmma descriptor's
// leading offset steps from one panel to the next). Needs K, and N when b is not transposed,
// multiples of 8 (16-byte aligned rows, as a tensor map asks); the kernel states it with its
// dims' divisibility.
//
// Step ko reads stage slot(ko) = (steps - 1 - ko) % S of the stacks (counted from the end, so
// the last step, peeled off with pending 0, is stage 0). The copies run A = S - 1 steps ahead
// of the gemms: at step ko the block waits until step ko's tiles landed (the (ko / S)-th phase
// of the stage's mbarrier ended), issues gemm ko and waits for gemm ko - 1, a barrier proves
// every warpgroup past that wait, then the copies of step ko + A go out into the stage of step
// ko - 1 while gemm ko runs on. (Tried and not kept: no barrier a step, each thread releasing its
// stage on a second mbarrier that thread 0 waits for before refilling it, S steps ahead: 369 us
// for 4096^3 against 308.) The copies and the gemms name their stage at run time (ir.h
// Gemm::stage), so the loop is written once. Zero-filled edges; at least one step, so K = 0 adds
// zeros to +0. The chain of each output is the one of build_tc_matmul: the same bits, whatever M.

bool tc_short_k(DType dtype, int64_t rows, int64_t k) {
  const int64_t steps = (k + tc_k_step(dtype) - 1) / tc_k_step(dtype);
  return rows == kTcM && dtype_bytes(dtype, 1) == 2 && steps <= kTcShortKSteps;
}

std::string tc_async_name(bool ta, bool tb, int64_t rows, bool n8, bool addend, bool rows_first,
                          bool short_k) {
  const int stages = rows == kTcBigRows ? kBigTileStages : short_k ? kShortKStages : kAsyncStages;
  return std::string("matmul_tc_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_" +
         std::to_string(rows) + "x128x64_tma" + std::to_string(stages) + (tb && !n8 ? "_n1" : "") +
         (addend ? "_add" : "") + (rows_first ? "_rf" : "");
}

TcAsyncStaging tc_async_staging(cc::Scope& s, DType dtype, bool ta, bool tb, int64_t rows,
                                int stages, bool again) {
  TR_CHECK(rows == 64 || rows == kTcM || rows == kTcBigRows,
           "a tensor-core tile of 64, 128 or 256 rows");
  TR_CHECK(rows != kTcBigRows || dtype_bytes(dtype, 1) == 2, "a 256-row tile of 16-bit elements");
  TR_CHECK(stages >= 2, "at least two stages (the copies run stages - 1 steps ahead)");
  // f32 (tf32) operands only K-major: the wgmma reads no MN-major tf32 tile.
  TR_CHECK(dtype != DType::F32 || (!ta && tb), "a tf32 tile is K-major (a [m, k], b [n, k])");
  const int64_t ks = tc_k_step(dtype);
  const cc::Swizzle sw = cc::tensor_core_swizzle(128, static_cast<int>(dtype_bytes(dtype, 1)));
  TcAsyncStaging st{
      .ta = ta, .tb = tb, .rows = rows, .stages = stages, .again = again, .k_step = ks};
  st.full = s.alloc_shared("full", DType::I64, {stages});
  // A transposed a as m's panels [64 (k), 64 (m)]: 128-byte rows under the swizzle.
  st.as = s.alloc_shared(
      "As", dtype,
      ta ? std::vector<int64_t>{stages, rows / 64, ks, 64} : std::vector<int64_t>{stages, rows, ks},
      sw);
  st.bs = s.alloc_shared(
      "Bs", dtype,
      tb ? std::vector<int64_t>{stages, kTcN, ks} : std::vector<int64_t>{stages, kTcN / 64, ks, 64},
      sw);
  st.acc = s.alloc_fragment("acc", DType::F32, {rows, kTcN});
  return st;
}

void tc_async_steps(cc::Scope& s, const TcAsyncStaging& st, const TcAsyncBoxes& boxes,
                    const cc::Val& k, const std::function<void()>& mask_last) {
  const int64_t ks = st.k_step;
  cc::Val steps = s.let(cc::max(cc::ceildiv(k, cc::Val(ks)), cc::Val(int64_t{1})), "steps");
  const cc::Val zero(int64_t{0});
  // Steps the copies run ahead of the gemms: every stage but the one whose gemm runs. A step's
  // copies go out once the gemm of the step before it is done (its stage is the one they fill),
  // which is after this step's gemm was issued: the tensor cores stay busy while the block waits
  // and the copies are issued. (Issued before the step's gemm, they ran one stage less ahead.)
  const int ahead = st.stages - 1;
  // In 32 bits (steps - 1 - j < 2^31: K is at most 2^31 - 1): a 64-bit modulo by a constant
  // is some twenty instructions on the step's critical path, a 32-bit one four.
  const cc::Val stages32 = cc::literal(cc::Type::I32, st.stages);
  auto slot = [&](const cc::Val& j) { return cc::to_i64(cc::to_i32(steps - 1 - j) % stages32); };
  // The parity of the phase of its stage's mbarrier that step j's tiles end: its (j / S)-th.
  auto parity = [&](const cc::Val& j) {
    return cc::to_i64(cc::to_i32(j) / stages32 % cc::literal(cc::Type::I32, 2));
  };
  const bool landing = !st.b_landing.name().empty();
  // Step j's boxes into its stage, from thread 0, completing on the stage's mbarrier.
  auto issue = [&](const cc::Val& j) {
    cc::Val sl = s.let(slot(j), "slot");
    s.if_then(j < steps, [&] {
      for (int h = 0; h < (st.ta ? st.rows / 64 : 1); ++h)
        s.copy_tma(st.ta ? st.as.region({sl, h, 0, 0}, {1, 1, ks, 64})
                         : st.as.region({sl, 0, 0}, {1, st.rows, ks}),
                   boxes.a(j, h), st.full, sl);
      if (landing) {
        std::vector<cc::Val> origin{sl};
        std::vector<int64_t> extent{1};
        for (int64_t e : st.b_landing_tile) {
          origin.push_back(cc::Val(int64_t{0}));
          extent.push_back(e);
        }
        s.copy_tma(st.b_landing.region(origin, extent), boxes.b(j, 0), st.full, sl);
        return;
      }
      for (int h = 0; h < (st.tb ? 1 : kTcN / 64); ++h)
        s.copy_tma(st.tb ? st.bs.region({sl, 0, 0}, {1, kTcN, ks})
                         : st.bs.region({sl, h, 0, 0}, {1, 1, ks, 64}),
                   boxes.b(j, h), st.full, sl);
    });
  };
  const int b_boxes = landing || st.tb ? 1 : 2;
  // Left running: the gemm runs on into the next step (every gemm of the step before has
  // finished when the thread leaves a step, which the buffer rotation needs).
  auto gemm = [&](const cc::Val& stage, bool left_running) {
    s.gemm_at(stage, st.acc, st.as, st.bs, /*trans_a=*/st.ta, /*trans_b=*/st.tb,
              left_running ? 1 : 0);
  };
  s.mbarrier_init(st.full, (st.ta ? static_cast<int>(st.rows / 64) : 1) + b_boxes);
  s.barrier();
  for (int d = 0; d < ahead; ++d) issue(cc::Val(int64_t{d}));
  s.serial(steps - 1, [&](cc::Idx ko) {
    s.mbarrier_wait(st.full, slot(ko), parity(ko));
    if (st.unpack_b) {
      st.unpack_b(s.let(slot(ko), "unpack"), ko);
      s.barrier();  // every thread's share of the tile written before the gemm reads it
    }
    gemm(s.let(slot(ko), "cur"), true);  // returns once the gemm of step ko - 1 is done
    s.barrier();                         // in every warpgroup: step ko - 1's stage is free
    issue(ko + ahead);
  });
  s.mbarrier_wait(st.full, zero, parity(steps - 1));
  if (st.unpack_b) st.unpack_b(zero, steps - 1);
  s.barrier();
  if (st.again) s.mbarrier_inval(st.full);  // every copy landed, every thread past its waits
  if (mask_last) {
    mask_last();
    s.barrier();
  }
  gemm(zero, false);
}

// Step j's boxes of a ([m, k], or [k, m] read as m's panels) and b, from k_lo: the origins are
// written out (not let-bound) so that the verifier sees them multiples of 8.
// `ks`: the K step (tc_k_step).
TcAsyncBoxes tc_async_boxes(const cc::Buf& a, const cc::Buf& b, bool ta, bool tb, const cc::Val& m0,
                            const cc::Val& n0, const cc::Val& k_lo, int64_t ks,
                            int64_t rows = kTcM) {
  return {.a =
              [=](const cc::Val& j, int h) {
                return ta ? a.region({k_lo + j * ks, m0 + h * 64}, {ks, 64})
                          : a.region({m0, k_lo + j * ks}, {rows, ks});
              },
          .b =
              [=](const cc::Val& j, int h) {
                return tb ? b.region({n0, k_lo + j * ks}, {kTcN, ks})
                          : b.region({k_lo + j * ks, n0 + h * 64}, {ks, 64});
              }};
}

// a's and b's rows 16-byte aligned: K, and M when a is transposed, N when b is not.
struct AsyncDims {
  cc::Dim m, n, k;
};
// `n8`: N a multiple of 8 with a transposed b too, so that c's rows are 16-byte aligned for the
// epilogue's vectors (tc_async_store; without it, its stores stay scalar).
AsyncDims async_dims(cc::KernelBuilder& kb, bool ta, bool tb, bool n8) {
  return {kb.dim("M", {.min = 0, .divisible_by = ta ? 8 : 1}),
          kb.dim("N", {.min = 1, .divisible_by = tb && !n8 ? 1 : 8}),
          kb.dim("K", {.min = 0, .divisible_by = 8})};
}

// The epilogue through shared memory. Written straight from the fragments, c's elements went
// out as 2-byte stores (each thread's pairs of columns in 8 rows), 64 store instructions a
// thread, each warp's touching 8 rows; here each accumulator is rounded to c's dtype into a
// [rows, 128 + 8] tile (the pad of 16 bytes a row puts the 8 rows of a warp's fragment stores
// on distinct banks), and after a barrier a tile wholly inside c goes out as 16-byte vectors,
// 8 columns a thread along c's rows (N is a multiple of 8); an edge tile element by element
// under guards. The same one rounding of the same f32, so the same bits.
void tc_store_through_shared(cc::Scope& s, DType dtype, const std::vector<cc::Buf>& frags,
                             int64_t rows, const cc::Val& m0, const cc::Val& n0, const cc::Val& m,
                             const cc::Val& n,
                             const std::function<cc::Ref(const cc::Val&, const cc::Val&)>& c_at,
                             bool transposed, const TcTileAt& tile, const TcValueAt& addend) {
  const int lanes = static_cast<int>(16 / dtype_bytes(dtype, 1));
  const int64_t width = kTcN / static_cast<int64_t>(frags.size());
  cc::Val whole = s.let(m0 + rows <= m && n0 + kTcN <= n, "whole");
  // Transposed, the tile is [128 (n), rows + 8 (m)] and c's rows run along m. A warp's fragment
  // stores then touch 4 column pairs x 8 rows, 16 distinct words on 16 banks.
  cc::Buf own;
  if (!tile)
    own = transposed ? s.alloc_shared("cs", dtype, {kTcN, rows + 8})
                     : s.alloc_shared("cs", dtype, {rows, kTcN + 8});
  auto cs = [&](const cc::Val& r, const cc::Val& c) { return tile ? tile(r, c) : own(r, c); };
  // A tile wholly inside c: through the shared tile (a 0-or-1-trip loop, not an if: the pass
  // holds a barrier).
  s.serial(cc::select(whole, cc::Val(int64_t{1}), cc::Val(int64_t{0})), [&](cc::Idx) {
    if (tile) s.barrier();  // every warp is done with the stages the tile lies in
    for (size_t h = 0; h < frags.size(); ++h)
      s.parallel(rows, width, [&](cc::Idx i, cc::Idx j) {
        cc::Val col = static_cast<int64_t>(h) * width + j;
        if (transposed)
          cs(col, i) = frags[h](i, j);
        else
          cs(i, col) = frags[h](i, j);
      });
    s.barrier();
    s.annotate_layout(lanes);
    // The innermost loop index runs along c's rows.
    if (transposed)
      s.parallel(kTcN, rows, [&](cc::Idx j, cc::Idx i) { c_at(m0 + i, n0 + j) = cs(j, i); });
    else if (addend)
      s.parallel(rows, kTcN, [&](cc::Idx i, cc::Idx j) {
        c_at(m0 + i, n0 + j) = cs(i, j) + addend(m0 + i, n0 + j);
      });
    else
      s.parallel(rows, kTcN, [&](cc::Idx i, cc::Idx j) { c_at(m0 + i, n0 + j) = cs(i, j); });
  });
  // An edge tile straight from the fragments, element by element under guards. (Through the
  // shared tile with scalar reads, NVRTC allocated the edge loop's registers differently from
  // one compilation to the next in one process: two cubins for one source.)
  s.if_then(!whole, [&] {
    for (size_t h = 0; h < frags.size(); ++h)
      s.parallel(rows, width, [&](cc::Idx i, cc::Idx j) {
        cc::Idx row = m0 + i, col = n0 + static_cast<int64_t>(h) * width + j;
        s.if_then(row < m && col < n, [&] {
          c_at(row, col) = frags[h](i, j);
          // The product rounded (stored), read back by the thread that stored it, then added.
          if (addend) c_at(row, col) = cc::Val(c_at(row, col)) + addend(row, col);
        });
      });
  });
}

cc::Kernel build_tc_matmul_async(DType dtype, bool ta, bool tb, int64_t rows, bool n8, bool addend,
                                 bool rows_first, bool short_k) {
  TR_CHECK(!short_k || (rows == kTcM && dtype_bytes(dtype, 1) == 2),
           "the short-K kernel is a 128-row tile of 16-bit operands");
  cc::KernelBuilder kb(
      tc_kernel_name(tc_async_name(ta, tb, rows, n8, addend, rows_first, short_k), dtype));
  const auto [m, n, k] = async_dims(kb, ta, tb, n8);
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf add = addend ? kb.input("addend", dtype, {m, n}) : cc::Buf{};
  cc::Buf c = kb.output("c", dtype, {m, n});
  // Two threads a row: a warpgroup per 64 rows; a 256-row tile's two warpgroups 128 rows each.
  const bool big = rows == kTcBigRows;
  const cc::Val row_tiles = cc::ceildiv(m, rows), col_tiles = cc::ceildiv(n, kTcN);
  kb.body(
      rows_first ? std::vector<cc::Val>{row_tiles, col_tiles}
                 : std::vector<cc::Val>{col_tiles, row_tiles},
      big ? kTcThreads : static_cast<int>(2 * rows), [&](cc::Scope& s) {
        cc::Idx m0 = s.block_idx(rows_first ? 0 : 1) * rows;
        cc::Idx n0 = s.block_idx(rows_first ? 1 : 0) * kTcN;
        TcAsyncStaging st = tc_async_staging(s, dtype, ta, tb, rows,
                                             big       ? kBigTileStages
                                             : short_k ? kShortKStages
                                                       : tc_async_stages(dtype));
        s.parallel(rows, kTcN, [&](cc::Idx i, cc::Idx j) { st.acc(i, j) = 0.0f; });
        tc_async_steps(
            s, st, tc_async_boxes(a, b, ta, tb, m0, n0, cc::Val(int64_t{0}), st.k_step, rows), k);
        TcValueAt plus;
        if (addend)
          plus = [&](const cc::Val& r, const cc::Val& col) { return cc::Val(add(r, col)); };
        // A 256-row (or short-K) tile's epilogue in a's first two stages (free once every gemm
        // is done), its column c in stage c / 64: [rows, 64] per stage, or m's [64 (k), 64 (m)]
        // panels when a is transposed (the same 128-byte swizzled rows; a warp's fragment stores, 8
        // rows of one 16-byte chunk, land on 8 chunks of distinct banks).
        TcTileAt tile;
        if (big || short_k)
          tile = [&](const cc::Val& r, const cc::Val& col) {
            return ta ? st.as(col / 64, r / 64, r % 64, col % 64) : st.as(col / 64, r, col % 64);
          };
        tc_store_through_shared(
            s, dtype, {st.acc}, st.rows, m0, n0, m, n,
            [&](const cc::Val& r, const cc::Val& col) { return c(r, col); }, false, tile, plus);
      });
  return kb.build();
}

// Batched: grid axis z over c's batch elements, each the product build_tc_matmul_async computes
// from its own matrices (a and b each [B, .., ..], or [1, .., ..] when shared), so the same
// chains and the same bits as the rank-2 product of each element.
std::string tc_async_batch_name(bool ta, bool tb, bool a_batched, bool b_batched, int64_t rows,
                                bool n8, TcBatchMid mid) {
  std::string name =
      tc_async_name(ta, tb, rows, n8) + "_batch_" + (a_batched ? "a" : "") + (b_batched ? "b" : "");
  if (mid.a || mid.b || mid.c)
    name += std::string("_mid") + (mid.a ? "a" : "") + (mid.b ? "b" : "") + (mid.c ? "c" : "");
  return name;
}

cc::Kernel build_tc_matmul_async_batch(DType dtype, bool ta, bool tb, bool a_batched,
                                       bool b_batched, int64_t rows, bool n8, TcBatchMid mid) {
  cc::KernelBuilder kb(
      tc_kernel_name(tc_async_batch_name(ta, tb, a_batched, b_batched, rows, n8, mid), dtype));
  const auto [m, n, k] = async_dims(kb, ta, tb, n8);
  cc::Dim batch = kb.dim("B", {.min = 1});
  // An operand's shape: its matrix [r, q] with the batch (count nz) leading or in the middle.
  using Vals = std::vector<cc::Val>;
  auto shape = [&](bool is_mid, const cc::Val& nz, const cc::Val& r, const cc::Val& q) {
    return is_mid ? Vals{r, nz, q} : Vals{nz, r, q};
  };
  const cc::Val na = a_batched || mid.a ? cc::Val(batch) : cc::Val(int64_t{1});
  const cc::Val nb = b_batched || mid.b ? cc::Val(batch) : cc::Val(int64_t{1});
  cc::Buf a = kb.input("a", dtype, ta ? shape(mid.a, na, k, m) : shape(mid.a, na, m, k));
  cc::Buf b = kb.input("b", dtype, tb ? shape(mid.b, nb, n, k) : shape(mid.b, nb, k, n));
  cc::Buf c = kb.output("c", dtype, shape(mid.c, batch, m, n));
  // Matrix z's box [r0, r0 + rs) x [q0, q0 + qs) of an operand.
  auto box = [](const cc::Buf& t, bool is_mid, const cc::Val& z, const cc::Val& r0,
                const cc::Val& q0, int64_t rs, int64_t qs) {
    return is_mid ? t.region({r0, z, q0}, {rs, 1, qs}) : t.region({z, r0, q0}, {1, rs, qs});
  };
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(m, rows), batch}, static_cast<int>(2 * rows),
          [&](cc::Scope& s) {
            cc::Idx m0 = s.block_idx(1) * rows, n0 = s.block_idx(0) * kTcN, z = s.block_idx(2);
            const cc::Val za = a_batched || mid.a ? cc::Val(z) : cc::Val(int64_t{0});
            const cc::Val zb = b_batched || mid.b ? cc::Val(z) : cc::Val(int64_t{0});
            TcAsyncStaging st = tc_async_staging(s, dtype, ta, tb, rows, tc_async_stages(dtype));
            s.parallel(rows, kTcN, [&](cc::Idx i, cc::Idx j) { st.acc(i, j) = 0.0f; });
            // tc_async_boxes' boxes, as the matrix of a 3-d tensor.
            tc_async_steps(s, st,
                           {.a =
                                [&](const cc::Val& j, int h) {
                                  const int64_t ks = st.k_step;
                                  return ta ? box(a, mid.a, za, j * ks, m0 + h * 64, ks, 64)
                                            : box(a, mid.a, za, m0, j * ks, rows, ks);
                                },
                            .b =
                                [&](const cc::Val& j, int h) {
                                  const int64_t ks = st.k_step;
                                  return tb ? box(b, mid.b, zb, n0, j * ks, kTcN, ks)
                                            : box(b, mid.b, zb, j * ks, n0 + h * 64, ks, 64);
                                }},
                           k);
            tc_store_through_shared(s, dtype, {st.acc}, st.rows, m0, n0, m, n,
                                    [&](const cc::Val& r, const cc::Val& col) {
                                      return mid.c ? c(r, z, col) : c(z, r, col);
                                    });
          });
  return kb.build();
}

// Split K on the TMA loop: build_tc_matmul_splitk's slices (L a multiple of kTcK, so a
// slice's boxes never reach into the next one; past K they read zeros).
std::string tc_async_splitk_name(bool ta, bool tb) {
  return tc_async_name(ta, tb, kTcM, true) + "_splitk";
}

cc::Kernel build_tc_matmul_async_splitk(DType dtype, bool ta, bool tb) {
  cc::KernelBuilder kb(tc_kernel_name(tc_async_splitk_name(ta, tb), dtype));
  const auto [m, n, k] = async_dims(kb, ta, tb, false);
  cc::Dim slice = kb.dim("L", {.min = kTcK, .divisible_by = kTcK}), splits = kb.dim("S");
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf part = kb.output("part", DType::F32, {splits, m, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(m, kTcM), splits}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx m0 = s.block_idx(1) * kTcM, n0 = s.block_idx(0) * kTcN;
    cc::Idx z = s.block_idx(2);
    cc::Val k_lo = cc::min(z * slice, k);
    cc::Val k_hi = s.let(cc::min(k_lo + slice, k), "k_hi");
    TcAsyncStaging st = tc_async_staging(s, dtype, ta, tb, kTcM, tc_async_stages(dtype));
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { st.acc(i, j) = 0.0f; });
    tc_async_steps(s, st, tc_async_boxes(a, b, ta, tb, m0, n0, k_lo, st.k_step), k_hi - k_lo);
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) {
      cc::Idx row = m0 + i, col = n0 + j;
      s.if_then(row < m && col < n, [&] { part(z, row, col) = st.acc(i, j); });
    });
  });
  return kb.build();
}

}  // namespace tilerun::kernels
