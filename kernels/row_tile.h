// The block tile of the row-copy kernels (embedding's gather, scatter): C columns by R rows of
// 128 threads, each thread moving kRowTileVectors 16-byte vectors (or elements, when the rows'
// length is not a multiple of a vector).
#pragma once

#include <algorithm>
#include <cstdint>

#include "tilerun/dtype.h"

namespace tilerun::kernels {

constexpr int kRowTileThreads = 128;
constexpr int64_t kRowTileVectors = 4;

// The elements one 16-byte vector holds.
inline int vector_width(DType dtype) { return 16 / (dtype_bits(dtype) / 8); }

// C: the rows' length d rounded up to a power of two, at most a vector (`width` elements) per
// thread across the block.
inline int64_t row_tile_cols(int64_t d, int width) {
  int64_t c = 1;
  while (c < d && c < kRowTileThreads * width) c *= 2;
  return c;
}

// R: the rows that fill the block's vectors at C columns.
inline int64_t row_tile_rows(int64_t cols, int width) {
  return std::max<int64_t>(1, kRowTileThreads * width * kRowTileVectors / cols);
}

}  // namespace tilerun::kernels
