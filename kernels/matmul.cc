// over 600 lines: the matmul family is one op whose expansion chooses among the strict SIMT,
// skinny, tensor-core (registers, TMA, split K, batched) and tf32 kernels by shape and dtype;
// the choice reads best in one place.
// Matrix multiplication, with optional transposes of either operand. f32: strict fma chains on
// the CUDA cores, 32x32 (or, below 128 such tiles, 16x16) tiles, 4x4 outputs per thread, K split
// over up to 8 thread groups of the block (group g takes every k with (k / 16) % G == g), their
// tiles added in group order; double-buffered shared tiles, the next step prefetched into
// registers. bf16/f16: the tensor cores (a `gemm` per 64 of K over 128x128 or 64x128 tiles).
// f32 with `precision: tf32`: the same tensor-core kernels over f32 tiles read as tf32 (a `gemm`
// per 32 of K), K-major operands only (others copied transposed first).
// Batched (rank >= 3, matmul_batch.h): the same kernels with a grid axis over the batch, or one
// matmul when the batch folds into a's rows.
#include <algorithm>

#include "compiler/base/check.h"
#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/matmul_batch.h"
#include "kernels/matmul_simt.h"
#include "kernels/matmul_tc.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/strided.h"
#include "kernels/sub_expansion.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// c[.., M,N] = op(a)[.., M,K] * op(b)[.., K,N], op = optional transpose of the last two axes,
// the batch dims (..) broadcast.
std::vector<TensorType> infer_matmul_product(const std::vector<TensorType>& in_full,
                                             const Attrs& attrs) {
  expect_float(in_full[0], "a");
  expect_float(in_full[1], "b");
  const MatmulBatch mb = matmul_batch(in_full[0], in_full[1]);
  // The matrices: the last two axes (error messages name the whole operands).
  std::vector<TensorType> in = {in_full[0], in_full[1]};
  for (TensorType& t : in) t.shape.erase(t.shape.begin(), t.shape.end() - 2);
  if (in[1].dtype != in[0].dtype)
    throw ShapeError("input 'b' is " + to_string(in[1]) + ", expected dtype " +
                     std::string(dtype_name(in[0].dtype)) + " like 'a'");
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  int64_t m = ta ? in[0].shape[1] : in[0].shape[0];
  int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
  int64_t kb = tb ? in[1].shape[1] : in[1].shape[0];
  int64_t n = tb ? in[1].shape[0] : in[1].shape[1];
  if (k != kb)
    throw ShapeError("input 'b' is " + to_string(in_full[1]) + ", expected " + std::to_string(k) +
                     (tb ? " columns" : " rows") + " to match the inner dim of 'a' " +
                     to_string(in_full[0]));
  std::vector<int64_t> shape = mb.c;
  shape.push_back(m);
  shape.push_back(n);
  return {TensorType{in[0].dtype, shape}};
}

// `precision`: "strict" (f32 products as fma chains) or "tf32" (f32 products on the tensor cores,
// the inputs read as tf32). Ops that expand through matmul's expansion (einsum, hc) give none:
// strict.
bool tf32_of(const Attrs& attrs) {
  if (!attrs.count("precision")) return false;
  const std::string& p = attr_string(attrs, "precision");
  if (p != "strict" && p != "tf32")
    throw ShapeError("attribute 'precision' is '" + p + "', expected strict or tf32");
  return p == "tf32";
}

// The optional addend is c's type.
std::vector<TensorType> infer_matmul(const std::vector<TensorType>& in, const Attrs& attrs) {
  tf32_of(attrs);  // a precision it knows
  std::vector<TensorType> out = infer_matmul_product(in, attrs);
  if (in.size() > 2) expect_same(in[2], "addend", out[0], "c");
  return out;
}

// Element (i, j) of op(t) for a row-major matrix t.
double at(const RefTensor& t, bool transposed, int64_t i, int64_t j) {
  return transposed ? t.data[j * t.shape[1] + i] : t.data[i * t.shape[1] + j];
}

