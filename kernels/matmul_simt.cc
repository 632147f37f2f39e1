// The matmul family's f32 kernel on the CUDA cores (matmul_simt.h).
#include "kernels/matmul_simt.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "compiler/base/check.h"
#include "compiler/ir/builder.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int64_t kBK = 16;  // K per group and step
constexpr int64_t kRM = kSimtRM, kRN = kSimtRN;
// A shared tile whose fastest axis is K gets this many pad columns, so that a warp's 16-byte
// reads of 4 consecutive k from different rows fall in distinct banks (and rows stay 16-byte
// aligned).
constexpr int64_t kPad = 4;

constexpr int64_t kMinBlocks = 128;  // about one block per SM of a large GPU
// K groups double while the block's groups stay under kTargetGroups over the grid and every
// group keeps at least kMinGroupK of K, up to kMaxGroups (shared memory; 32 groups measured
// worse at T = 4096: the 16x16 kernel is bound by its shared loads, bench/RESULTS.md).
constexpr int64_t kTargetGroups = 1024, kMinGroupK = 64, kMaxGroups = 8, kMaxGroupsBig = 4;
// Planned for this many rows whatever M is: G sets each output's chains (batch invariance).
constexpr int64_t kPlannedRows = 1024;
constexpr int64_t kSplitBlocks = 512, kMinSplitK = 1024;

// A batched kernel's tensors carry a leading axis: B where batched, 1 where shared.
std::vector<cc::Val> batched_shape(const BatchMode& batch, const cc::Dim& nb, bool batched,
                                   std::vector<cc::Val> dims) {
  if (batch.on) dims.insert(dims.begin(), batched ? cc::Val(nb) : cc::Val(1));
  return dims;
}

// a [M, K] ([K, M] transposed) and b [K, N] ([N, K] transposed), batched as `batch` says.
std::pair<cc::Buf, cc::Buf> declare_operands(cc::KernelBuilder& kb, DType dtype, bool ta, bool tb,
                                             const cc::Dim& m, const cc::Dim& n, const cc::Dim& k,
                                             const BatchMode& batch, const cc::Dim& nb) {
  using Dims = std::vector<cc::Val>;
  cc::Buf a = kb.input("a", dtype, batched_shape(batch, nb, batch.a, ta ? Dims{k, m} : Dims{m, k}));
  cc::Buf b = kb.input("b", dtype, batched_shape(batch, nb, batch.b, tb ? Dims{n, k} : Dims{k, n}));
  return {a, b};
}

}  // namespace

Tiling plan_matmul(int64_t n, int64_t k) {
  auto tiles = [&](int64_t t) { return ((kPlannedRows + t - 1) / t) * ((n + t - 1) / t); };
  bool big = tiles(32) >= kMinBlocks;
  Tiling t{.bm = big ? 32 : 16, .bn = big ? 32 : 16, .groups = 1};
  int64_t max_groups = big ? kMaxGroupsBig : kMaxGroups, blocks = tiles(t.bm);
  while (2 * t.groups <= max_groups && blocks * t.groups < kTargetGroups &&
         k >= 2 * t.groups * kMinGroupK)
    t.groups *= 2;
  // Still few blocks for a long K (the mHC projections, N = 24, K = 4096: 128 blocks of 128
  // threads, one an SM, 45 us under ncu for 4 us of bytes): K also splits into slices over grid
  // z, up to kSplitBlocks blocks, each slice at least kMinSplitK, then summed in slice order
  // (45 -> 26 us a kernel at T = 1024; a wash at T = 4096, whose grid was full: RESULTS.md).
  const int64_t kstep = t.groups * kBK;
  const int64_t splits = std::min(kSplitBlocks / blocks, k / kMinSplitK);
  if (!big && splits >= 2) {
    const int64_t steps = (k + kstep - 1) / kstep, per = (steps + splits - 1) / splits;
    t.splits = (steps + per - 1) / per;
    t.slice = per * kstep;
  }
  // The shape of the tiles sets no output's order (G and the slices above do), so it may
  // follow N and K further. A short K with one group (K <= kSimtShortK, the mHC data gradient
  // dmix fn^T: K = 24 over N = 4096) is one step of the whole K (no ragged second step of
  // zeros, no second pass through the pipeline), and with enough blocks 64x64 tiles: half the
  // global loads per output and a quarter of the blocks, each 256 threads.
  if (t.groups == 1 && k <= kSimtShortK) {
    t.bk = (k + 3) / 4 * 4;
    if (big && tiles(64) >= kMinBlocks) t.bm = t.bn = 64;
  }
  return t;
}

