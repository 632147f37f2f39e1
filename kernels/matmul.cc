// Matrix multiplication, with optional transposes of either operand. f32: strict fma chains on
// the CUDA cores, 32x32 (or, below 128 such tiles, 16x16) tiles, 4x4 outputs per thread, K split
// over up to 8 thread groups of the block (group g takes every k with (k / 16) % G == g), their
// tiles added in group order; double-buffered shared tiles, the next step prefetched into
// registers. bf16/f16: the tensor cores (a `gemm` per 64 of K over 128x128 tiles, below).
#include "compiler/base/check.h"
#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// c[M,N] = op(a)[M,K] * op(b)[K,N], op = optional transpose.
std::vector<TensorType> infer_matmul(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "a");
  expect_rank(in[0], 2, "a");
  expect_float(in[1], "b");
  expect_rank(in[1], 2, "b");
  if (in[1].dtype != in[0].dtype)
    throw ShapeError("input 'b' is " + to_string(in[1]) + ", expected dtype " +
                     std::string(dtype_name(in[0].dtype)) + " like 'a'");
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  int64_t m = ta ? in[0].shape[1] : in[0].shape[0];
  int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
  int64_t kb = tb ? in[1].shape[1] : in[1].shape[0];
  int64_t n = tb ? in[1].shape[0] : in[1].shape[1];
  if (k != kb)
    throw ShapeError("input 'b' is " + to_string(in[1]) + ", expected " + std::to_string(k) +
                     (tb ? " columns" : " rows") + " to match the inner dim of 'a' " +
                     to_string(in[0]));
  return {TensorType{in[0].dtype, {m, n}}};
}

// Element (i, j) of op(t) for a row-major matrix t.
double at(const RefTensor& t, bool transposed, int64_t i, int64_t j) {
  return transposed ? t.data[j * t.shape[1] + i] : t.data[i * t.shape[1] + j];
}