std::vector<RefTensor> ref_matmul_2d(const std::vector<RefTensor>& in, const Attrs& attrs) {
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

// Batched: the rank-2 product of each batch element's matrices.
std::vector<RefTensor> ref_matmul(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const MatmulBatch mb = matmul_batch({DType::F32, in[0].shape}, {DType::F32, in[1].shape});
  auto matrix = [](const RefTensor& t, int64_t i) {
    std::vector<int64_t> shape(t.shape.end() - 2, t.shape.end());
    const int64_t n = shape[0] * shape[1];
    return RefTensor{
        .shape = shape,
        .data = std::vector<double>(t.data.begin() + i * n, t.data.begin() + (i + 1) * n)};
  };
  RefTensor c;
  for (int64_t z = 0; z < mb.count; ++z) {
    RefTensor cz = ref_matmul_2d(
        {matrix(in[0], batch_source(mb.a, mb.c, z)), matrix(in[1], batch_source(mb.b, mb.c, z))},
        attrs)[0];
    c.data.insert(c.data.end(), cz.data.begin(), cz.data.end());
    c.shape = mb.c;
    c.shape.insert(c.shape.end(), cz.shape.begin(), cz.shape.end());
  }
  if (in.size() > 2)
    for (size_t i = 0; i < c.data.size(); ++i) c.data[i] += in[2].data[i];
  return {c};
}

// The gradient's products run at the forward's precision.
GradOp matmul_op(std::string a, std::string b, bool ta, bool tb, std::string out,
                 const Attrs& forward) {
  return {"matmul",
          {std::move(a), std::move(b)},
          {std::move(out)},
          {{"transpose_a", ta},
           {"transpose_b", tb},
           {"precision", tf32_of(forward) ? std::string("tf32") : std::string("strict")}}};
}

// With A' = op(a), B' = op(b) and C = A'B':  dA' = dC B'^T,  dB' = A'^T dC. A transposed operand
// gets the transpose of its gradient, (dA')^T = B' dC^T and (dB')^T = dC^T A', so every case is
// one matmul whose transpose flags absorb op().
std::vector<GradOp> grad_matmul_2d(const std::vector<TensorType>&, const Attrs& attrs,
                                   const std::vector<bool>& needs) {
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  std::vector<GradOp> ops;
  if (needs[0])
    ops.push_back(ta ? matmul_op("x1", "dy0", tb, true, "dx0", attrs)      // a = A'^T: B' dC^T
                     : matmul_op("dy0", "x1", false, !tb, "dx0", attrs));  // a = A': dC B'^T
  if (needs[1])
    ops.push_back(tb ? matmul_op("dy0", "x0", true, ta, "dx1", attrs)      // b = B'^T: dC^T A'
                     : matmul_op("x0", "dy0", !ta, false, "dx1", attrs));  // b = B': A'^T dC
  return ops;
}

// The addend's gradient is dc itself (no kernel).
std::vector<GradOp> grad_matmul(const std::vector<TensorType>& in, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  std::vector<GradOp> ops =
      batched_gradient(grad_matmul_2d, {in[0], in[1]}, attrs, {needs[0], needs[1]});
  if (in.size() > 2 && needs[2]) ops.push_back({"alias", {"dy0"}, {"dx2"}, {}});
  return ops;
}

// ---- Tile kernels --------------------------------------------------------------------------
//
// Split K for the tensor-core kernel (matmul_tc.h): a product with few 128 x 128 output tiles
// and a long K leaves most of the GPU's 132 SMs idle while each block walks K alone (the
// attention backward's p^T dO: 40 tiles, K = 16384, 256 steps per block). Below 132 tiles and
// from K = 2048 on, K is cut into slices of whole 64-wide steps, as many as keep the blocks
// within two per SM (tiles * splits <= 264) and each slice at least 1024 long (the partials'
// f32 traffic and the sum stay small against the slice's gemms); the slices then shrink to
// ceil(steps / splits) steps and the splits to as many as that needs, so none is empty. Only
// for a transposed a (the caller's condition): there K runs over the tokens and no output is a
// token's row, so the choice may depend on every dim; with a not transposed, a row's bits must
// not depend on M (batch invariance): plan_tc_split_rows decides from N and K alone.
constexpr int64_t kSms = 132;           // the H200's SMs, which the tensor-core plans below fill
constexpr int64_t kSumFlatBelow = 256;  // the split sum a thread per element below this N
struct TcSplit {
  int64_t splits = 1, slice = 0;  // slice: in elements, a multiple of kTcK
};
TcSplit plan_tc_split(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinSlice = 1024;
  const int64_t tiles = ((m + kTcM - 1) / kTcM) * ((n + kTcN - 1) / kTcN);
  if (tiles >= kSms || k < 2 * kMinSlice) return {};
  const int64_t splits = std::min(2 * kSms / tiles, k / kMinSlice);
  if (splits < 2) return {};
  const int64_t steps = (k + kTcK - 1) / kTcK, per = (steps + splits - 1) / splits;
  return {.splits = (steps + per - 1) / per, .slice = per * kTcK};
}

// The split for a not transposed a, from N and K only, so that it is the same for every M (a
// row's bits never depend on the batch): the grid is planned for 8 row tiles (M = 1024), so a
// product with few column tiles and K from 4096 on (the backward's dx = dy w^T through a wide
// layer: N = 256, K = 8192 left 16 blocks walking 128 steps each) splits into slices of at least
// 2048, as many as would bring such an M to two blocks per SM.
//
// Only for N up to 256 (two column tiles), where even M = 4096 leaves 64-row tiles one wave at
// most. From three column tiles on the split cost more than it gave (H100, forty-second session,
// gemm.py split against not, each with its loss kernel): N = 512 and 1024 at M = 4096 took 53.5
// and 95.1 us split, 35.9 and 65.4 not; N = 2048 at M = 1024 and K = 4096 47.7 against 31.7. Its
// f32 partials (splits · M · N · 4 bytes written, read back and summed) grow with M while the idle
// SMs it fills do not. Small M gains from it: 1024 x 512 x 4096 21.9 us against 26.7, M = 128 with
// N = 512 or 1024 and K = 4096 ~16 against ~22 (gemm.py, the matmul's kernels alone).
constexpr int64_t kMaxSplitColTiles = 2;
TcSplit plan_tc_split_rows(int64_t n, int64_t k) {
  constexpr int64_t kMinSlice = 2048, kPlannedRowTiles = 8;
  const int64_t col_tiles = (n + kTcN - 1) / kTcN;
  if (k < 2 * kMinSlice || col_tiles > kMaxSplitColTiles) return {};
  const int64_t splits = std::min(2 * kSms / (col_tiles * kPlannedRowTiles), k / kMinSlice);
  if (splits < 2) return {};
  const int64_t steps = (k + kTcK - 1) / kTcK, per = (steps + splits - 1) / splits;
  return {.splits = (steps + per - 1) / per, .slice = per * kTcK};
}

// The async kernel's tile rows: 64 (one warpgroup) when 128-row tiles would leave half of the 132
// SMs idle; for 16-bit operands (once kTcBigTilesOn) 256 where the fewer, larger tiles finish
// first by a cost model
// measured on the H100 (bench/RESULTS.md, forty-first session: a 128-row tile's 64-wide K step
// 0.40 us and its prologue and epilogue 5.7 us, a 256-row tile's 0.65 and 17; the grid's waves
// one after another), which takes the large tile for a long K (from ~40 steps at equal waves);
// else 128. They set no output's chain, so may follow M and K (RowsDoNotDependOnM). For a
// transposed a as for a plain one: the backward's weight gradients (x^T dy over 1024 tokens, 64
// tiles of 128 x 128) took 10.4 us each on 64 SMs.
int64_t tc_tile_rows(int64_t m, int64_t n, int64_t k, DType dt) {
  const int64_t col_tiles = (n + kTcN - 1) / kTcN;
  const int64_t tiles = ((m + kTcM - 1) / kTcM) * col_tiles;
  if (2 * tiles <= kSms) return 64;
  if (!kTcBigTilesOn || dtype_bytes(dt, 1) != 2) return kTcM;
  const int64_t big_tiles = ((m + kTcBigRows - 1) / kTcBigRows) * col_tiles;
  const int64_t steps = std::max<int64_t>((k + kTcK - 1) / kTcK, 1);
  auto waves = [](int64_t t) { return (t + kSms - 1) / kSms; };
  // Hundredths of a microsecond.
  const int64_t small = waves(tiles) * (40 * steps + 570);
  const int64_t big = waves(big_tiles) * (65 * steps + 1700);
  return big < small ? kTcBigRows : kTcM;
}

// Split K's two kernels: the slices' partials into f32 scratch, then their sum in split order.
OpExpansion tc_split_expansion(KernelCache& cache, DType dt, bool ta, bool tb, bool async,
                               int64_t m, int64_t n, int64_t k, const TcSplit& split) {
  KernelCall part{
      .kernel = async ? cache.get(kernel_key(tc_async_splitk_name(ta, tb), dt),
                                  [&] { return build_tc_matmul_async_splitk(dt, ta, tb); })
                      : cache.get(kernel_key(tc_splitk_name(ta, tb), dt),
                                  [&] { return build_tc_matmul_splitk(dt, ta, tb); }),
      .buffers = {input_slot(0), input_slot(1), scratch_slot(0)},
      .dims = {m, n, k, split.slice, split.splits}};
  KernelCall sum{.kernel = cache.get(kernel_key(tc_splitk_sum_name(n < kSumFlatBelow), dt),
                                     [&] { return build_tc_splitk_sum(dt, n < kSumFlatBelow); }),
                 .buffers = {scratch_slot(0), output_slot(0)},
                 .dims = {m, n, split.splits}};
  return OpExpansion{.scratch = {{DType::F32, {split.splits, m, n}}}, .calls = {part, sum}};
}

// The TMA kernel's one call; with `addend` its epilogue adds input 2 (and *fused says so).
// `dims` = {M, N, K}. With N > M (b the larger operand) and kTcRowsFirstOn the blocks run row
// tiles first: a wave then reads a few of b's column panels and all of a, not all of b. Why
// (H100, forty-second session; the cause inferred, not profiled): 4096 x 8192 x 2048 took
// 288.9 us against 122.6 for 4096 x 4096 x 2048, half the work; its plain order's waves each
// read all of the 32 MB b, which with a's 16 MB fills the 50 MB L2. Rows first, it took 239.3
// against 285.4 us in the plain order (H100, forty-third session).
OpExpansion tc_async_expansion(KernelCache& cache, DType dt, bool ta, bool tb, int64_t rows,
                               bool n8, bool addend, bool* fused, std::vector<int64_t> dims) {
  *fused = addend;
  const bool rows_first = kTcRowsFirstOn && dims[1] > dims[0];
  const bool short_k = tc_short_k(dt, rows, dims[2]);
  KernelCall call{
      .kernel = cache.get(
          kernel_key(tc_async_name(ta, tb, rows, n8, addend, rows_first, short_k), dt),
          [&] { return build_tc_matmul_async(dt, ta, tb, rows, n8, addend, rows_first, short_k); }),
      .buffers = {input_slot(0), input_slot(1), output_slot(0)},
      .dims = std::move(dims)};
  if (addend) call.buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0)};
  return OpExpansion{.calls = {call}};
}