std::string matmul_name(bool ta, bool tb, const Tiling& t, BatchMode batch) {
  return std::string("matmul_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_" + std::to_string(t.bm) +
         "x" + std::to_string(t.bn) + "g" + std::to_string(t.groups) +
         (t.bk != kBK ? "k" + std::to_string(t.bk) : "") + (t.splits > 1 ? "_splitk" : "") +
         (batch.on ? std::string("_batch_") + (batch.a ? "a" : "") + (batch.b ? "b" : "") : "");
}

cc::Kernel build_matmul(DType dtype, bool ta, bool tb, const Tiling& tl, BatchMode batch) {
  cc::KernelBuilder kb(matmul_name(ta, tb, tl, batch) + "_" + std::string(dtype_name(dtype)));
  const bool split = tl.splits > 1;
  TR_CHECK(!(split && batch.on), "a batched matmul does not split K");
  TR_CHECK(tl.bk % 4 == 0 && (tl.groups == 1 || tl.bk == kBK), "K per group and step");
  // A short K's kernel (bk not 16, one group) is one step of its whole K: K <= bk.
  const bool one_step = !split && tl.groups == 1 && tl.bk != kBK;
  cc::Dim m = kb.dim("M"), n = kb.dim("N"),
          k = one_step ? kb.dim("K", {.max = tl.bk}) : kb.dim("K");
  cc::Dim nb = batch.on ? kb.dim("B") : cc::Dim();
  cc::Dim slice = split ? kb.dim("L", {.divisible_by = tl.groups * tl.bk}) : cc::Dim();
  cc::Dim splits = split ? kb.dim("S") : cc::Dim();
  const std::pair<cc::Buf, cc::Buf> ab = declare_operands(kb, dtype, ta, tb, m, n, k, batch, nb);
  const cc::Buf a = ab.first, b = ab.second;
  cc::Buf c = split ? kb.output("part", DType::F32, {splits, m, n})
                    : kb.output("c", dtype, batched_shape(batch, nb, true, {m, n}));
  const int64_t bm = tl.bm, bn = tl.bn, ty_n = tl.ty(), tx_n = tl.tx(), G = tl.groups;
  const int64_t bk = tl.bk, kstep = G * bk;  // K per group and step, per step of the block
  std::vector<cc::Val> grid = {cc::ceildiv(n, bn), cc::ceildiv(m, bm)};
  if (batch.on) grid.push_back(nb);
  if (split) grid.push_back(splits);
  kb.body(grid, tl.threads(), [&](cc::Scope& s) {
    cc::Idx bx = s.block_idx(0), by = s.block_idx(1);
    cc::Idx bz = batch.on || split ? s.block_idx(2) : cc::Val(0);
    // This block's K range: [k_lo, k_hi).
    cc::Val k_lo = split ? s.let(bz * slice, "k_lo") : cc::Val(0);
    cc::Val k_hi = split ? s.let(cc::min(k, k_lo + slice), "k_hi") : cc::Val(k);
    // Element (i, j) of an operand's matrix for this block's batch element.
    auto at = [&](const cc::Buf& buf, bool batched, const cc::Val& i, const cc::Val& j) {
      return batch.on ? buf(batched ? bz : cc::Val(0), i, j) : buf(i, j);
    };
    cc::Val steps = s.let(cc::ceildiv(k_hi - k_lo, cc::Val(kstep)), "steps");

    // A step's tiles in stored orientation: a [BM, G*BK] or [G*BK, BM], b [G*BK, BN] or
    // [BN, G*BK]; in shared memory two buffers of each, k-contiguous rows padded.
    std::vector<int64_t> a_tile = ta ? std::vector{kstep, bm} : std::vector{bm, kstep};
    std::vector<int64_t> b_tile = tb ? std::vector{bn, kstep} : std::vector{kstep, bn};
    int64_t a_cols = a_tile[1] + (ta ? 0 : kPad), b_cols = b_tile[1] + (tb ? kPad : 0);
    const int64_t a_buf = a_tile[0] * a_cols, b_buf = b_tile[0] * b_cols;
    // Flat: [buf][row][col]; afterwards also the groups' output tiles.
    cc::Buf as = s.alloc_shared("As", DType::F32, {std::max(2 * a_buf, G * bm * bn)});
    cc::Buf bs = s.alloc_shared("Bs", DType::F32, {2 * b_buf});
    auto a_sh = [&](const cc::Val& buf, const cc::Val& r0, const cc::Val& r1) {
      return as(buf * a_buf + r0 * a_cols + r1);
    };
    auto b_sh = [&](const cc::Val& buf, const cc::Val& r0, const cc::Val& r1) {
      return bs(buf * b_buf + r0 * b_cols + r1);
    };
    // After the K loop: group g's output tile, [g][row][col] in the a tiles' space.
    auto red_at = [&](const cc::Val& g, const cc::Val& r, const cc::Val& cl) {
      return as(g * (bm * bn) + r * bn + cl);
    };
    cc::Buf ra = s.alloc_fragment("ra", dtype, a_tile);  // the next step's tiles
    cc::Buf rb = s.alloc_fragment("rb", dtype, b_tile);
    // The micro tile, one fragment per output.
    std::vector<std::vector<cc::Buf>> acc(kRM);
    for (int64_t i = 0; i < kRM; ++i)
      for (int64_t j = 0; j < kRN; ++j)
        acc[i].push_back(s.alloc_fragment("acc" + std::to_string(i) + std::to_string(j), DType::F32,
                                          {G, ty_n, tx_n}));
    auto per_thread = [&](const std::function<void(cc::Idx, cc::Idx, cc::Idx)>& body) {
      s.parallel(G, ty_n, tx_n, body);
    };
    // Thread (g, ty, tx)'s rows and columns within the block tile.
    auto row_of = [&](const cc::Idx& ty, int64_t i) { return ta ? ty * kRM + i : ty + ty_n * i; };
    auto col_of = [&](const cc::Idx& tx, int64_t j) { return tb ? tx + tx_n * j : tx * kRN + j; };

    // Step ko's tiles into registers. A tile wholly inside its tensor (every tile but the
    // ragged edges') is read without per-element guards, so its loads issue back to back; an
    // edge tile goes through copy, which reads zeros outside.
    auto load_tile = [&](const cc::Buf& frag, const cc::Buf& src, bool batched,
                         const std::vector<int64_t>& tile, bool k_major, const cc::Val& k0,
                         const cc::Val& o, const cc::Val& extent) {
      int64_t k_len = k_major ? tile[0] : tile[1], o_len = k_major ? tile[1] : tile[0];
      std::vector<cc::Val> origin = k_major ? std::vector{k0, o} : std::vector{o, k0};
      std::vector<cc::Val> rows_cols =
          k_major ? std::vector<cc::Val>{k, extent} : std::vector<cc::Val>{extent, k};
      s.if_then_else(
          k0 + k_len <= k && o + o_len <= extent,
          [&] {
            s.parallel(tile[0], tile[1], [&](cc::Idx r0, cc::Idx r1) {
              frag(r0, r1) = at(src, batched, origin[0] + r0, origin[1] + r1);
            });
          },
          [&] {
            if (!batch.on) return s.copy(frag, src.region(origin, tile));
            s.parallel(tile[0], tile[1], [&](cc::Idx r0, cc::Idx r1) {
              cc::Idx i = origin[0] + r0, j = origin[1] + r1;
              s.if_then_else(
                  i < rows_cols[0] && j < rows_cols[1],
                  [&] { frag(r0, r1) = at(src, batched, i, j); }, [&] { frag(r0, r1) = 0.0f; });
            });
          });
    };
    auto load = [&](const cc::Val& ko) {
      cc::Val k0 = split ? k_lo + ko * kstep : ko * kstep;
      load_tile(ra, a, batch.a, a_tile, ta, k0, by * bm, m);
      load_tile(rb, b, batch.b, b_tile, !tb, k0, bx * bn, n);
    };
    auto store = [&](const cc::Val& buf) {  // the registers into shared buffer `buf`
      s.parallel(a_tile[0], a_tile[1],
                 [&](cc::Idx r0, cc::Idx r1) { a_sh(buf, r0, r1) = ra(r0, r1); });
      s.parallel(b_tile[0], b_tile[1],
                 [&](cc::Idx r0, cc::Idx r1) { b_sh(buf, r0, r1) = rb(r0, r1); });
    };

    per_thread([&](cc::Idx g, cc::Idx ty, cc::Idx tx) {
      for (auto& row : acc)
        for (cc::Buf& f : row) f(g, ty, tx) = 0.0f;
    });
    // Iteration ko loads step ko's tiles into registers, runs the fma loop on step ko - 1's
    // shared tiles meanwhile, then stores step ko's into the other buffer: one load, one fma
    // loop and one store in the program, and one barrier per step.
    auto fma_step = [&](const cc::Val& prev) {  // the fma loop over shared buffer `prev`
      per_thread([&](cc::Idx g, cc::Idx ty, cc::Idx tx) {
        for (int64_t kk = 0; kk < bk; ++kk) {  // unrolled: constant shared offsets
          cc::Idx kq = g * bk + kk;            // k within the step
          std::vector<cc::Val> av, bv;
          for (int64_t i = 0; i < kRM; ++i) {
            cc::Idx r = row_of(ty, i);
            av.push_back(s.let(ta ? a_sh(prev, kq, r) : a_sh(prev, r, kq), "a"));
          }
          for (int64_t j = 0; j < kRN; ++j) {
            cc::Idx cl = col_of(tx, j);
            bv.push_back(s.let(tb ? b_sh(prev, cl, kq) : b_sh(prev, kq, cl), "b"));
          }
          for (int64_t i = 0; i < kRM; ++i)
            for (int64_t j = 0; j < kRN; ++j)
              acc[i][j](g, ty, tx) = cc::fma(av[i], bv[j], acc[i][j](g, ty, tx));
        }
      });
    };
    if (one_step) {  // K <= BK: no pipeline, nothing held in registers across the fma loop
      load(cc::Val(0));
      store(cc::Val(0));
      s.barrier();
      fma_step(cc::Val(0));
      s.barrier();  // red_at below overwrites the a tile
    } else {
      s.serial(steps + 1, [&](cc::Idx ko) {
        cc::Val cur = s.let(ko % 2, "cur");  // the buffer step ko goes to
        cc::Val more = s.let(ko < steps, "more");
        s.if_then(more, [&] { load(ko); });
        s.if_then(ko > 0, [&] { fma_step(s.let(1 - cur, "prev")); });
        s.if_then(more, [&] { store(cur); });
        s.barrier();  // the next step reads what was stored, and overwrites what was read
      });
    }

    // Every group's output tile into red_at, then c = their sum in group order.
    per_thread([&](cc::Idx g, cc::Idx ty, cc::Idx tx) {
      for (int64_t i = 0; i < kRM; ++i)
        for (int64_t j = 0; j < kRN; ++j)
          red_at(g, row_of(ty, i), col_of(tx, j)) = acc[i][j](g, ty, tx);
    });
    s.barrier();
    auto write = [&](const cc::Idx& r, const cc::Idx& cl, const cc::Idx& row, const cc::Idx& col) {
      cc::Val sum = red_at(cc::Val(0), r, cl);
      for (int64_t g = 1; g < G; ++g) sum = s.let(sum + red_at(cc::Val(g), r, cl), "sum");
      if (split)
        c(bz, row, col) = sum;
      else
        at(c, true, row, col) = sum;
    };
    // A tile wholly inside c (all but the ragged edges') is written without guards, 4
    // consecutive columns a thread (16-byte stores where N is a multiple of 4); an edge tile
    // element by element under its guard.
    s.if_then_else((by + 1) * bm <= m && (bx + 1) * bn <= n,
                   [&] {
                     s.annotate_layout(4);
                     s.parallel(bm, bn, [&](cc::Idx r, cc::Idx cl) {
                       write(r, cl, s.let(by * bm + r, "row"), s.let(bx * bn + cl, "col"));
                     });
                   },
                   [&] {
                     s.parallel(bm, bn, [&](cc::Idx r, cc::Idx cl) {
                       cc::Idx row = s.let(by * bm + r, "row"), col = s.let(bx * bn + cl, "col");
                       s.if_then(row < m && col < n, [&] { write(r, cl, row, col); });
                     });
                   });
  });
  return kb.build();
}

namespace {
constexpr int64_t kSkinnyRows = 64, kSkinnyStep = 32, kSkinnyWarps = 8;
constexpr int64_t kSkinnyHalves = kSkinnyRows / 32;  // rows a lane: l, l + 32
constexpr int64_t kSkinnyKPerWarp = kSkinnyStep / kSkinnyWarps;
}  // namespace

int64_t skinny_columns(int64_t n) { return (n + 7) / 8 * 8; }

std::string matmul_skinny_name(bool ta, bool tb, int64_t nc, BatchMode batch) {
  return std::string("matmul_skinny_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_n" +
         std::to_string(nc) +
         (batch.on ? std::string("_batch_") + (batch.a ? "a" : "") + (batch.b ? "b" : "") : "");
}

cc::Kernel build_matmul_skinny(DType dtype, bool ta, bool tb, int64_t nc, BatchMode batch) {
  TR_CHECK(nc % 8 == 0 && nc <= kSkinnyMaxN, "skinny columns");
  cc::KernelBuilder kb(matmul_skinny_name(ta, tb, nc, batch) + "_" +
                       std::string(dtype_name(dtype)));
  cc::Dim m = kb.dim("M"), n = kb.dim("N", {.max = nc}), k = kb.dim("K");
  cc::Dim slice = kb.dim("L", {.min = kSkinnyStep, .divisible_by = kSkinnyStep});
  cc::Dim splits = kb.dim("S");
  cc::Dim nb = batch.on ? kb.dim("B") : cc::Dim();
  // Batched: a leading axis on a and b (B where batched, 1 where shared), part's rows per
  // element (element z's rows at z·M), grid z over the elements.
  const std::pair<cc::Buf, cc::Buf> ab = declare_operands(kb, dtype, ta, tb, m, n, k, batch, nb);
  const cc::Buf a = ab.first, b = ab.second;
  cc::Buf part =
      kb.output("part", DType::F32, {splits, batch.on ? cc::Val(nb) * cc::Val(m) : cc::Val(m), n});
  const int64_t bm = kSkinnyRows, ks = kSkinnyStep, warps = kSkinnyWarps;
  std::vector<cc::Val> grid = {cc::ceildiv(m, bm), splits};
  if (batch.on) grid.push_back(nb);
  kb.body(grid, static_cast<int>(warps * 32), [&](cc::Scope& s) {
    cc::Idx m0 = s.let(s.block_idx(0) * bm, "m0"), bz = s.block_idx(1);
    cc::Idx z = batch.on ? s.block_idx(2) : cc::Val(0);
    auto at = [&](const cc::Buf& buf, bool batched, const cc::Val& i, const cc::Val& j) {
      return batch.on ? buf(batched ? z : cc::Val(0), i, j) : buf(i, j);
    };
    cc::Val k_lo = s.let(bz * slice, "k_lo");
    cc::Val k_hi = s.let(cc::min(cc::Val(k), k_lo + slice), "k_hi");
    cc::Val steps = s.let(cc::ceildiv(cc::max(k_hi - k_lo, cc::Val(0)), cc::Val(ks)), "steps");
    // Shared: two k-major steps of a ([ks][bm + 1]) and of b ([ks][nc]); after the K loop the
    // a space holds the warps' partial tiles [warp][column][row].
    // b's rows unpadded (nc floats, a multiple of 16 bytes): a thread's reads of neighbouring
    // columns (the same addresses across the warp: broadcasts) are 16-byte aligned, which lets
    // the compiler merge them (not measured apart from the 32-row variant's other changes).
    const int64_t a_row = bm + 1, b_row = nc;
    const int64_t a_buf = ks * a_row, b_buf = ks * b_row;
    cc::Buf as = s.alloc_shared("As", DType::F32, {std::max(2 * a_buf, warps * nc * 32)});
    cc::Buf bs = s.alloc_shared("Bs", DType::F32, {2 * b_buf});
    auto a_sh = [&](const cc::Val& buf, const cc::Val& kk, const cc::Val& r) {
      return as(buf * a_buf + kk * a_row + r);
    };
    auto b_sh = [&](const cc::Val& buf, const cc::Val& kk, const cc::Val& j) {
      return bs(buf * b_buf + kk * b_row + j);
    };
    // The next step's tiles in registers, in stored orientation (global reads along memory rows).
    const std::vector<int64_t> a_tile = ta ? std::vector{ks, bm} : std::vector{bm, ks};
    const std::vector<int64_t> b_tile = tb ? std::vector{nc, ks} : std::vector{ks, nc};
    cc::Buf ra = s.alloc_fragment("ra", dtype, a_tile);
    cc::Buf rb = s.alloc_fragment("rb", dtype, b_tile);
    std::vector<std::vector<cc::Buf>> acc(kSkinnyHalves);  // [half][column]
    for (int64_t h = 0; h < kSkinnyHalves; ++h)
      for (int64_t j = 0; j < nc; ++j)
        acc[h].push_back(s.alloc_fragment("acc" + std::to_string(h) + "_" + std::to_string(j),
                                          DType::F32, {warps, 32}));
    auto load = [&](const cc::Val& step) {
      cc::Val k0 = s.let(k_lo + step * ks, "k0");
      s.parallel(a_tile[0], a_tile[1], [&](cc::Idx r0, cc::Idx r1) {
        cc::Val kk = ta ? cc::Val(r0) : cc::Val(r1), rr = ta ? cc::Val(r1) : cc::Val(r0);
        cc::Val kg = s.let(k0 + kk, "kg"), row = s.let(m0 + rr, "row");
        s.if_then_else(
            kg < k_hi && row < m,
            [&] { ra(r0, r1) = ta ? at(a, batch.a, kg, row) : at(a, batch.a, row, kg); },
            [&] { ra(r0, r1) = 0.0f; });
      });
      s.parallel(b_tile[0], b_tile[1], [&](cc::Idx r0, cc::Idx r1) {
        cc::Val kk = tb ? cc::Val(r1) : cc::Val(r0), j = tb ? cc::Val(r0) : cc::Val(r1);
        cc::Val kg = s.let(k0 + kk, "kg");
        s.if_then_else(
            kg < k_hi && j < n,
            [&] { rb(r0, r1) = tb ? at(b, batch.b, j, kg) : at(b, batch.b, kg, j); },
            [&] { rb(r0, r1) = 0.0f; });
      });
    };
    auto store = [&](const cc::Val& buf) {
      s.parallel(a_tile[0], a_tile[1], [&](cc::Idx r0, cc::Idx r1) {
        if (ta)
          a_sh(buf, r0, r1) = ra(r0, r1);
        else
          a_sh(buf, r1, r0) = ra(r0, r1);
      });
      s.parallel(b_tile[0], b_tile[1], [&](cc::Idx r0, cc::Idx r1) {
        if (tb)
          b_sh(buf, r1, r0) = rb(r0, r1);
        else
          b_sh(buf, r0, r1) = rb(r0, r1);
      });
    };
    s.parallel(warps, 32, [&](cc::Idx w, cc::Idx l) {
      for (auto& half : acc)
        for (cc::Buf& f : half) f(w, l) = 0.0f;
    });
    // As build_matmul: step ko's tiles load while the fma loop runs on step ko - 1's.
    s.serial(steps + 1, [&](cc::Idx ko) {
      cc::Val cur = s.let(ko % 2, "cur");
      cc::Val more = s.let(ko < steps, "more");
      s.if_then(more, [&] { load(ko); });
      s.if_then(ko > 0, [&] {
        cc::Val prev = s.let(1 - cur, "prev");
        s.parallel(warps, 32, [&](cc::Idx w, cc::Idx l) {
          for (int64_t q = 0; q < kSkinnyKPerWarp; ++q) {  // unrolled: constant offsets
            cc::Idx kk = w * kSkinnyKPerWarp + q;
            std::vector<cc::Val> av;
            for (int64_t h = 0; h < kSkinnyHalves; ++h)
              av.push_back(s.let(a_sh(prev, kk, l + h * 32), "a"));
            for (int64_t j = 0; j < nc; ++j) {
              cc::Val bv = s.let(b_sh(prev, kk, cc::Val(j)), "b");
              for (int64_t h = 0; h < kSkinnyHalves; ++h)
                acc[h][j](w, l) = cc::fma(av[h], bv, acc[h][j](w, l));
            }
          }
        });
      });
      s.if_then(more, [&] { store(cur); });
      s.barrier();
    });
    // Each half's warp partials [warp][column][row] (rows innermost: a warp's stores hit
    // distinct banks), then each output's sum over the warps in order.
    for (int64_t h = 0; h < kSkinnyHalves; ++h) {
      s.barrier();  // the K loop's tiles, or the last half's partials, are read
      s.parallel(warps, 32, [&](cc::Idx w, cc::Idx l) {
        for (int64_t j = 0; j < nc; ++j) as((w * nc + j) * 32 + l) = acc[h][j](w, l);
      });
      s.barrier();
      s.parallel(nc, 32, [&](cc::Idx j, cc::Idx r) {
        cc::Val row = s.let(m0 + (h * 32 + r), "row");
        s.if_then(row < m && j < n, [&] {
          cc::Val sum = as(j * 32 + r);
          for (int64_t w = 1; w < warps; ++w) sum = s.let(sum + as((w * nc + j) * 32 + r), "sum");
          part(bz, batch.on ? z * m + row : row, j) = sum;
        });
      });
    }
  });
  return kb.build();
}

}  // namespace tilerun::kernels
