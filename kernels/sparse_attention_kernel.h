// sparse_attention's tile kernels (kernels/sparse_attention.cc has the op, the math and the
// layout of the work). Every kernel is strict: no atomics, one owner per output element, sums in
// orders fixed by constants and the shape only, so the CPU and the GPU give the same bits.
#pragma once

#include <cstdint>

#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"

namespace tilerun::kernels {

// The largest K and H·K the per-token kernels hold in shared memory (their keys' column chunk
// [K, 33] and the scores [H, K] in f32: 68 KiB and 64 KiB).
constexpr int64_t kSparseAttentionMaxK = 512;
constexpr int64_t kSparseAttentionMaxHK = 16384;

// The shape every kernel of the op is specialised on (H, K and W are compile-time constants: the
// per-token tiles' sizes); T, S and E stay dims. K counts every slot of a token: the W window
// slots first (slot j < W names key t - j, or nothing when j > t), then idx's K - W columns.
// `off` (also a constant: the kernels' names carry it) is added to idx's ids: id i names kv's row
// off + i, so idx selects among the last S - off rows (V4's compressed keys after the T
// tokens' own) and counting_sort's offsets of idx cover S - off keys.
struct SparseAttentionShape {
  int64_t t = 1, h = 1, e = 1, s = 1, k = 1, w = 0, off = 0;
  int64_t selected() const { return k - w; }       // idx's columns
  int64_t sorted_keys() const { return s - off; }  // the keys idx can name
};

// Forward: one block per token. Buffers q, kv, idx, bias, sink (input slots 0..4), y (output 0)
// and, with `mass`, mass [T, K] (output 1: Σ_h p in head order).
OpExpansion sparse_attention_expansion(KernelCache& cache, DType dtype,
                                       const SparseAttentionShape& shape, double scale, bool mass);

// Backward: inputs q, kv, idx, bias, sink, y, dy, order, offsets (slots 0..8); outputs dq, dkv,
// dbias, dsink. Kernel A (a block per token) writes dq, dbias and the f32 scratch p, ds [T, H, K]
// and -p_sink·delta [T, H]; kernel B (a block per key and column tile) sums dkv over the key's
// (t, j) pairs in counting_sort's order; dsink is a lane-order sum over tokens of the scratch.
OpExpansion sparse_attention_grad_expansion(KernelCache& cache, DType dtype,
                                            const SparseAttentionShape& shape, double scale);

}  // namespace tilerun::kernels