// The product's kernels (matmul_expansion below); with an addend (input 2) the TMA kernels add it
// in their epilogue (`addend`: the caller asks; `*fused` says whether it was).
OpExpansion matmul_expansion(KernelCache& cache, const std::vector<TensorType>& in,
                             const std::vector<TensorType>& out, const Attrs& attrs, bool addend,
                             bool* fused);

// A tf32 product with a transposed a or a plain b: wgmma reads tf32 tiles K-major only, so the
// operands that are not (a [K, M], b [K, N]) are copied transposed into scratch first (strided.h)
// and the product runs as a·b^T on the TMA kernels: the register-staged kernels' chain, the same
// bits, where those took 1430 us for 4096^3 on the H100 against 536 (bench/RESULTS.md).
OpExpansion tf32_k_major_expansion(KernelCache& cache, const std::vector<TensorType>& in,
                                   const std::vector<TensorType>& out, const Attrs& attrs,
                                   bool addend, bool* fused) {
  const bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  OpExpansion ex;
  std::vector<TensorType> nt_in = in;
  KernelArg operand[2] = {input_slot(0), input_slot(1)};
  // Operand i ([rows, cols] as given) copied to [cols, rows].
  auto transpose = [&](int i) {
    const std::vector<int64_t>& shape = in[i].shape;
    const int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const int slot = static_cast<int>(ex.scratch.size());
    ex.scratch.push_back({DType::F32, {cols, rows}});
    ex.calls.push_back(
        strided_copy_call(cache, DType::F32, rows * cols,
                          StridedView{.shape = {cols, rows}, .strides = {1, cols}, .offset = 0},
                          input_slot(i), scratch_slot(slot)));
    nt_in[i] = {DType::F32, {cols, rows}};
    operand[i] = scratch_slot(slot);
  };
  if (ta) transpose(0);
  if (!tb) transpose(1);
  Attrs nt = attrs;
  nt["transpose_a"] = false;
  nt["transpose_b"] = true;
  append_expansion(ex, matmul_expansion(cache, nt_in, out, nt, addend, fused),
                   {operand[0], operand[1], input_slot(2)}, {output_slot(0)});
  return ex;
}

