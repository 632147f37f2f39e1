// grouped_matmul: the MoE experts' GEMMs over rows sorted into expert-major segments (counting
// sort's `offsets`: where each expert's segment starts; the last one ends at R), and its weight
// gradient grouped_matmul_wgrad. Any offsets are memory-safe and well defined for the kernels:
// segment e is the rows r with offsets[e] <= r < end[e] (end[e] = offsets[e + 1], the last R),
// clamped to [0, R); a row in no segment gets 0, a row in several (offsets not sorted) their sum
// in expert order. In a model the op takes an index contract on offsets (in [0, R], sorted:
// kOffsetsContract), under which bf16/f16 take build_grouped_tc_aligned, one expert a row tile.
//
// f32 kernels (strict fma chains, written for any float dtype; the same bits on the CPU and the
// GPU); bf16/f16 run on the tensor cores instead (grouped_matmul_tc.h, the same schemes):
//  - forward: a BM x BN output tile per block, 4x4 outputs per thread. A row tile may span
//    several experts: the block walks e over all E, reads the segment's bounds (block-uniform
//    loads, proved in range because e is a loop variable) and, where the segment meets the
//    tile, runs the whole K loop against w[e] into a fresh accumulator (ascending k from +0),
//    then adds it to the rows of the segment only. The other experts' passes leave a row
//    untouched, so its bits are +0 + its own expert's chain: they do not depend on which other
//    rows share its tile or how the other segments lie (batch invariant).
//  - wgrad: a block per (N tile, K tile, expert); the reduction runs over the segment's rows in
//    steps of kRowStep starting at its first row, rows past its end read as zeros, so dw[e]
//    depends only on the segment's own rows, always added in row order. Empty: zeros.
// No atomics, every output element has one owner.
#include <algorithm>
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/grouped_matmul_tc.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// ---- Inference -----------------------------------------------------------------------------

struct Grouped {
  int64_t r, k, n, e;
};

void expect_offsets(const TensorType& offsets, int64_t e, const std::string& w_slot) {
  if (offsets.dtype != DType::I32 || offsets.shape != std::vector<int64_t>{e})
    throw ShapeError("input 'offsets' is " + to_string(offsets) + ", expected i32[" +
                     std::to_string(e) + "] (each expert's first row, counting_sort's offsets) " +
                     "for the experts of '" + w_slot + "'");
}

// x [R, K], w [E, K, N] (transpose_b: [E, N, K]), offsets i32 [E].
Grouped grouped_shape(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  expect_rank(in[0], 2, "x");
  const bool tb = attr_bool(attrs, "transpose_b");
  const TensorType& w = in[1];
  if (w.dtype != in[0].dtype || w.shape.size() != 3)
    throw ShapeError("input 'w' is " + to_string(w) + ", expected " +
                     std::string(dtype_name(in[0].dtype)) + (tb ? "[E, N, K]" : "[E, K, N]") +
                     " like 'x'");
  const Grouped g{in[0].shape[0], in[0].shape[1], tb ? w.shape[1] : w.shape[2], w.shape[0]};
  if ((tb ? w.shape[2] : w.shape[1]) != g.k)
    throw ShapeError("input 'w' is " + to_string(w) + ", expected " + std::to_string(g.k) +
                     (tb ? " columns" : " rows") + " per expert to match the columns of 'x' " +
                     to_string(in[0]));
  expect_offsets(in[2], g.e, "w");
  return g;
}

std::vector<TensorType> infer_grouped(const std::vector<TensorType>& in, const Attrs& attrs) {
  const Grouped g = grouped_shape(in, attrs);
  return {TensorType{in[0].dtype, {g.r, g.n}}};
}

