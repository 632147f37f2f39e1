// The tile kernels of the loss family (kernels/loss.cc). A loss is computed in two or three
// steps: a `*_rows` kernel writes each row's sum (f32) of the [R, D] view in the builder's fixed
// reduction order (one block per row, or for short rows of a constant D, `rows_per_block` rows
// a block); past kLossChunk rows, `loss_chunks` adds each chunk of kLossChunk row sums (one
// block each); a one-block `*_total` kernel adds the row (or chunk) sums (each thread its rows
// t, t + T, ... in order, then the fixed tree) and divides. No atomics; a row's sum depends only
// on that row, and the total's order on R and the constants alone.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/ir/kernel.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

// Row sums this long a chunk before the total, past one chunk.
constexpr int64_t kLossChunk = 4096;

// The `*_rows` kernels' rows per block: 0 (one block a row, R and D dims) for rows of more than
// kShortRow values or fewer than kManyRows rows, else norm_util's rows_per_block. Measured on the
// H200: 524288 rows of 128 f32 630.8 -> 98.0 us, but 1024 rows of 128 bf16 2.8 -> 5.9 us (one
// warp-shuffle reduction a block beats the shared tree's barriers while the rows fit the GPU in
// a few waves).
constexpr int64_t kShortRow = 512, kManyRows = 16384;
int64_t loss_rows_per_block(int64_t rows, int64_t d);
// A `*_rows` kernel's name: `name`, and for rows_per_block > 0 "_rb{rows_per_block}_d{d}".
std::string sum_rows_name(const std::string& name, int64_t rows_per_block, int64_t d);

// part[r] = sum_j x[r, j]^2. Parameters: x, part; R (and D when rows_per_block is 0).
compiler::Kernel build_half_sum_squares_rows(DType dtype, int64_t rows_per_block = 0,
                                             int64_t d = 0);
// out[0] = sum_r part[r] / divisor. Parameters: part (f32), out (f32 [1]); R; divisor.
compiler::Kernel build_loss_total();
// sums[c] = sum of part[c·kLossChunk ..] over the chunk, in reduce_sum's order. Parameters: part,
// sums (f32 [ceil(R / kLossChunk)]); R.
compiler::Kernel build_loss_chunks();
// dx[e] = dloss[0] * x[e]. Parameters: x, dloss (f32 [1]), dx; N.
compiler::Kernel build_half_sum_squares_grad(DType dtype);

// part[r] = 0 where targets[r] == ignore_index, NaN where it is outside [0, V), else
// logsumexp(x[r, :]) - x[r, target]. Parameters: x, targets (i32), part; R, V; ignore_index.
compiler::Kernel build_cross_entropy_rows(DType dtype);
// out[0] = sum_r part[r] / max(count, 1), count = rows whose target is not ignore_index.
// Parameters: part, targets (i32), out (f32 [1]); R; ignore_index.
compiler::Kernel build_cross_entropy_total();
// count[0] = max(rows whose target is not ignore_index, 1). Parameters: targets, count; R;
// ignore_index.
compiler::Kernel build_cross_entropy_count();
// dx[r, j] = dloss * (softmax(x[r, :])[j] - (j == target)) / count, 0 on ignored rows, NaN on
// rows whose target is out of range. Parameters: x, targets, dloss, count, dx; R, V; ignore_index.
compiler::Kernel build_cross_entropy_grad(DType dtype);

// part[r] = sum_j (a[r, j] - b[r, j])^2. Parameters: a, b, part; R (and D, as above).
compiler::Kernel build_mse_rows(DType dtype, int64_t rows_per_block = 0, int64_t d = 0);
// da = (a - b) * 2 dloss / N, db = -da. Parameters: a, b, dloss, da, db; N; N as f32.
compiler::Kernel build_mse_grad(DType dtype);
// part[r] = sum_j (q > 0 ? q (log q - log_p) : 0). Parameters: log_p, q, part; R (and D, as
// above).
compiler::Kernel build_kl_div_rows(DType dtype, int64_t rows_per_block = 0, int64_t d = 0);
// dlog_p = -q dloss / R, dq = (q > 0 ? log q + 1 - log_p : 0) dloss / R. Parameters: log_p, q,
// dloss, dlog_p, dq; N; R as f32.
compiler::Kernel build_kl_div_grad(DType dtype);

// kl_div with `logits` (log_p = log_softmax(z) of the row) or `normalize` (q = the row / (its sum
// + kKlTiny)), a block a row: the row's max, sum of exponentials and q's sum first (the builder's
// fixed reduction orders), then the row's terms. Parameters: z (or log_p), q, part; R, D.
constexpr float kKlTiny = 1e-30f;
// With `backward`, its gradient, a block a row: dz = (softmax(z)·Σ q - q) f (or dlog_p = -q f),
// dq = (g - Σ g·q) / den with normalize (else g), g = (log q + 1 - log_p) f where q > 0, else 0;
// f = dloss / R. Parameters: z (or log_p), q, dloss, dz, dq; R, D; R as f32.
std::string kl_div_rows_name(bool logits, bool normalize, bool backward);
compiler::Kernel build_kl_div_row_blocks(DType dtype, bool logits, bool normalize, bool backward);

// dloss[0] = weight. Parameters: loss (read for its type only), dloss; weight.
compiler::Kernel build_loss_seed();

}  // namespace tilerun::kernels
