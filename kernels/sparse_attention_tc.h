// sparse_attention's tensor-core kernels (sparse_attention_tc.cc) and the pieces they share with
// the SIMT kernels (sparse_attention_kernel.cc). Internal to those two files.
#pragma once

#include <string>

#include "compiler/ir/builder.h"
#include "compiler/ir/kernel.h"
#include "kernels/sparse_attention_kernel.h"

namespace tilerun::kernels::sparse_attention_detail {

compiler::Val nan_f32();
inline compiler::Val i64(int64_t v) { return compiler::Val(v); }
// "<base>_h<H>_k<K>_<dtype>": a kernel is specialised on H and K.
std::string kernel_name(const std::string& base, DType dt, const SparseAttentionShape& sh);
// A window slot past the first key (j > t): no key, no part in the softmax.
constexpr int64_t kEmptySlot = -2;
// ids[j] for the K slots: the window's keys t - j (kEmptySlot for j > t), then idx[t, j - W], or
// -1 outside [0, S). Barrier after it.
void stage_token_ids(compiler::Scope& s, const SparseAttentionShape& sh, const compiler::Idx& t,
                     const compiler::Buf& ids, const compiler::Buf& idx,
                     const compiler::Val& s_dim);
// A slot's logit z, -inf for an empty slot (p = 0), NaN for a bad id.
compiler::Val slot_score(const compiler::Val& id, const compiler::Val& z);
// mass[t, j] = Σ_h p[h, j] in head order, from the probabilities [H, K] in shared memory.
void write_mass(compiler::Scope& s, int64_t h, int64_t k, const compiler::Idx& t,
                const compiler::Buf& p, const compiler::Buf& mass);

// The parameters every per-token kernel opens with, in this order: dims T, S, E (a multiple of
// e_divisible_by); q [T, H, E], kv [S, E], idx i32 [T, K - W], bias [T, K], sink [H].
struct TokenParams {
  compiler::Dim t, s, e;
  compiler::Buf q, kv, idx, bias, sink;
};
TokenParams declare_token_params(compiler::KernelBuilder& kb, DType dt,
                                 const SparseAttentionShape& sh, int64_t e_divisible_by = 1);

// The forward kernels' parameters: the token parameters, then y [T, H, E], mass [T, K] when
// asked, and the scalar scale.
struct ForwardParams {
  TokenParams in;
  compiler::Buf y, mass;
  compiler::Val scale;
};
ForwardParams declare_forward_params(compiler::KernelBuilder& kb, DType dt,
                                     const SparseAttentionShape& sh, bool with_mass,
                                     int64_t e_divisible_by = 1);

// A key's run of counting_sort's order: [begin, end) from offsets[key] and offsets[key + 1]
// (the end of the order for the last key), clamped into [0, n) and begin <= end.
struct KeyRun {
  compiler::Val begin, end;
};
KeyRun key_run(compiler::Scope& s, const compiler::Buf& offsets, const compiler::Idx& key,
               const compiler::Val& keys, const compiler::Val& n);
// The run of kv's row `key` when idx's ids are offset by `off` (SparseAttentionShape::off):
// offsets cover rows off .. S - 1 (id key - off); rows below off have an empty run.
KeyRun key_run_shifted(compiler::Scope& s, const compiler::Buf& offsets, const compiler::Idx& key,
                       const compiler::Val& s_dim, const compiler::Val& n, int64_t off);

// Kernel A's per-token tail: sink_part[t, h] = -(exp(sink[h] - m[h]) / d[h])·delta[h], then (after
// a barrier) dbias[t, j] = Σ_h ds[h, j] in head order, ds [H, K] in shared memory.
struct TokenGrads {
  compiler::Buf ds, m, d, sink, delta, sink_part, dbias;
};
void write_sink_and_bias_grads(compiler::Scope& s, const SparseAttentionShape& sh,
                               const compiler::Idx& t, const TokenGrads& g);

// Whether the tensor-core kernels take this shape: bf16/f16, H a multiple of 8 up to 256, K of
// 64, E of 8, and the token's tiles within 200 KiB of shared memory.
bool use_tensor_cores(DType dt, const SparseAttentionShape& sh);
// The forward (y, and mass when asked); kernel A (dq, dbias, the contribution rows g [T·K, E]
// f32, sink_part); kernel B (dkv from g in counting_sort's order) as two passes
// (sparse_attention_keys.cc): window partials part [T·K, E] f32 and seg_key [T·K] i32 from
// (idx, order, offsets, g), then dkv from (offsets, part, seg_key).
compiler::Kernel build_forward_tc(DType dt, const SparseAttentionShape& sh, bool with_mass);
compiler::Kernel build_grad_token_tc(DType dt, const SparseAttentionShape& sh);
compiler::Kernel build_grad_key_windows_tc(DType dt, const SparseAttentionShape& sh);
compiler::Kernel build_grad_key_sums_tc(DType dt, const SparseAttentionShape& sh);
// With a window (sh.w > 0, a multiple of 64): kernel A gives g for idx's slots only, [T·(K - W),
// E], and the window's coefficients cw [T·G·64, W + 8] (G = ceil(H / 16) head groups; row
// (t·G + g)·64 + 16 part + r holds part (scale·ds head, tail, p head, tail) of head 16 g + r, slot
// j at column 7 - t % 8 + j, zeros around); the band kernel sums the window's pairs per key, band
// [T, E] f32, from (q, dy, cw); the key kernels then walk idx's slots and key_sums starts each key
// below T from its band row.
// cw's shape: [T · band_table_rows_per_token, band_table_width].
int64_t band_table_rows_per_token(const SparseAttentionShape& sh);
int64_t band_table_width(const SparseAttentionShape& sh);
std::string band_name(DType dt, const SparseAttentionShape& sh);
compiler::Kernel build_grad_band_tc(DType dt, const SparseAttentionShape& sh);

}  // namespace tilerun::kernels::sparse_attention_detail