// x [R, K], dy [R, N], offsets i32 [E] -> dw [E, K, N] (transpose_b: [E, N, K]).
std::vector<TensorType> infer_wgrad(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  expect_rank(in[0], 2, "x");
  if (in[1].dtype != in[0].dtype || in[1].shape.size() != 2 || in[1].shape[0] != in[0].shape[0])
    throw ShapeError("input 'dy' is " + to_string(in[1]) + ", expected " +
                     std::string(dtype_name(in[0].dtype)) + "[" + std::to_string(in[0].shape[0]) +
                     ", N]: the rows of 'x' " + to_string(in[0]));
  if (in[2].dtype != DType::I32 || in[2].shape.size() != 1)
    throw ShapeError("input 'offsets' is " + to_string(in[2]) +
                     ", expected i32[E] (each expert's first row, counting_sort's offsets)");
  const int64_t e = in[2].shape[0], k = in[0].shape[1], n = in[1].shape[1];
  return {TensorType{
      in[0].dtype, attr_bool(attrs, "transpose_b") ? std::vector{e, n, k} : std::vector{e, k, n}}};
}

// ---- References ----------------------------------------------------------------------------

// Segment e's rows [lo, hi), clamped to [0, rows) (empty when hi <= lo).
std::pair<int64_t, int64_t> segment(const RefTensor& offsets, int64_t e, int64_t rows) {
  const int64_t experts = offsets.numel();
  auto at = [&](int64_t i) { return static_cast<int64_t>(std::llround(offsets.data[i])); };
  const int64_t lo = std::clamp<int64_t>(at(e), 0, rows);
  const int64_t hi = std::clamp<int64_t>(e + 1 < experts ? at(e + 1) : rows, lo, rows);
  return {lo, hi};
}

// Element (k, n) of expert e's matrix in w [E, K, N] or, transposed, [E, N, K].
double w_at(const RefTensor& w, bool tb, int64_t e, int64_t k, int64_t n) {
  const int64_t d1 = w.shape[1], d2 = w.shape[2];
  return tb ? w.data[(e * d1 + n) * d2 + k] : w.data[(e * d1 + k) * d2 + n];
}

std::vector<RefTensor> ref_grouped(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &w = in[1], &offsets = in[2];
  const bool tb = attr_bool(attrs, "transpose_b");
  const int64_t r = x.shape[0], k = x.shape[1], n = tb ? w.shape[1] : w.shape[2];
  RefTensor y = ref_zeros({r, n});
  for (int64_t e = 0; e < offsets.numel(); ++e) {
    const auto [lo, hi] = segment(offsets, e, r);
    for (int64_t row = lo; row < hi; ++row)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += x.data[row * k + p] * w_at(w, tb, e, p, j);
        y.data[row * n + j] += s;
      }
  }
  return {y};
}

std::vector<RefTensor> ref_wgrad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &dy = in[1], &offsets = in[2];
  const bool tb = attr_bool(attrs, "transpose_b");
  const int64_t r = x.shape[0], k = x.shape[1], n = dy.shape[1], experts = offsets.numel();
  RefTensor dw = ref_zeros(tb ? std::vector{experts, n, k} : std::vector{experts, k, n});
  for (int64_t e = 0; e < experts; ++e) {
    const auto [lo, hi] = segment(offsets, e, r);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t row = lo; row < hi; ++row) s += x.data[row * k + p] * dy.data[row * n + j];
        dw.data[tb ? (e * n + j) * k + p : (e * k + p) * n + j] = s;
      }
  }
  return {dw};
}

// y[seg e] = x[seg e] W_e:  dx[seg e] = dy[seg e] W_e^T (the same grouping with w read the other
// way round), dW_e = x[seg e]^T dy[seg e] (or its transpose). The offsets get no gradient.
std::vector<GradOp> grad_grouped(const std::vector<TensorType>& in, const Attrs& attrs,
                                 const std::vector<bool>& needs) {
  const bool tb = attr_bool(attrs, "transpose_b");
  std::vector<GradOp> ops;
  // The offsets' contract status, when the graph appended one (in[3]), goes along: dx is a
  // grouped product over the same sorted segments.
  std::vector<std::string> dx_in = {"dy0", "x1", "x2"};
  if (in.size() > 3) dx_in.push_back("x3");
  if (needs[0]) ops.push_back({"grouped_matmul", dx_in, {"dx0"}, {{"transpose_b", !tb}}});
  if (needs[1])
    ops.push_back({"grouped_matmul_wgrad", {"x0", "dy0", "x2"}, {"dx1"}, {{"transpose_b", tb}}});
  return ops;
}