// c = a·b, or with an addend a·b rounded to c's dtype, plus the addend, rounded (an add's bits):
// in the TMA kernels' epilogue, else the product into scratch and the add op's own kernel.
ExpandFn expand_matmul(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    bool fused = false;
    OpExpansion ex = matmul_expansion(*cache, in, out, attrs, in.size() > 2, &fused);
    if (in.size() <= 2 || fused) return ex;
    const int product = static_cast<int>(ex.scratch.size());
    ex.scratch.push_back(out[0]);
    for (KernelCall& call : ex.calls)
      for (KernelArg& arg : call.buffers)
        if (arg.kind == KernelArg::Kind::Output) arg = scratch_slot(product);
    const OpSchema& add = *op_registry().find("add");
    for (KernelCall call : add.expand({out[0], in[2]}, out, {}).calls) {
      for (KernelArg& arg : call.buffers)
        if (arg.kind == KernelArg::Kind::Input)
          arg = arg.index == 0 ? scratch_slot(product) : input_slot(2);
      ex.calls.push_back(call);
    }
    return ex;
  };
}

OpExpansion matmul_expansion(KernelCache& cache_ref, const std::vector<TensorType>& in,
                             const std::vector<TensorType>& out, const Attrs& attrs, bool addend,
                             bool* fused) {
  KernelCache* cache = &cache_ref;
  {
    DType dt = out[0].dtype;
    bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
    const std::vector<int64_t>& cs = out[0].shape;
    const std::vector<int64_t>& as = in[0].shape;
    int64_t m = cs[cs.size() - 2], n = cs.back();
    int64_t k = ta ? as[as.size() - 2] : as.back();
    const MatmulBatch mb = matmul_batch(in[0], in[1]);
    // bf16/f16 (and f32 with precision tf32) on the tensor cores when the product is one matrix
    // product (a's batch folded into its rows): the K chain never depends on M, so neither do a
    // row's bits.
    const bool tf32 = dt == DType::F32 && tf32_of(attrs);
    // Matrices, or a batch folded into a's rows (then only b, a matrix, is copied).
    if (tf32 && (ta || !tb) && k % 8 == 0 && in[1].shape.size() == 2 &&
        (in[0].shape.size() == 2 || (!ta && folds_into_rows(mb, ta))))
      return tf32_k_major_expansion(*cache, in, out, attrs, addend, fused);
    if ((dt == DType::BF16 || dt == DType::F16 || tf32) &&
        (mb.count == 1 || folds_into_rows(mb, ta))) {
      // Asynchronous copies where the rows are 16-byte aligned: a choice by K and N only for a
      // not transposed a; a transposed one (one product, K over the tokens) needs M too. tf32
      // tiles are K-major only (wgmma reads no MN-major tf32 operand): the TMA loop takes a
      // plain a and a transposed b, the register-staged kernels transpose the other forms on
      // their way to shared memory.
      const bool aligned = k % 8 == 0 && (tb || n % 8 == 0) && (!tf32 || tb);
      if (!ta && aligned) {
        if (const TcSplit split = plan_tc_split_rows(n, k); split.splits > 1)
          return tc_split_expansion(*cache, dt, false, tb, true, m * mb.count, n, k, split);
        const int64_t rows = tc_tile_rows(m * mb.count, n, k, dt);
        return tc_async_expansion(*cache, dt, false, tb, rows, n % 8 == 0, addend, fused,
                                  {m * mb.count, n, k});
      }
      const bool ta_async = ta && !tf32 && mb.count == 1 && aligned && m % 8 == 0;
      if (ta && mb.count == 1)
        if (const TcSplit split = plan_tc_split(m, n, k); split.splits > 1)
          return tc_split_expansion(*cache, dt, ta, tb, ta_async, m, n, k, split);
      if (ta_async) {
        // Tile rows by M too (a transposed a's K runs over the tokens: no row is a token's).
        const int64_t rows = tc_tile_rows(m, n, k, dt);
        return tc_async_expansion(*cache, dt, ta, tb, rows, n % 8 == 0, addend, fused, {m, n, k});
      }
      KernelCall tc{.kernel = cache->get(kernel_key(tc_matmul_name(ta, tb), dt),
                                         [&] { return build_tc_matmul(dt, ta, tb); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {m * mb.count, n, k}};
      return OpExpansion{.calls = {tc}};
    }
    // The tiling depends on one matrix product's shape only: each batch element's bits are
    // those of the rank-2 matmul of its matrices.
    const Tiling t = plan_matmul(n, k);
    if (mb.count == 1 || folds_into_rows(mb, ta)) {
      // One product: a's batch elements, when a is the only batched operand, stacked as rows.
      m *= mb.count;
      // A few columns over a long K: the skinny kernel (matmul_simt.h), chosen by N and K.
      if (n <= kSkinnyMaxN && k >= kSkinnyMinK) {
        const int64_t nc = skinny_columns(n), splits = (k + kSkinnySlice - 1) / kSkinnySlice;
        KernelCall part{.kernel = cache->get(kernel_key(matmul_skinny_name(ta, tb, nc), dt),
                                             [&] { return build_matmul_skinny(dt, ta, tb, nc); }),
                        .buffers = {input_slot(0), input_slot(1), scratch_slot(0)},
                        .dims = {m, n, k, kSkinnySlice, splits}};
        KernelCall sum{
            .kernel = cache->get(kernel_key(tc_splitk_sum_name(n < kSumFlatBelow), dt),
                                 [&] { return build_tc_splitk_sum(dt, n < kSumFlatBelow); }),
            .buffers = {scratch_slot(0), output_slot(0)},
            .dims = {m, n, splits}};
        return OpExpansion{.scratch = {{DType::F32, {splits, m, n}}}, .calls = {part, sum}};
      }
      if (t.splits > 1) {
        KernelCall part{.kernel = cache->get(kernel_key(matmul_name(ta, tb, t), dt),
                                             [&] { return build_matmul(dt, ta, tb, t); }),
                        .buffers = {input_slot(0), input_slot(1), scratch_slot(0)},
                        .dims = {m, n, k, t.slice, t.splits}};
        KernelCall sum{
            .kernel = cache->get(kernel_key(tc_splitk_sum_name(n < kSumFlatBelow), dt),
                                 [&] { return build_tc_splitk_sum(dt, n < kSumFlatBelow); }),
            .buffers = {scratch_slot(0), output_slot(0)},
            .dims = {m, n, t.splits}};
        return OpExpansion{.scratch = {{DType::F32, {t.splits, m, n}}}, .calls = {part, sum}};
      }
      KernelCall call{.kernel = cache->get(kernel_key(matmul_name(ta, tb, t), dt),
                                           [&] { return build_matmul(dt, ta, tb, t); }),
                      .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                      .dims = {m, n, k}};
      return OpExpansion{.calls = {call}};
    }
    OpExpansion ex;
    auto matrix = [](const std::vector<int64_t>& s) {
      return std::vector<int64_t>(s.end() - 2, s.end());
    };
    BatchOperand a = prepare_operand(*cache, dt, mb.a, matrix(as), mb, 0, ex);
    BatchOperand b = prepare_operand(*cache, dt, mb.b, matrix(in[1].shape), mb, 1, ex);
    // tf32: the operands that are not K-major copied transposed first (as tf32_k_major_expansion
    // does for one product), each matrix of the batch.
    if (tf32 && (ta || !tb) && k % 8 == 0) {
      auto transpose = [&](BatchOperand& op, int64_t rows, int64_t cols) {
        const int64_t count = op.batched ? mb.count : 1;
        const int slot = static_cast<int>(ex.scratch.size());
        ex.scratch.push_back({DType::F32, {count, cols, rows}});
        ex.calls.push_back(strided_copy_call(
            *cache, DType::F32, count * rows * cols,
            StridedView{
                .shape = {count, cols, rows}, .strides = {rows * cols, 1, cols}, .offset = 0},
            op.arg, scratch_slot(slot)));
        op.arg = scratch_slot(slot);
      };
      if (ta) transpose(a, k, m);
      if (!tb) transpose(b, k, n);
      ex.calls.push_back(tc_batch_call(*cache, dt, false, true, a.batched, b.batched, {}, m, n, k,
                                       mb.count, a.arg, b.arg, output_slot(0)));
      return ex;
    }
    // bf16/f16 products whose rows are 16-byte aligned: the tensor cores, one grid z per batch
    // element (each element's bits those of its rank-2 product on the same kernel family).
    if (tc_batch_fits(dt, ta, tb, m, n, k, tf32)) {
      ex.calls.push_back(tc_batch_call(*cache, dt, ta, tb, a.batched, b.batched, {}, m, n, k,
                                       mb.count, a.arg, b.arg, output_slot(0)));
      return ex;
    }
    BatchMode mode{.on = true, .a = a.batched, .b = b.batched};
    // The skinny kernel where the rank-2 product takes it (each element's bits are its own
    // product's): grid z over the elements, c's batch as the split sum's rows.
    if (n <= kSkinnyMaxN && k >= kSkinnyMinK) {
      const int64_t nc = skinny_columns(n), splits = (k + kSkinnySlice - 1) / kSkinnySlice;
      const int part = static_cast<int>(ex.scratch.size());
      ex.scratch.push_back({DType::F32, {splits, mb.count * m, n}});
      ex.calls.push_back(
          {.kernel = cache->get(kernel_key(matmul_skinny_name(ta, tb, nc, mode), dt),
                                [&] { return build_matmul_skinny(dt, ta, tb, nc, mode); }),
           .buffers = {a.arg, b.arg, scratch_slot(part)},
           .dims = {m, n, k, kSkinnySlice, splits, mb.count}});
      ex.calls.push_back(
          {.kernel = cache->get(kernel_key(tc_splitk_sum_name(n < kSumFlatBelow), dt),
                                [&] { return build_tc_splitk_sum(dt, n < kSumFlatBelow); }),
           .buffers = {scratch_slot(part), output_slot(0)},
           .dims = {mb.count * m, n, splits}});
      return ex;
    }
    const Tiling whole{
        .bm = t.bm, .bn = t.bn, .groups = t.groups, .bk = t.bk};  // grid z is the batch's
    ex.calls.push_back({.kernel = cache->get(kernel_key(matmul_name(ta, tb, whole, mode), dt),
                                             [&] { return build_matmul(dt, ta, tb, whole, mode); }),
                        .buffers = {a.arg, b.arg, output_slot(0)},
                        .dims = {m, n, k, mb.count}});
    return ex;
  }
}

// matmul's kernel cases: odd sizes for every tiling and staging (matmul_tc.h's for bf16/f16).
std::vector<OpTestCase> matmul_kernel_cases() {
  return {
      {{{1, 1}, {1, 1}}},
      {{{7, 130}, {130, 33}}},
      // An addend: in the TMA kernels' epilogue (bf16/f16: an edge tile and whole ones, a
      // transposed a), else an add after the product (f32, split K, N not a multiple of 8).
      {{{130, 64}, {64, 136}, {130, 136}}},
      {{{136, 40}, {136, 24}, {40, 24}}, {{"transpose_a", true}}},
      {{{40, 4160}, {4160, 24}, {40, 24}}},
      {{{7, 33}, {33, 5}, {7, 5}}},
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
      // f32 with at most 32 columns and K of 512 or more: the skinny kernel (32 rows a
      // block, K in slices of 256 over grid z, the last ragged), every transpose pair.
      {{{20, 1100}, {1100, 18}}},
      {{{40, 4100}, {4100, 24}}},
      {{{9, 2300}, {24, 2300}}, {{"transpose_b", true}}},
      {{{1030, 33}, {20, 1030}}, {{"transpose_a", true}, {"transpose_b", true}}},
      // Enough 32x32 tiles: the large tiling, one K group and four.
      {{{130, 33}, {33, 1000}}},
      {{{130, 300}, {1000, 300}}, {{"transpose_b", true}}},
      // bf16/f16 with a transposed b and N not a multiple of 8: the "_n1" TMA kernel (c's
      // rows not 16-byte aligned, its epilogue's stores scalar).
      {{{70, 64}, {30, 64}}, {{"transpose_b", true}}},
      {{{300, 1000}, {300, 130}}, {{"transpose_a", true}}},
      // bf16/f16: split K (plan_tc_split), the second slice ragged.
      {{{2148, 33}, {2148, 40}}, {{"transpose_a", true}}},
      {{{2148, 33}, {2148, 260}}, {{"transpose_a", true}}},  // the sum a block per row
      // bf16/f16 with a transposed a on the TMA loop (M, K, N multiples of 8): three
      // row tiles of 64 (the last ragged), b both ways, and split K.
      {{{136, 40}, {136, 24}}, {{"transpose_a", true}}},
      {{{72, 136}, {40, 72}}, {{"transpose_a", true}, {"transpose_b", true}}},
      {{{2144, 40}, {2144, 24}}, {{"transpose_a", true}}},
      // bf16/f16, a not transposed, K from 4096 (plan_tc_split_rows): two slices, the second
      // ragged, b both ways.
      {{{40, 4160}, {4160, 24}}},
      {{{9, 4104}, {16, 4104}}, {{"transpose_b", true}}},
      // Batched: both operands, broadcast ones (copied to c's batch first),
      // a shared matrix on either side, a batch folded into a's rows.
      {{{2, 7, 130}, {2, 130, 33}}},
      {{{3, 1, 5, 7}, {2, 7, 4}}},
      {{{2, 130, 33}, {2, 40, 130}}, {{"transpose_a", true}, {"transpose_b", true}}},
      {{{33, 7}, {4, 7, 130}}},
      {{{2, 33, 700}, {700, 40}}, {{"transpose_a", false}}},
      {{{2, 40, 600}, {2, 600, 24}}},  // skinny, both operands batched
      {{{3, 700, 33}, {1, 700, 40}}, {{"transpose_a", true}}},
      // Batched bf16/f16 with 16-byte aligned rows: the tensor cores, grid z over the batch
      // (two row tiles, the second ragged; a broadcast a; a shared matrix on either side; every
      // transpose pair; M not a multiple of 8).
      {{{2, 136, 40}, {2, 40, 24}}},
      {{{3, 1, 72, 16}, {2, 16, 136}}},
      {{{2, 40, 136}, {40, 24}}, {{"transpose_a", true}}},
      {{{24, 40}, {3, 40, 136}}},
      {{{2, 7, 16}, {2, 136, 16}}, {{"transpose_b", true}}},
      {{{2, 40, 72}, {2, 136, 40}}, {{"transpose_a", true}, {"transpose_b", true}}},
      // precision tf32: the TMA loop (an addend in its epilogue; copies first for the other
      // forms), the register-staged kernels (K ragged), split K, a batch folded into a's rows,
      // batches on grid z (b transposed; the others copied first, a shared a broadcast) and
      // one that stays strict (K ragged).
      {{{130, 72}, {136, 72}}, {{"transpose_b", true}, {"precision", std::string("tf32")}}},
      {{{130, 72}, {136, 72}, {130, 136}},
       {{"transpose_b", true}, {"precision", std::string("tf32")}}},
      {{{7, 130}, {130, 33}}, {{"precision", std::string("tf32")}}},
      {{{130, 33}, {130, 7}}, {{"transpose_a", true}, {"precision", std::string("tf32")}}},
      {{{7, 130}, {33, 7}},
       {{"transpose_a", true}, {"transpose_b", true}, {"precision", std::string("tf32")}}},
      {{{2148, 33}, {2148, 40}}, {{"transpose_a", true}, {"precision", std::string("tf32")}}},
      {{{9, 4104}, {16, 4104}}, {{"transpose_b", true}, {"precision", std::string("tf32")}}},
      {{{2, 7, 40}, {40, 24}}, {{"precision", std::string("tf32")}}},
      {{{2, 7, 16}, {2, 136, 16}}, {{"transpose_b", true}, {"precision", std::string("tf32")}}},
      {{{2, 7, 16}, {2, 16, 24}}, {{"precision", std::string("tf32")}}},
      {{{2, 16, 7}, {2, 24, 16}},
       {{"transpose_a", true}, {"transpose_b", true}, {"precision", std::string("tf32")}}},
      {{{16, 7}, {3, 16, 24}}, {{"transpose_a", true}, {"precision", std::string("tf32")}}},
      {{{2, 7, 13}, {2, 13, 24}}, {{"precision", std::string("tf32")}}},
      // bf16/f16 on the TMA loop with N > M (three column tiles): the row tiles first
      // (kTcRowsFirstOn).
      {{{24, 72}, {72, 264}}},
      {{{40, 72}, {264, 72}}, {{"transpose_b", true}}},
  };
}

}  // namespace

bool tc_batch_fits(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool tf32) {
  return (dt == DType::BF16 || dt == DType::F16 || (tf32 && dt == DType::F32 && !ta && tb)) &&
         k % 8 == 0 && (tb || n % 8 == 0) && (!ta || m % 8 == 0);
}

KernelCall tc_batch_call(KernelCache& cache, DType dt, bool ta, bool tb, bool a_batched,
                         bool b_batched, TcBatchMid mid, int64_t m, int64_t n, int64_t k,
                         int64_t count, KernelArg a, KernelArg b, KernelArg c) {
  // The tile's rows by the blocks of all the batch's products together (bits unchanged); the
  // batched kernel has no 256-row tile.
  const int64_t rows = std::min(tc_tile_rows(m * count, n, k, dt), kTcM);
  const bool n8 = n % 8 == 0;
  return {.kernel = cache.get(
              kernel_key(tc_async_batch_name(ta, tb, a_batched, b_batched, rows, n8, mid), dt),
              [&] {
                return build_tc_matmul_async_batch(dt, ta, tb, a_batched, b_batched, rows, n8, mid);
              }),
          .buffers = {a, b, c},
          .dims = {m, n, k, count}};
}

void register_matmul(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "matmul",
       .doc = "c = op(a) @ op(b) (+ addend), op = optional transpose of the last two axes; leading "
              "axes are batch dims, broadcast by NumPy rules; the product is rounded to c's dtype "
              "before the addend is added (an add's bits: the graph folds a single-use product's "
              "add in)",
       .inputs = {"a", "b", "addend"},
       .optional_inputs = 1,
       .addend_input = 2,
       .outputs = {"c"},
       .attrs = {{.name = "transpose_a",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "use a^T"},
                 {.name = "transpose_b",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "use b^T"},
                 {.name = "precision",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("strict")},
                  .doc = "f32 products: strict (fma chains on the CUDA cores, bit-identical CPU vs "
                         "GPU) or tf32 (the tensor cores, inputs read as tf32; a batched product "
                         "whose K is not a multiple of 8 stays strict unless b is transposed and "
                         "a is not); bf16/f16 always use the tensor cores"}},
       .infer = infer_matmul,
       .reference = ref_matmul,
       .gradient = grad_matmul,
       .expand = expand_matmul(cache),
       .tests = {.kernel = matmul_kernel_cases(),
                 .gradient =
                     {
                         {{{3, 5}, {5, 4}}},
                         {{{5, 3}, {5, 4}}, {{"transpose_a", true}}},
                         {{{3, 5}, {4, 5}}, {{"transpose_b", true}}},
                         {{{5, 3}, {4, 5}}, {{"transpose_a", true}, {"transpose_b", true}}},
                         {{{1, 1}, {1, 7}}},
                         {{{2, 3, 5}, {2, 5, 4}}},
                         {{{2, 1, 3, 5}, {3, 4, 5}}, {{"transpose_b", true}}},
                         {{{2, 3, 5}, {5, 4}}},
                         {{{2, 5, 3}, {5, 4}}, {{"transpose_a", true}}},
                         {{{3, 5}, {2, 5, 4}}},
                         {{{3, 5}, {5, 4}, {3, 4}}},  // an addend
                         {{{3, 5}, {5, 4}}, {{"precision", std::string("tf32")}}},
                     },
                 .examples = {{.inputs = {{{2, 2}, {1, 2, 3, 4}}, {{2, 1}, {5, 6}}},
                               .outputs = {{{2, 1}, {17, 39}}}}}}});
}

}  // namespace tilerun::kernels