std::vector<RefTensor> ref_matmul(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &a = in[0], &b = in[1];
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  int64_t n = tb ? b.shape[0] : b.shape[1];
  RefTensor c = ref_zeros({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at(a, ta, i, p) * at(b, tb, p, j);
      c.data[i * n + j] = s;
    }
  return {c};
}

GradOp matmul_op(std::string a, std::string b, bool ta, bool tb, std::string out) {
  return {"matmul",
          {std::move(a), std::move(b)},
          {std::move(out)},
          {{"transpose_a", ta}, {"transpose_b", tb}}};
}

// With A' = op(a), B' = op(b) and C = A'B':  dA' = dC B'^T,  dB' = A'^T dC. A transposed operand
// gets the transpose of its gradient, (dA')^T = B' dC^T and (dB')^T = dC^T A', so every case is
// one matmul whose transpose flags absorb op().
std::vector<GradOp> grad_matmul(const std::vector<TensorType>&, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  std::vector<GradOp> ops;
  if (needs[0])
    ops.push_back(ta ? matmul_op("x1", "dy0", tb, true, "dx0")      // a = A'^T: B' dC^T
                     : matmul_op("dy0", "x1", false, !tb, "dx0"));  // a = A': dC B'^T
  if (needs[1])
    ops.push_back(tb ? matmul_op("dy0", "x0", true, ta, "dx1")      // b = B'^T: dC^T A'
                     : matmul_op("x0", "dy0", !ta, false, "dx1"));  // b = B': A'^T dC
  return ops;
}

// ---- Tile kernels --------------------------------------------------------------------------
//
// One kernel per transpose pair and tiling: a BM x BN output tile per block, and per thread an
// RM x RN micro tile of outputs in registers (one single-element fragment per output, so the
// fma loop is written out with every a and b value loaded from shared memory once). K goes in
// steps through double-buffered shared tiles, the next step's tiles loaded into registers while
// the current ones are used.
//
// A small output with a long K (too few tiles to fill the GPU) splits K inside the block: G
// groups of threads each compute the whole tile, group g over every k with (k / BK) % G == g,
// then their tiles are added through shared memory in group order. G and the tiling are
// functions of (M, N, K) and the constants below only, never of the grid or the device, so each
// output is always the same G fma chains (each in ascending k, from +0) added in the same order,
// on every backend. No second kernel, no scratch, no atomics.

constexpr int64_t kBK = 16;  // K per group and step
constexpr int64_t kRM = 4, kRN = 4;
// A shared tile whose fastest axis is K gets this many pad columns, so that a warp's 16-byte
// reads of 4 consecutive k from different rows fall in distinct banks (and rows stay 16-byte
// aligned).
constexpr int64_t kPad = 4;

// The two tilings: 32x32 tiles (8x8 threads per group), and 16x16 tiles (4x4 threads per
// group) for outputs with fewer than kMinBlocks 32x32 tiles. With G groups, each K step of the
// block covers G * BK of K and group g takes the g-th BK of it.
struct Tiling {
  int64_t bm, bn, groups;
  int64_t ty() const { return bm / kRM; }
  int64_t tx() const { return bn / kRN; }
  int threads() const { return static_cast<int>(groups * ty() * tx()); }
};
constexpr int64_t kMinBlocks = 128;  // about one block per SM of a large GPU
// K groups double while the block's groups stay under kTargetGroups over the grid and every
// group keeps at least kMinGroupK of K, up to kMaxGroups (shared memory).
constexpr int64_t kTargetGroups = 1024, kMinGroupK = 64, kMaxGroups = 8, kMaxGroupsBig = 4;

Tiling plan_matmul(int64_t m, int64_t n, int64_t k) {
  auto tiles = [&](int64_t t) { return ((m + t - 1) / t) * ((n + t - 1) / t); };
  bool big = tiles(32) >= kMinBlocks;
  Tiling t{.bm = big ? 32 : 16, .bn = big ? 32 : 16, .groups = 1};
  int64_t max_groups = big ? kMaxGroupsBig : kMaxGroups, blocks = tiles(t.bm);
  while (2 * t.groups <= max_groups && blocks * t.groups < kTargetGroups &&
         k >= 2 * t.groups * kMinGroupK)
    t.groups *= 2;
  return t;
}

// "matmul_nt_16x16g8": transposes of a and b as BLAS spells them (n: as stored, t: transposed),
// the block tile and the K groups.
std::string matmul_name(bool ta, bool tb, const Tiling& t) {
  return std::string("matmul_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_" + std::to_string(t.bm) +
         "x" + std::to_string(t.bn) + "g" + std::to_string(t.groups);
}

// c = op(a) op(b) for one pair of transpose flags. Parameters: a, b, c; M, N, K.
//
// Step ko loads the K range [ko * G * BK, (ko + 1) * G * BK) of a and b (tiles past K read as
// zeros) into registers while the fma loop works on the previous step's shared tiles; group g
// uses k in [g * BK, (g + 1) * BK) of each step, so its fma chain runs over its k in ascending
// order. Tiles are kept in the operands' stored orientation (global reads run along memory
// rows whatever the flags), k-contiguous ones with kPad more columns. Within its group, thread
// (ty, tx) owns rows ty * RM + i when a is transposed (its tile is k-major, so the RM values
// are adjacent: one 16-byte read) and ty + TY * i otherwise, and likewise columns tx * RN + j
// when b is k-major (not transposed) and tx + TX * j otherwise. Every loop over the block's
// threads is a parallel over (group, ty, tx) with one trip, so a thread's coordinates are
// plain loop indices and every index map is linear. At the end the groups' tiles go through
// shared memory (the a tiles' space, free by then), and one pass adds them in group order and
// writes c row-contiguously.
cc::Kernel build_matmul(DType dtype, bool ta, bool tb, const Tiling& tl) {
  cc::KernelBuilder kb(matmul_name(ta, tb, tl) + "_" + std::string(dtype_name(dtype)));
  cc::Dim m = kb.dim("M"), n = kb.dim("N"), k = kb.dim("K");
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf c = kb.output("c", dtype, {m, n});
  const int64_t bm = tl.bm, bn = tl.bn, ty_n = tl.ty(), tx_n = tl.tx(), G = tl.groups;
  const int64_t kstep = G * kBK;  // K per step of the block
  kb.body({cc::ceildiv(n, bn), cc::ceildiv(m, bm)}, tl.threads(), [&](cc::Scope& s) {
    cc::Idx bx = s.block_idx(0), by = s.block_idx(1);
    cc::Val steps = s.let(cc::ceildiv(k, cc::Val(kstep)), "steps");

    // A step's tiles in stored orientation: a [BM, G*BK] or [G*BK, BM], b [G*BK, BN] or
    // [BN, G*BK]; in shared memory two buffers of each, k-contiguous rows padded.
    std::vector<int64_t> a_tile = ta ? std::vector{kstep, bm} : std::vector{bm, kstep};
    std::vector<int64_t> b_tile = tb ? std::vector{bn, kstep} : std::vector{kstep, bn};
    int64_t a_cols = a_tile[1] + (ta ? 0 : kPad), b_cols = b_tile[1] + (tb ? kPad : 0);
    const int64_t a_buf = a_tile[0] * a_cols, b_buf = b_tile[0] * b_cols;
    TR_CHECK(2 * a_buf >= G * bm * bn, "the a tiles hold the groups' output tiles");
    cc::Buf as = s.alloc_shared("As", DType::F32, {2 * a_buf});  // flat: [buf][row][col]
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
    auto load_tile = [&](const cc::Buf& frag, const cc::Buf& src, const std::vector<int64_t>& tile,
                         bool k_major, const cc::Val& k0, const cc::Val& o, const cc::Val& extent) {
      int64_t k_len = k_major ? tile[0] : tile[1], o_len = k_major ? tile[1] : tile[0];
      std::vector<cc::Val> origin = k_major ? std::vector{k0, o} : std::vector{o, k0};
      s.if_then_else(
          k0 + k_len <= k && o + o_len <= extent,
          [&] {
            s.parallel(tile[0], tile[1], [&](cc::Idx r0, cc::Idx r1) {
              frag(r0, r1) = src(origin[0] + r0, origin[1] + r1);
            });
          },
          [&] { s.copy(frag, src.region(origin, tile)); });
    };
    auto load = [&](const cc::Val& ko) {
      cc::Val k0 = ko * kstep;
      load_tile(ra, a, a_tile, ta, k0, by * bm, m);
      load_tile(rb, b, b_tile, !tb, k0, bx * bn, n);
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
    s.serial(steps + 1, [&](cc::Idx ko) {
      cc::Val cur = s.let(ko % 2, "cur");  // the buffer step ko goes to
      cc::Val more = s.let(ko < steps, "more");
      s.if_then(more, [&] { load(ko); });
      s.if_then(ko > 0, [&] {
        cc::Val prev = s.let(1 - cur, "prev");
        per_thread([&](cc::Idx g, cc::Idx ty, cc::Idx tx) {
          for (int64_t kk = 0; kk < kBK; ++kk) {  // unrolled: constant shared offsets
            cc::Idx kq = g * kBK + kk;            // k within the step
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
      });
      s.if_then(more, [&] { store(cur); });
      s.barrier();  // the next step reads what was stored, and overwrites what was read
    });

    // Every group's output tile into red_at, then c = their sum in group order.
    per_thread([&](cc::Idx g, cc::Idx ty, cc::Idx tx) {
      for (int64_t i = 0; i < kRM; ++i)
        for (int64_t j = 0; j < kRN; ++j)
          red_at(g, row_of(ty, i), col_of(tx, j)) = acc[i][j](g, ty, tx);
    });
    s.barrier();
    s.parallel(bm, bn, [&](cc::Idx r, cc::Idx cl) {
      cc::Idx row = s.let(by * bm + r, "row"), col = s.let(bx * bn + cl, "col");
      s.if_then(row < m && col < n, [&] {
        cc::Val sum = red_at(cc::Val(0), r, cl);
        for (int64_t g = 1; g < G; ++g) sum = s.let(sum + red_at(cc::Val(g), r, cl), "sum");
        c(row, col) = sum;
      });
    });
  });
  return kb.build();
}

// ---- Tensor-core kernels (bf16, f16) ---------------------------------------------------------
//
// One 128 x 128 output tile per block of two warpgroups (256 threads), K in steps of 64: both
// operands staged K-major into 128B-swizzled shared tiles (a as [128, 64], b as [128 (n), 64];
// a transposed global operand is transposed on its way from registers to shared memory), then
// one gemm (ir.h Gemm: wgmma on sm_90a, the tensor core's model on the CPU). Step ko + 1's
// tiles are loaded into registers before step ko's gemm, so the global loads are in flight while
// the tensor cores work; they go to shared memory after the gemm (one set of tiles: 32 KB). The
// tiling is a constant, so it depends on neither M nor the device: every output is the same chain
// of 16-wide tensor-core steps in k order whatever the number of rows (batch invariance). Ragged
// edges read zeros.
constexpr int64_t kTcM = 128, kTcN = 128, kTcK = 64;
constexpr int kTcThreads = 256;

std::string tc_matmul_name(bool ta, bool tb) {
  return std::string("matmul_tc_") + (ta ? "t" : "n") + (tb ? "t" : "n") + "_128x128x64";
}

cc::Kernel build_tc_matmul(DType dtype, bool ta, bool tb) {
  cc::KernelBuilder kb(tc_matmul_name(ta, tb) + "_" + std::string(dtype_name(dtype)));
  cc::Dim m = kb.dim("M"), n = kb.dim("N"), k = kb.dim("K");
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf c = kb.output("c", dtype, {m, n});
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(m, kTcM)}, kTcThreads, [&](cc::Scope& s) {
    cc::Idx bx = s.block_idx(0), by = s.block_idx(1);
    const cc::Swizzle sw = cc::tensor_core_swizzle(128, 2);
    cc::Buf as = s.alloc_shared("As", dtype, {kTcM, kTcK}, sw);
    cc::Buf bs = s.alloc_shared("Bs", dtype, {kTcN, kTcK}, sw);
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcM, kTcN});
    // The next step's tiles in registers, in the operands' dtype (staging moves bits:
    // lower_storage_types copies a 16-bit float to its own dtype raw). A K-major operand (a
    // [m, k], b^T [n, k]) is held as its [rows, 64] tile; a k-outer one (a^T [k, m], b [k, n]) as
    // [rows / 8, 64, 8]: a thread still reads 8 consecutive global elements (one 16-byte load),
    // but the threads of a warp run along k, so its transposing 2-byte stores fill consecutive
    // addresses of one shared row instead of 16 rows that share a bank under the swizzle.
    auto frag_shape = [](bool k_major, int64_t rows) {
      return k_major ? std::vector<int64_t>{rows, kTcK} : std::vector<int64_t>{rows / 8, kTcK, 8};
    };
    cc::Buf ra = s.alloc_fragment("ra", dtype, frag_shape(!ta, kTcM));
    cc::Buf rb = s.alloc_fragment("rb", dtype, frag_shape(tb, kTcN));
    cc::Val steps = s.let(cc::ceildiv(k, cc::Val(kTcK)), "steps");
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
    // A tile wholly inside its operand loads unguarded (its loads issue back to back); an edge
    // tile reads zeros outside.
    auto load_tile = [&](const cc::Buf& frag, const cc::Buf& src, bool k_major, int64_t r_len,
                         const cc::Val& k0, const cc::Val& r0, const cc::Val& rows) {
      cc::Val inside = k0 + kTcK <= k && r0 + r_len <= rows;
      if (k_major) {
        std::vector<int64_t> tile{r_len, kTcK};
        s.if_then_else(
            inside,
            [&] {
              s.parallel(r_len, kTcK,
                         [&](cc::Idx i, cc::Idx j) { frag(i, j) = src(r0 + i, k0 + j); });
            },
            [&] {
              s.copy(frag, src.region({r0, k0}, tile));
            });
        return;
      }
      s.if_then_else(
          inside,
          [&] {
            s.parallel(r_len / 8, kTcK, 8, [&](cc::Idx c, cc::Idx kk, cc::Idx l) {
              frag(c, kk, l) = src(k0 + kk, r0 + c * 8 + l);
            });
          },
          [&] {
            s.parallel(r_len / 8, kTcK, 8, [&](cc::Idx c, cc::Idx kk, cc::Idx l) {
              s.if_then_else(
                  k0 + kk < k && r0 + c * 8 + l < rows,
                  [&] { frag(c, kk, l) = src(k0 + kk, r0 + c * 8 + l); },
                  [&] { frag(c, kk, l) = 0.0f; });
            });
          });
    };
    auto load = [&](const cc::Val& ko) {
      cc::Val k0 = s.let(ko * kTcK, "k0");
      load_tile(ra, a, !ta, kTcM, k0, by * kTcM, m);
      load_tile(rb, b, tb, kTcN, k0, bx * kTcN, n);
    };
    // Registers into the K-major shared tiles.
    auto store_tile = [&](const cc::Buf& dst, const cc::Buf& frag, bool k_major, int64_t r_len) {
      if (k_major) {
        s.parallel(r_len, kTcK, [&](cc::Idx i, cc::Idx j) { dst(i, j) = frag(i, j); });
      } else {
        s.parallel(r_len / 8, kTcK, 8,
                   [&](cc::Idx c, cc::Idx kk, cc::Idx l) { dst(c * 8 + l, kk) = frag(c, kk, l); });
      }
    };
    auto store = [&] {
      store_tile(as, ra, !ta, kTcM);
      store_tile(bs, rb, tb, kTcN);
    };
    load(cc::Val(int64_t{0}));
    s.serial(steps, [&](cc::Idx ko) {
      store();
      s.barrier();
      s.if_then(ko + 1 < steps, [&] { load(ko + 1); });  // in flight during the gemm
      s.gemm(acc, as, bs, /*trans_a=*/false, /*trans_b=*/true);
      s.barrier();  // the next step overwrites the tiles the gemm read
    });
    s.copy(c.region({by * kTcM, bx * kTcN}, {kTcM, kTcN}), acc);
  });
  return kb.build();
}

ExpandFn expand_matmul(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dt = out[0].dtype;
    bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
    int64_t m = out[0].shape[0], n = out[0].shape[1];
    int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
    if (dt == DType::BF16 || dt == DType::F16) {
      KernelCall tc{.kernel = cache->get(kernel_key(tc_matmul_name(ta, tb), dt),
                                         [&] { return build_tc_matmul(dt, ta, tb); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {m, n, k}};
      return OpExpansion{.calls = {tc}};
    }
    Tiling t = plan_matmul(m, n, k);
    KernelCall call{.kernel = cache->get(kernel_key(matmul_name(ta, tb, t), dt),
                                         [&] { return build_matmul(dt, ta, tb, t); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {m, n, k}};
    return OpExpansion{.calls = {call}};
  };
}

}  // namespace

void register_matmul(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "matmul",
       .doc = "c = op(a) @ op(b), op = optional transpose",
       .inputs = {"a", "b"},
       .outputs = {"c"},
       .attrs = {{.name = "transpose_a",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "use a^T"},
                 {.name = "transpose_b",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "use b^T"}},
       .infer = infer_matmul,
       .reference = ref_matmul,
       .gradient = grad_matmul,
       .expand = expand_matmul(cache),
       .tests = {.kernel =
                     {
                         {{{1, 1}, {1, 1}}},
                         {{{7, 130}, {130, 33}}},
                         {{{130, 33}, {130, 7}}, {{"transpose_a", true}}},
                         {{{33, 7}, {130, 7}}, {{"transpose_b", true}}},
                         {{{7, 130}, {33, 7}}, {{"transpose_a", true}, {"transpose_b", true}}},
                         {{{64, 96}, {96, 32}}},  // exact tile multiples
                         {{{33, 1}, {1, 130}}},
                         // Long K over a small output: 16x16 tiles, K split over 8 groups of
                         // the block (ragged).
                         {{{33, 700}, {700, 40}}},
                         {{{700, 33}, {700, 40}}, {{"transpose_a", true}}},
                         {{{33, 700}, {40, 700}}, {{"transpose_b", true}}},
                         {{{700, 33}, {40, 700}}, {{"transpose_a", true}, {"transpose_b", true}}},
                         {{{20, 1100}, {1100, 18}}},
                         // Enough 32x32 tiles: the large tiling, one K group and four.
                         {{{130, 33}, {33, 1000}}},
                         {{{130, 300}, {1000, 300}}, {{"transpose_b", true}}},
                         {{{300, 1000}, {300, 130}}, {{"transpose_a", true}}},
                     },
                 .gradient =
                     {
                         {{{3, 5}, {5, 4}}},
                         {{{5, 3}, {5, 4}}, {{"transpose_a", true}}},
                         {{{3, 5}, {4, 5}}, {{"transpose_b", true}}},
                         {{{5, 3}, {4, 5}}, {{"transpose_a", true}, {"transpose_b", true}}},
                         {{{1, 1}, {1, 7}}},
                     },
                 .examples = {{.inputs = {{{2, 2}, {1, 2, 3, 4}}, {{2, 1}, {5, 6}}},
                               .outputs = {{{2, 1}, {17, 39}}}}}}});
}

}  // namespace tilerun::kernels