// ---- Tile kernels --------------------------------------------------------------------------

constexpr int64_t kBM = 32, kBN = 32, kBK = 16;  // output tile and K per step
constexpr int64_t kRM = 4, kRN = 4;              // outputs per thread
constexpr int64_t kTY = kBM / kRM, kTX = kBN / kRN;
constexpr int64_t kPad = 4;       // pad columns of k-contiguous shared tiles (bank conflicts)
constexpr int64_t kRowStep = 16;  // wgrad: segment rows per step

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

// 4x4 single-element fragments per thread of a kTY x kTX thread grid.
std::vector<std::vector<cc::Buf>> micro_tile(cc::Scope& s, const std::string& name) {
  std::vector<std::vector<cc::Buf>> t(kRM);
  for (int64_t i = 0; i < kRM; ++i)
    for (int64_t j = 0; j < kRN; ++j)
      t[i].push_back(
          s.alloc_fragment(name + std::to_string(i) + std::to_string(j), DType::F32, {kTY, kTX}));
  return t;
}

// y = grouped x w. Parameters: x, w, offsets, y; R, N, K, E.
cc::Kernel build_grouped(DType dtype, bool tb) {
  cc::KernelBuilder kb(std::string("grouped_matmul_") + (tb ? "nt" : "nn") + suffix(dtype));
  cc::Dim r = kb.dim("R"), n = kb.dim("N"), k = kb.dim("K"), experts = kb.dim("E");
  cc::Buf x = kb.input("x", dtype, {r, k});
  cc::Buf w = kb.input(
      "w", dtype, tb ? std::vector<cc::Val>{experts, n, k} : std::vector<cc::Val>{experts, k, n});
  cc::Buf offsets = kb.input("offsets", DType::I32, {experts});
  cc::Buf y = kb.output("y", dtype, {r, n});
  kb.body(
      {cc::ceildiv(n, kBN), cc::ceildiv(r, kBM)}, static_cast<int>(kTY * kTX), [&](cc::Scope& s) {
        cc::Idx n0 = s.let(s.block_idx(0) * kBN, "n0"), r0 = s.let(s.block_idx(1) * kBM, "r0");
        // x's tile [BM, BK] (k-contiguous, padded); w[e]'s [1, BK, BN] or [1, BN, BK].
        cc::Buf xs = s.alloc_shared("xs", DType::F32, {kBM, kBK + kPad});
        cc::Buf ws = s.alloc_shared(
            "ws", DType::F32,
            tb ? std::vector<int64_t>{1, kBN, kBK + kPad} : std::vector<int64_t>{1, kBK, kBN});
        auto acc = micro_tile(s, "acc"), out = micro_tile(s, "out");
        // Thread (ty, tx)'s rows and columns in the tile: strided rows read distinct
        // padded rows; columns adjacent where the tile is n-contiguous.
        auto row_of = [&](const cc::Idx& ty, int64_t i) { return ty + kTY * i; };
        auto col_of = [&](const cc::Idx& tx, int64_t j) {
          return tb ? tx + kTX * j : tx * kRN + j;
        };
        s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
          for (auto& row : out)
            for (cc::Buf& f : row) f(ty, tx) = 0.0f;
        });
        s.serial(experts, [&](cc::Idx e) {
          const auto [lo_v, hi_v] = grouped_segment(s, offsets, e, experts, r);
          const cc::Val lo = lo_v, hi = hi_v;  // plain names, captured by the lambdas
          cc::Val meets = s.let(lo < hi && lo < r0 + kBM && hi > r0, "meets");
          s.if_then(meets, [&] {
            s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
              for (auto& row : acc)
                for (cc::Buf& f : row) f(ty, tx) = 0.0f;
            });
          });
          // No K steps for an expert whose segment misses the tile (a uniform trip count,
          // so the barriers inside stay legal).
          cc::Val steps =
              s.let(cc::select(meets, cc::ceildiv(k, cc::Val(kBK)), cc::Val(0)), "steps");
          s.serial(steps, [&](cc::Idx ko) {
            cc::Val k0 = s.let(ko * kBK, "k0");
            s.copy(xs.region({cc::Val(0), cc::Val(0)}, {kBM, kBK}), x.region({r0, k0}, {kBM, kBK}));
            if (tb)
              s.copy(ws.region({cc::Val(0), cc::Val(0), cc::Val(0)}, {1, kBN, kBK}),
                     w.region({e, n0, k0}, {1, kBN, kBK}));
            else
              s.copy(ws, w.region({e, k0, n0}, {1, kBK, kBN}));
            s.barrier();
            s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
              for (int64_t kk = 0; kk < kBK; ++kk) {  // unrolled: constant shared offsets
                std::vector<cc::Val> av, bv;
                for (int64_t i = 0; i < kRM; ++i)
                  av.push_back(s.let(xs(row_of(ty, i), cc::Val(kk)), "a"));
                for (int64_t j = 0; j < kRN; ++j) {
                  cc::Idx c = col_of(tx, j);
                  bv.push_back(s.let(
                      tb ? ws(cc::Val(0), c, cc::Val(kk)) : ws(cc::Val(0), cc::Val(kk), c), "b"));
                }
                for (int64_t i = 0; i < kRM; ++i)
                  for (int64_t j = 0; j < kRN; ++j)
                    acc[i][j](ty, tx) = cc::fma(av[i], bv[j], acc[i][j](ty, tx));
              }
            });
            s.barrier();  // the next step overwrites the tiles just read
          });
          // The expert's products go to its own rows only.
          s.if_then(meets, [&] {
            s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
              for (int64_t i = 0; i < kRM; ++i) {
                cc::Idx row = r0 + row_of(ty, i);
                cc::Val mine = s.let(row >= lo && row < hi, "mine");
                for (int64_t j = 0; j < kRN; ++j)
                  out[i][j](ty, tx) =
                      cc::select(mine, out[i][j](ty, tx) + acc[i][j](ty, tx), out[i][j](ty, tx));
              }
            });
          });
        });
        s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
          for (int64_t i = 0; i < kRM; ++i)
            for (int64_t j = 0; j < kRN; ++j) {
              cc::Idx row = r0 + row_of(ty, i), col = n0 + col_of(tx, j);
              s.if_then(row < r && col < n, [&] { y(row, col) = out[i][j](ty, tx); });
            }
        });
      });
  return kb.build();
}

