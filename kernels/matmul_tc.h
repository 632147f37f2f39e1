// The bf16/f16 matmul kernels on the tensor cores (ir.h Gemm): 128 x 128 x 64 tiles (two
// warpgroups), or 64 x 128 x 64 (one) for the copy_async kernels. Every output is the same chain
// of 16-wide tensor-core steps in k order whatever the tile, so a row's bits never depend on M.
// kernels/matmul.cc picks a kernel by the transposes and the operands' row alignment (K and N),
// and the copy_async tile's rows by how many tiles the product has.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/kernel.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

// The tiling: a 128 x 128 output tile per block of two warpgroups, K in steps of 64 (16-bit
// operands; f32 ones, read as tf32, in steps of 32: tc_k_step).
constexpr int64_t kTcM = 128, kTcN = 128, kTcK = 64;
constexpr int kTcThreads = 256;
// The TMA matmul's large tile: 256 rows on the same two warpgroups, each two 64-row blocks of
// wgmma (128 accumulator registers a thread). A step then reads a's 256 rows and b's 128 columns
// (48 KB) for twice a 128-row tile's products: a quarter fewer bytes from L2 a product, and
// twice the tensor-core time a step to hide each step's wait and barrier behind. Four stages
// (192 KB); the epilogue's tile lives in the stages. 16-bit elements only.
constexpr int64_t kTcBigRows = 256;
constexpr int kBigTileStages = 4;
// The TMA matmul's stages on a 128-row tile of 16-bit operands (tc_async_stages).
constexpr int kTcAsyncStages = 5;
// Whether the matmul expansion runs the 256-row tile where its cost model says so (matmul.cc
// tc_tile_rows). On since GpuSession.BigTileMatmulRowsEqualTheSmallTilesRows passed on an H100
// (bench/RESULTS.md, forty-second session); the forty-first session's first GPU run of the tile,
// before the lowering fix of its row blocks, had failed it.
constexpr bool kTcBigTilesOn = true;
// Whether the matmul expansion runs the row tiles first where N > M (tc_async_name's
// `rows_first`). On since an H100 run (forty-third session, bench/RESULTS.md) passed every
// GpuOpIdentity matmul case (56 and 57 take it) and timed 4096 x 8192 x 2048 at 239.3 against
// 285.4 us in the plain order.
constexpr bool kTcRowsFirstOn = true;

// The K step of a K-major tile: one 128-byte row of the 128B swizzle, 64 elements of 16 bits or
// 32 of f32 (a tf32 gemm's, wgmma k8 four times a step).
inline int64_t tc_k_step(DType dtype) { return 128 / dtype_bytes(dtype, 1); }
// A kernel's name: `base` (which spells the 16-bit tiling, "..x64..", "_tma5") for `dtype`; an
// f32 (tf32) kernel's says its K step ("..x32.."), its stages (tc_async_stages) and "tf32".
std::string tc_kernel_name(const std::string& base, DType dtype);

// Tiles staged through registers: any transposes, any K and N.
std::string tc_matmul_name(bool ta, bool tb);
compiler::Kernel build_tc_matmul(DType dtype, bool ta, bool tb);

// Split K (a transposed product with few output tiles and a long K; kernels/matmul.cc picks it):
// block (x, y, z) runs build_tc_matmul's chain over slice z of K, [z L, min((z + 1) L, K)), L a
// multiple of kTcK, into part [S, M, N] (f32); the sum kernel then adds the S partials in split
// order from part[0] (no atomics) and rounds once to c's dtype. Same bits on every backend.
std::string tc_splitk_name(bool ta, bool tb);
compiler::Kernel build_tc_matmul_splitk(DType dtype, bool ta, bool tb);
std::string tc_splitk_sum_name(bool flat);
compiler::Kernel build_tc_splitk_sum(DType dtype, bool flat);

// Tiles staged by the tensor memory accelerator, five buffers deep: K, M when a is transposed and N
// when b is not, multiples of 8 (16-byte rows); a transposed a lands as m's MN-major panels.
// The same bits as build_tc_matmul; the split-K variant those of build_tc_matmul_splitk.
// `rows` = 64: a 64 x 128 tile for one warpgroup (128 threads), twice the blocks of a product
// with few 128-row tiles; `rows` = kTcBigRows (16-bit only) a 256 x 128 tile on two warpgroups,
// half the blocks of a product with many. The tile's rows set no output's chain (each output's
// K loop is the same), so the bits are the same whichever tile runs.
// `n8`: N is a multiple of 8 (always so when b is not transposed), so c's rows are 16-byte
// aligned and the epilogue writes them as vectors; a transposed b with N not a multiple of 8
// runs the "_n1" kernels. The bits are the same either way.
// `addend`: c = the product rounded to c's dtype, plus an input addend [M, N], rounded (an add
// after the kernel, in its epilogue); parameters a, b, addend, c.
// `rows_first`: the grid's x axis runs over the row tiles ("_rf"), so that a wave of blocks
// covers a few column tiles of every row tile and reads a once from memory, where the plain
// order covers every column tile of a few row tiles and reads all of b each wave (kernels/
// matmul.cc picks it for N > M, b the larger operand, while kTcRowsFirstOn). The blocks' order sets
// no output's chain: the same bits.
// `short_k`: the short-K kernel (tc_short_k; a 128-row tile of 16-bit operands only), its
// name's "_tma3".
std::string tc_async_name(bool ta, bool tb, int64_t rows = kTcM, bool n8 = true,
                          bool addend = false, bool rows_first = false, bool short_k = false);
