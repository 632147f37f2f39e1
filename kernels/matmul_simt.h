// The matmul family's f32 kernel on the CUDA cores (matmul_simt.cc), which matmul.cc's expansion
// and its batched form use.
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
// functions of (N, K) and the constants below only (never of M), never of the grid or the device,
// so each output is always the same G fma chains (each in ascending k, from +0) added in the same
// order, on every backend. Where that still leaves few blocks for a long K, K also splits into
// slices over the grid, the slices' partial tiles then added in slice order by a second kernel
// (build_matmul below). No atomics.
//
// The tile's shape sets no output's order, so it follows N and K too: a short K (at most
// kSimtShortK) with one group is one step of the whole K, over 64x64 tiles where there are
// enough of them. A tile wholly inside c is written 4 consecutive columns a thread (16-byte
// stores where N is a multiple of 4), an edge tile element by element under guards.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/ir/kernel.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

constexpr int64_t kSimtRM = 4, kSimtRN = 4;  // a thread's micro tile
constexpr int64_t kSimtShortK = 32;          // up to this K one step of the whole K

// The tilings: 32x32 tiles (8x8 threads per group), and 16x16 tiles (4x4 threads per group)
// for outputs with fewer than kMinBlocks 32x32 tiles; 64x64 (16x16 threads) for a short K
// (plan_matmul). With G groups, each K step of the block covers G * BK of K and group g takes
// the g-th BK of it.
struct Tiling {
  int64_t bm, bn, groups;
  int64_t splits = 1, slice = 0;  // K slices over grid z (slice: a multiple of groups * 16)
  // K per group and step: 16, or with one group (where the step sets no output's order) the
  // whole of a short K rounded up to 4, so K <= kSimtShortK is one step without a ragged one.
  int64_t bk = 16;
  int64_t ty() const { return bm / kSimtRM; }
  int64_t tx() const { return bn / kSimtRN; }
  int threads() const { return static_cast<int>(groups * ty() * tx()); }
};

// The tiling of an [M, N] x [N, K] product, from N and K only (never M: batch invariance).
Tiling plan_matmul(int64_t n, int64_t k);

// A batched kernel's third grid axis runs over c's batch elements; a and b each hold one
// matrix per element (batched) or one for all.
struct BatchMode {
  bool on = false, a = false, b = false;
};

// "matmul_nt_16x16g8": transposes of a and b as BLAS spells them (n: as stored, t: transposed),
// the block tile and the K groups; "_batch_ab" etc. when batched (which operands are).
std::string matmul_name(bool ta, bool tb, const Tiling& t, BatchMode batch = {});

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
//
// A short K's kernel (Tiling::bk not 16, one group; its K at most bk) has no pipeline: one
// load, one store into shared buffer 0, one fma loop (nothing held in registers across it).
//
// Batched (BatchMode::on): one more dim B and grid axis z over c's batch elements; a, b and c get
// a leading axis (B for a batched operand, 1 for a shared one), and a partial tile is read with
// explicit guards, as `copy` would, but within the batch element's matrix.
//
// Split K (Tiling::splits > 1, not batched): dims L (the slice) and S, grid z over the slices;
// slice z runs K from z * L (steps aligned with the unsplit kernel's, so each group keeps its k)
// and its tile goes to part [S, M, N] f32, which build_tc_splitk_sum adds in slice order.
compiler::Kernel build_matmul(DType dtype, bool ta, bool tb, const Tiling& tl,
                              BatchMode batch = {});

// A skinny product: N at most kSkinnyMaxN with a long K (the mHC mixing GEMMs: [T, 4096] x
// [4096, 24], and [4096, T] x [T, 24] in their gradient), where a 16 x 16 tile's unrolled fma
// loop held 231 registers and two blocks an SM (27 us for ~4 us of bytes on the H200, ncu).
// A block takes 64 rows of c, all its columns and one slice of kSkinnySlice along K: per step
// a [64 rows, 32 k] tile of a and a [32 k, nc] tile of b in shared memory (k-major), and warp w
// of 8 takes the step's k in [4 w, 4 w + 4), lane l rows l and l + 32: 2·nc accumulators a
// thread, each b value a broadcast used twice. Then the warps' partials are added through shared
// memory in warp order into part [S, M, N] f32, which build_tc_splitk_sum adds in slice order.
// Every output is the same sum whatever M is: warp w's fma chain over its k (ascending, from
// +0), the warps 0..7 left to right, the slices left to right. nc (N rounded up to 8) and the
// slice follow N and K only. Parameters a, b, part; dims M, N (at most nc), K, L (the slice, a
// multiple of 32) and S. (H200, T = 1024: 27.3 -> 12.9 us for [1024, 4096] x [4096, 24]; with 32
// rows a block, one a lane, 17.3.)
constexpr int64_t kSkinnyMaxN = 32, kSkinnySlice = 256, kSkinnyMinK = 2 * kSkinnySlice;
int64_t skinny_columns(int64_t n);  // nc: n rounded up to 8
// Batched (BatchMode::on): dim B, a and b with a leading axis (B or 1), part [S, B·M, N] (c's
// batch as rows), grid z over the elements: each element's bits those of its rank-2 product.
std::string matmul_skinny_name(bool ta, bool tb, int64_t nc, BatchMode batch = {});
compiler::Kernel build_matmul_skinny(DType dtype, bool ta, bool tb, int64_t nc,
                                     BatchMode batch = {});

}  // namespace tilerun::kernels