// dw[e] = x[seg e]^T dy[seg e] (transpose_b: its transpose). Parameters: x, dy, offsets, dw;
// R, K, N, E. The block's output tile is [BM of K, BN of N].
cc::Kernel build_wgrad(DType dtype, bool tb) {
  cc::KernelBuilder kb(std::string("grouped_matmul_wgrad_") + (tb ? "t" : "n") + suffix(dtype));
  cc::Dim r = kb.dim("R"), k = kb.dim("K"), n = kb.dim("N"), experts = kb.dim("E");
  cc::Buf x = kb.input("x", dtype, {r, k});
  cc::Buf dy = kb.input("dy", dtype, {r, n});
  cc::Buf offsets = kb.input("offsets", DType::I32, {experts});
  cc::Buf dw = kb.output(
      "dw", dtype, tb ? std::vector<cc::Val>{experts, n, k} : std::vector<cc::Val>{experts, k, n});
  kb.body({cc::ceildiv(n, kBN), cc::ceildiv(k, kBM), experts}, static_cast<int>(kTY * kTX),
          [&](cc::Scope& s) {
            cc::Idx n0 = s.let(s.block_idx(0) * kBN, "n0"), k0 = s.let(s.block_idx(1) * kBM, "k0");
            cc::Idx e = s.block_idx(2);
            const auto [lo_v, hi_v] = grouped_segment(s, offsets, e, experts, r);
            const cc::Val lo = lo_v, hi = hi_v;  // plain names, captured by the lambdas
            cc::Buf xs = s.alloc_shared("xs", DType::F32, {kRowStep, kBM});
            cc::Buf dys = s.alloc_shared("dys", DType::F32, {kRowStep, kBN});
            auto acc = micro_tile(s, "acc");
            // Thread (ty, tx)'s k and n in the tile: adjacent, both tiles being contiguous there.
            auto k_of = [&](const cc::Idx& ty, int64_t i) { return ty * kRM + i; };
            auto n_of = [&](const cc::Idx& tx, int64_t j) { return tx * kRN + j; };
            s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
              for (auto& row : acc)
                for (cc::Buf& f : row) f(ty, tx) = 0.0f;
            });
            s.serial(cc::ceildiv(hi - lo, cc::Val(kRowStep)), [&](cc::Idx st) {
              cc::Val first = s.let(lo + st * kRowStep, "first");
              // Rows past the segment's end read as zeros (both operands: a NaN of another
              // expert's row never reaches this one's sum).
              s.parallel(kRowStep, kBM, [&](cc::Idx q, cc::Idx c) {
                cc::Idx row = first + q, col = k0 + c;
                s.if_then_else(
                    row < hi && col < k, [&] { xs(q, c) = x(row, col); }, [&] { xs(q, c) = 0.0f; });
              });
              s.parallel(kRowStep, kBN, [&](cc::Idx q, cc::Idx c) {
                cc::Idx row = first + q, col = n0 + c;
                s.if_then_else(
                    row < hi && col < n, [&] { dys(q, c) = dy(row, col); },
                    [&] { dys(q, c) = 0.0f; });
              });
              s.barrier();
              s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
                for (int64_t q = 0; q < kRowStep; ++q) {  // unrolled, in row order
                  std::vector<cc::Val> av, bv;
                  for (int64_t i = 0; i < kRM; ++i)
                    av.push_back(s.let(xs(cc::Val(q), k_of(ty, i)), "a"));
                  for (int64_t j = 0; j < kRN; ++j)
                    bv.push_back(s.let(dys(cc::Val(q), n_of(tx, j)), "b"));
                  for (int64_t i = 0; i < kRM; ++i)
                    for (int64_t j = 0; j < kRN; ++j)
                      acc[i][j](ty, tx) = cc::fma(av[i], bv[j], acc[i][j](ty, tx));
                }
              });
              s.barrier();  // the next step overwrites the tiles just read
            });
            s.parallel(kTY, kTX, [&](cc::Idx ty, cc::Idx tx) {
              for (int64_t i = 0; i < kRM; ++i)
                for (int64_t j = 0; j < kRN; ++j) {
                  cc::Idx kc = k0 + k_of(ty, i), nc = n0 + n_of(tx, j);
                  s.if_then(kc < k && nc < n, [&] {
                    if (tb)
                      dw(e, nc, kc) = acc[i][j](ty, tx);
                    else
                      dw(e, kc, nc) = acc[i][j](ty, tx);
                  });
                }
            });
          });
  return kb.build();
}