compiler::Kernel build_tc_matmul_async(DType dtype, bool ta, bool tb, int64_t rows = kTcM,
                                       bool n8 = true, bool addend = false, bool rows_first = false,
                                       bool short_k = false);
std::string tc_async_splitk_name(bool ta, bool tb);
compiler::Kernel build_tc_matmul_async_splitk(DType dtype, bool ta, bool tb);

// Batched on the copy_async loop (K, M for a transposed a, N for a plain b multiples of 8): grid
// axis z over c's B batch elements; a [B or 1, .., ..], b likewise, c [B, M, N]. Each element's
// bits are build_tc_matmul_async's for its matrices.
// `mid`: an operand whose batch axis lies between its matrix's two ([.., B, ..]: einsum's
// "tgk,gko->tgo" reads a's group g of each token in place), its rows B matrix rows apart. The
// boxes and the epilogue's stores only change their coordinates: the same bits.
struct TcBatchMid {
  bool a = false, b = false, c = false;
};
std::string tc_async_batch_name(bool ta, bool tb, bool a_batched, bool b_batched,
                                int64_t rows = kTcM, bool n8 = true, TcBatchMid mid = {});
compiler::Kernel build_tc_matmul_async_batch(DType dtype, bool ta, bool tb, bool a_batched,
                                             bool b_batched, int64_t rows = kTcM, bool n8 = true,
                                             TcBatchMid mid = {});

// ---- The register-staged K loop, for other kernels on the same tiling (grouped_matmul) ----------

// One operand of the block's gemm: rows [r0, r0 + 128) of a global tensor, [rows, k] (K-major)
// or [k, rows], or of the matrix `lead` of a 3-d one ([E, .., ..]: an expert's weights).
struct TcOperand {
  compiler::Buf buf;
  compiler::Val r0, rows;
  compiler::Val lead = {};  // undefined: a 2-d tensor
};

// The shared tiles and staging registers of tc_gemm_steps, allocated once per kernel.
struct TcStaging {
  std::vector<compiler::Buf> as, bs;
  compiler::Buf ra, rb;
  bool a_k_major = true, b_k_major = true;
  int64_t k_step = kTcK;  // tc_k_step of the operands' dtype
};
TcStaging tc_staging(compiler::Scope& s, DType dtype, bool a_k_major, bool b_k_major);

// acc [128, 128] (f32, zeroed by the caller) += a's tile times b's tile transposed over k in
// [k_lo, k_hi), 64 at a time from k_lo, zeros outside; k_lo undefined: [0, k_hi) of 2-d
// operands, edges read by copy (build_tc_matmul's loop). Block-uniform; ends with every gemm
// done, but other warpgroups may still be reading the shared tiles: a caller that runs it again
// puts a barrier between.
void tc_gemm_steps(compiler::Scope& s, const TcStaging& st, const TcOperand& a, const TcOperand& b,
                   const compiler::Buf& acc, const compiler::Val& k_lo, const compiler::Val& k_hi);

// ---- The TMA K loop, for other kernels on the same tiling (grouped_matmul) ---------------------

// Step j's global boxes: a's [128 (m), 64 (k)], or [64 (k), 64 (m)] for m's half h when a is
// transposed; b's [128 (n), 64 (k)] when transposed, else
// [64 (k), 64 (n)] for n's half h. A box may be a matrix of a 3-d tensor ([1, .., ..]) and may
// reach past the operand (zeros) or past what the caller stores (rows are independent).
struct TcAsyncBoxes {
  std::function<compiler::BufRegion(const compiler::Val&j, int h)> a, b;
};