// bf16/f16 on the tensor cores, as matmul picks them (its register-staged kernel: any K and N;
// the tiling never depends on R); f32 by the strict SIMT kernels above.
bool tensor_cores(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

ExpandFn expand_grouped(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    const DType dt = out[0].dtype;
    const bool tb = attr_bool(attrs, "transpose_b");
    const int64_t r = in[0].shape[0], k = in[0].shape[1], n = out[0].shape[1];
    const int64_t e = in[2].shape[0];
    // copy_async staging where the rows are 16-byte aligned (as matmul: a choice by K and N).
    // (128-row tiles: 64-row ones re-read each expert's weights twice as often and measured
    // slower, bench/RESULTS.md thirteenth session.)
    // (N a multiple of 8 for a transposed w too: the epilogue's 16-byte rows.)
    const bool async = k % 8 == 0 && n % 8 == 0;
    // With the offsets' sorted contract (the graph appended its status): one K pass a tile of
    // one expert's rows, instead of one per expert the tile meets.
    const bool sorted = in.size() > 3;
    if (tensor_cores(dt) && async && sorted) {
      KernelCache::KernelPtr aligned = cache->get(kernel_key(grouped_tc_aligned_name(tb), dt),
                                                  [&] { return build_grouped_tc_aligned(dt, tb); });
      return OpExpansion{.calls = {{.kernel = aligned,
                                    .buffers = {input_slot(0), input_slot(1), input_slot(2),
                                                input_slot(3), output_slot(0)},
                                    .dims = {r, n, k, e}}}};
    }
    KernelCache::KernelPtr kernel =
        !tensor_cores(dt) ? cache->get(std::string("grouped_") + (tb ? "nt" : "nn") + suffix(dt),
                                       [&] { return build_grouped(dt, tb); })
        : async           ? cache->get(kernel_key(grouped_tc_async_name(tb), dt),
                                       [&] { return build_grouped_tc_async(dt, tb); })
                          : cache->get(kernel_key(grouped_tc_name(tb), dt),
                                       [&] { return build_grouped_tc(dt, tb); });
    return OpExpansion{
        .calls = {{.kernel = kernel,
                   .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)},
                   .dims = {r, n, k, e}}}};
  };
}

ExpandFn expand_wgrad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const bool tb = attr_bool(attrs, "transpose_b");
    const int64_t r = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[1];
    const int64_t e = in[2].shape[0];
    // copy_async staging where x's and dy's rows are 16-byte aligned.
    const bool async = k % 8 == 0 && n % 8 == 0 && k > 0;
    KernelCache::KernelPtr kernel =
        !tensor_cores(dt)
            ? cache->get(std::string("grouped_wgrad_") + (tb ? "t" : "n") + suffix(dt),
                         [&] { return build_wgrad(dt, tb); })
        : async ? cache->get(kernel_key(grouped_wgrad_tc_async_name(tb), dt),
                             [&] { return build_grouped_wgrad_tc_async(dt, tb); })
                : cache->get(kernel_key(grouped_wgrad_tc_name(tb), dt),
                             [&] { return build_grouped_wgrad_tc(dt, tb); });
    return OpExpansion{
        .calls = {{.kernel = kernel,
                   .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)},
                   .dims = {r, k, n, e}}}};
  };
}

// ---- Test cases ----------------------------------------------------------------------------

using Shape = std::vector<int64_t>;

// Offsets [E] as running sums of steps in [lo, hi): non-decreasing segment starts.
OpTestCase segments_case(std::vector<Shape> shapes, bool tb, int64_t lo, int64_t hi) {
  return {.shapes = std::move(shapes),
          .attrs = {{"transpose_b", tb}},
          .int_lo = lo,
          .int_hi = hi,
          .running_sums = {2}};
}

// grouped_matmul's cases: x [R, K], w [E, K, N] or [E, N, K], offsets [E]. Steps below R / E
// keep every start inside [0, R]; R, K and N are multiples of no tile size.
std::vector<OpTestCase> grouped_cases() {
  return {
      segments_case({{70, 40}, {4, 40, 24}, {4}}, false, 0, 18),
      segments_case({{70, 40}, {4, 24, 40}, {4}}, true, 0, 18),
      segments_case({{33, 17}, {1, 17, 9}, {1}}, false, 0, 5),    // E = 1, leading rows in none
      segments_case({{45, 20}, {5, 20, 35}, {5}}, false, 0, 1),   // all rows on the last expert
      segments_case({{45, 20}, {5, 35, 20}, {5}}, true, 0, 1),    // the others empty
      segments_case({{100, 70}, {6, 50, 70}, {6}}, true, 0, 17),  // several tiles and K steps
      segments_case({{37, 19}, {8, 19, 5}, {8}}, false, 0, 3),    // many empty, a long last one
      segments_case({{1, 3}, {2, 3, 2}, {2}}, false, 0, 2),       // one row
      // bf16/f16 on copy_async (K, and N unless transposed, multiples of 8): three K steps,
      // odd segments, empty experts, row tiles that span several experts and end past R.
      segments_case({{150, 136}, {5, 136, 48}, {5}}, false, 0, 45),
      segments_case({{130, 72}, {3, 20, 72}, {3}}, true, 0, 70),
  };
}

// grouped_matmul_wgrad's: x [R, K], dy [R, N], offsets [E].
std::vector<OpTestCase> wgrad_cases() {
  return {
      segments_case({{70, 40}, {70, 24}, {4}}, false, 0, 18),
      segments_case({{70, 40}, {70, 24}, {4}}, true, 0, 18),
      segments_case({{33, 17}, {33, 9}, {1}}, false, 0, 5),
      segments_case({{45, 20}, {45, 35}, {5}}, true, 0, 1),
      segments_case({{100, 50}, {100, 70}, {3}}, false, 0, 34),
      segments_case({{37, 19}, {37, 5}, {8}}, true, 0, 3),
      // bf16/f16 on copy_async (K and N multiples of 8): segments of up to four K steps.
      segments_case({{400, 16}, {400, 136}, {2}}, true, 0, 200),
  };
}

}  // namespace