// The stages' buffers of both operands, each a stack [stages, ..tile] (a transposed a's tile as
// m's [64 (k), 64 (m)] panels, an N-major b's as n's two [64 (k), 64 (n)] panels), and the
// accumulator (f32 [rows, 128], zeroed by the caller).
// `rows`: the tile's rows of a (128, or 64 for one warpgroup); `stages`: the buffers (at least
// 2; the copies run stages - 1 steps ahead of the gemms).
// The stages of the matmul kernels' TMA loop for `dtype`: f32 (tf32) tiles are twice the bytes of
// 16-bit ones a K step's row, so four stages (128 KB), which leave room for the epilogue's tile.
inline int tc_async_stages(DType dtype) { return dtype == DType::F32 ? 4 : kTcAsyncStages; }
// A short K on a 128-row tile of 16-bit operands (at most kTcShortKSteps steps): three stages,
// every step's copies out at once, and the epilogue's tile in a's first two stages (as the
// 256-row tile's), 96 KB a block instead of 195, so that two blocks share an SM and one's
// prologue and epilogue run beside the other's copies and gemms. With one block an SM, a
// 128-row tile's fixed cost (~5.7 us, tc_tile_rows' model, against 0.4 a step) left the SM
// idle through most of a short-K tile: the lightning indexer's score product ([T·16, 128] x
// [C, 128]^T, K = 128) took 134 us at T = 4096 where its bytes take ~45. The stages set no
// output's chain: the same bits.
constexpr int kShortKStages = 3;
// The most K steps the short-K kernel takes (0: it never runs). Off until the kernel has run on
// a GPU: built and checked on the CPU (MatmulTensorCore.ShortKKernelGivesTheFiveStageBits).
constexpr int64_t kTcShortKSteps = 0;
// Whether build_tc_matmul_async runs the short-K kernel for a tile of `rows` over K = k.
bool tc_short_k(DType dtype, int64_t rows, int64_t k);
struct TcAsyncStaging {
  compiler::Buf as, bs;  // stacks of the stages' tiles
  compiler::Buf acc;     // f32 [rows, 128]
  compiler::Buf full;    // per stage, the mbarrier its boxes complete on
  bool ta = false, tb = false;
  int64_t rows = kTcM;
  int stages = kTcAsyncStages;
  // A kernel that runs the K loop more than once: the mbarriers are invalidated once the last
  // tiles landed, so that the next run's init counts their phases afresh.
  bool again = false;
  int64_t k_step = kTcK;  // tc_k_step of the operands' dtype
  // b's boxes land here instead (one box a stage, the whole of stage j's slice), and `unpack_b`
  // (stage, step) then writes that step's tile of bs from it, after the step's copies landed and
  // before the barrier ahead of its gemm, while the previous step's gemm still runs: FP4 weights
  // decoded into the 16-bit tile the tensor core reads (grouped_matmul_fp4).
  compiler::Buf b_landing;
  std::vector<int64_t> b_landing_tile;  // a stage's extents (b_landing is [stages, ..these])
  std::function<void(const compiler::Val&, const compiler::Val&)> unpack_b;
};
TcAsyncStaging tc_async_staging(compiler::Scope& s, DType dtype, bool ta, bool tb,
                                int64_t rows = kTcM, int stages = kTcAsyncStages,
                                bool again = false);

// acc += a's tile times b's over k in [0, k), 64 at a time, at least one step (K = 0 adds
// zeros to +0): build_tc_matmul's chains. Block-uniform; ends with every copy and gemm done,
// but other warpgroups may still be reading the tiles: a caller that runs it again puts a
// barrier between. `mask_last`, if given, runs once the last step's tiles (stage 0) have
// landed and before its gemm, between barriers: it may overwrite them (zero rows past an end).
void tc_async_steps(compiler::Scope& s, const TcAsyncStaging& st, const TcAsyncBoxes& boxes,
                    const compiler::Val& k, const std::function<void()>& mask_last = {});

// The epilogue through shared memory: the fragments (f32 [rows, 128 / frags.size()] each, side by
// side along n) rounded to `dtype` into a padded shared tile, a barrier, then a tile wholly inside
// c ([m, n] from (m0, n0)) as 16-byte vectors where c_at's rows are proved 16-byte aligned, an
// edge tile element by element. c_at(i, j) names c's element at m-index i, n-index j; c's rows run
// along n, or with `transposed` along m (c stored [n, m]: a weight gradient written transposed).
// Block-uniform; the same one rounding of each value as a direct store, so the same bits.
// `tile`, if given, names the shared tile's element (transposed: (n, m), else (m, n)) in memory
// the kernel already holds (the K loop's stages, free once every gemm is done: a barrier comes
// first), so the epilogue takes no shared memory of its own; else a padded tile is allocated.
// `addend`, if given, names the value added to c's element (i, j) after the product was rounded
// to c's dtype: the whole tile adds it to the shared tile's (rounded) value, an edge tile stores
// the product, then reads it back and adds.
using TcTileAt = std::function<compiler::Ref(const compiler::Val&, const compiler::Val&)>;
using TcValueAt = std::function<compiler::Val(const compiler::Val&, const compiler::Val&)>;
void tc_store_through_shared(
    compiler::Scope& s, DType dtype, const std::vector<compiler::Buf>& frags, int64_t rows,
    const compiler::Val& m0, const compiler::Val& n0, const compiler::Val& m,
    const compiler::Val& n,
    const std::function<compiler::Ref(const compiler::Val&, const compiler::Val&)>& c_at,
    bool transposed = false, const TcTileAt& tile = {}, const TcValueAt& addend = {});

}  // namespace tilerun::kernels