// In a model the offsets must be segment starts: in [0, R] and sorted (counting_sort's are by
// construction; others are checked at run time). The kernels then give each 128-row tile one
// expert (build_grouped_tc_aligned); called without the status (the op's own suites), they keep
// the any-offsets semantics above.
const IndexContract kOffsetsContract{
    .slot = 2,
    .bound = [](const std::vector<TensorType>& in, const Attrs&) { return in[0].shape[0] + 1; },
    .indexes = "the rows of input 'x' where each expert's segment starts",
    .sorted = true};

void register_grouped_matmul(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const AttrSpec tb_attr{.name = "transpose_b",
                         .kind = AttrKind::Bool,
                         .default_value = AttrValue{false},
                         .doc = "w holds each expert's matrix transposed, [E, N, K]"};
  registry.add(
      {.name = "grouped_matmul",
       .doc = "y [R, N] = x [R, K] @ w[e] for the rows of each expert's segment: offsets i32 [E] "
              "(counting_sort's) start them, each ends where the next starts (the last at R); w "
              "is [E, K, N] ([E, N, K] with transpose_b); rows in no segment get 0; offsets "
              "must be sorted and in [0, R] (counting_sort's are; others are checked at run "
              "time); gradient: dx by grouped_matmul, dw by grouped_matmul_wgrad, none for offsets",
       .inputs = {"x", "w", "offsets"},
       .outputs = {"y"},
       .attrs = {tb_attr},
       .input_dtypes = {{2, DType::I32}},
       .infer = infer_grouped,
       .reference = ref_grouped,
       .gradient = grad_grouped,
       .expand = expand_grouped(cache),
       .index_contracts = {kOffsetsContract},
       .tests = {.kernel = grouped_cases(),
                 .gradient = {segments_case({{7, 3}, {3, 3, 4}, {3}}, false, 0, 3),
                              segments_case({{7, 3}, {3, 4, 3}, {3}}, true, 0, 3),
                              segments_case({{5, 2}, {1, 2, 3}, {1}}, false, 0, 2)},
                 // Rows 0 in no segment; expert 0 empty, expert 1 rows 1-2, expert 2 row 3.
                 .examples = {{.inputs = {{{4, 1}, {1, 2, 3, 4}},
                                          {{3, 1, 2}, {10, 20, 1, 2, 100, 200}},
                                          {{3}, {1, 1, 3}}},
                               .outputs = {{{4, 2}, {0, 0, 2, 4, 3, 6, 400, 800}}}}}}});
  registry.add(
      {.name = "grouped_matmul_wgrad",
       .doc = "dw [E, K, N] ([E, N, K] with transpose_b): dw[e] = x[seg e]^T @ dy[seg e] for x "
              "[R, K], dy [R, N] and grouped_matmul's segments (offsets i32 [E]), summed in row "
              "order; zeros for an empty segment; grouped_matmul's weight gradient",
       .inputs = {"x", "dy", "offsets"},
       .outputs = {"dw"},
       .attrs = {tb_attr},
       .input_dtypes = {{2, DType::I32}},
       .infer = infer_wgrad,
       .reference = ref_wgrad,
       .expand = expand_wgrad(cache),
       .tests = {.kernel = wgrad_cases(),
                 // Expert 0 empty, expert 1 rows 1-2, expert 2 row 3 (row 0 in none).
                 .examples = {{.inputs = {{{4, 1}, {1, 2, 3, 4}},
                                          {{4, 2}, {1, 1, 1, 2, 2, 1, 3, 3}},
                                          {{3}, {1, 1, 3}}},
                               .outputs = {{{3, 1, 2}, {0, 0, 8, 7, 12, 12}}}}}}});
}

}  // namespace tilerun::kernels
