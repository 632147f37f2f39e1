// Layout algebra properties (layout.h), CuTe's post-conditions as tests over many small layouts.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "compiler/ir/layout.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

Layout random_layout(std::mt19937& g, int max_rank) {
  std::uniform_int_distribution<int> rank(1, max_rank), sh(1, 4), st(0, 8);
  Layout l;
  int r = rank(g);
  for (int i = 0; i < r; ++i) {
    l.shape.push_back(std::vector<int64_t>{1, 2, 4, 3}[sh(g) - 1]);
    l.stride.push_back(st(g));
  }
  return l;
}

TEST(Layout, PrintsOneNotation) {
  EXPECT_EQ(to_string(make_layout({2, 4}, {4, 1})), "(2,4):(4,1)");
  EXPECT_EQ(to_string(make_layout({8}, {1})), "8:1");
  EXPECT_EQ(to_string(ComposedLayout{{3, 4, 3}, compact_row_major({8, 64})}),
            "Sw<3,4,3> o (8,64):(64,1)");
}

TEST(Layout, CoalescePreservesTheFunction) {
  std::mt19937 g(1);
  for (int n = 0; n < 2000; ++n) {
    Layout l = random_layout(g, 4);
    Layout c = coalesce(l);
    ASSERT_EQ(c.size(), l.size());
    for (int64_t i = 0; i < l.size(); ++i) ASSERT_EQ(c(i), l(i)) << to_string(l);
  }
}

TEST(Layout, CompositionIsFunctionComposition) {
  std::mt19937 g(2);
  int admissible = 0;
  for (int n = 0; n < 20000; ++n) {
    Layout a = random_layout(g, 3), b = random_layout(g, 3);
    bool inside = true;  // the post-condition's domain: b's image within a's
    for (int64_t i = 0; i < b.size(); ++i) inside = inside && b(i) < a.size();
    std::set<int64_t> img;  // and b injective: overlapping modes carry across a's modes
    for (int64_t i = 0; i < b.size(); ++i) img.insert(b(i));
    if (!inside || static_cast<int64_t>(img.size()) != b.size()) continue;
    Layout c;
    try {
      c = composition(a, b);
    } catch (const Error&) {
      continue;  // not admissible (CuTe's divisibility conditions)
    }
    ++admissible;
    ASSERT_EQ(c.size(), b.size()) << to_string(a) << " o " << to_string(b) << " = " << to_string(c);
    for (int64_t i = 0; i < b.size(); ++i)
      ASSERT_EQ(c(i), a(b(i))) << to_string(a) << " o " << to_string(b) << " = " << to_string(c)
                               << " at " << i;
  }
  EXPECT_GT(admissible, 500);
}

TEST(Layout, ComplementFillsTheGaps) {
  std::mt19937 g(3);
  int checked = 0;
  for (int n = 0; n < 5000; ++n) {
    Layout a = random_layout(g, 3);
    std::set<int64_t> img;
    for (int64_t i = 0; i < a.size(); ++i) img.insert(a(i));
    if (static_cast<int64_t>(img.size()) != a.size()) continue;  // injective layouts only
    Layout c;
    try {
      c = complement(a, a.cosize() * 2);
    } catch (const Error&) {
      continue;
    }
    Layout both = concat(a, c);
    std::set<int64_t> all;
    for (int64_t i = 0; i < both.size(); ++i) all.insert(both(i));
    ASSERT_EQ(static_cast<int64_t>(all.size()), both.size())
        << to_string(a) << " complement " << to_string(c);
    ASSERT_GE(both.size(), a.cosize() * 2) << to_string(a);
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

TEST(Layout, SwizzleIsABijection) {
  for (int b = 1; b <= 3; ++b)
    for (int m = 0; m <= 3; ++m)
      for (int s = b; s <= 4; ++s) {
        Swizzle sw{b, m, s};
        ComposedLayout c{sw, compact_row_major({16, 32})};
        std::set<int64_t> img;
        for (int64_t i = 0; i < 512; ++i) img.insert(c(i));
        ASSERT_EQ(img.size(), 512u) << to_string(c);
        ASSERT_EQ(*img.rbegin(), 511) << to_string(c);
      }
}

TEST(Layout, FragmentLayoutCoversTheTileOnce) {
  Layout f = fragment_layout(256, 64);
  EXPECT_EQ(to_string(f), "(64,4):(1,64)");
  std::set<int64_t> img;
  for (int64_t t = 0; t < 64; ++t)
    for (int64_t l = 0; l < 4; ++l) img.insert(f({t, l}));
  EXPECT_EQ(img.size(), 256u);
}

}  // namespace
}  // namespace tilerun::compiler

namespace tilerun::compiler {
namespace {

// The tensor core's 128B/64B/32B swizzles (CUTLASS's Swizzle<B,4,3> on byte addresses, here on
// element offsets) permute each tile's offsets: a bijection of every tile of whole atoms, and
// the identity on the first row of each atom (row 0 keeps its chunks in place).
TEST(Layout, TensorCoreSwizzlesAreBijections) {
  EXPECT_EQ(to_string(tensor_core_swizzle(128, 2)), "Sw<3,3,3>");
  EXPECT_EQ(to_string(tensor_core_swizzle(64, 2)), "Sw<2,3,3>");
  EXPECT_EQ(to_string(tensor_core_swizzle(128, 1)), "Sw<3,4,3>");
  for (int row_bytes : {32, 64, 128})
    for (int elem : {1, 2, 4}) {
      const Swizzle sw = tensor_core_swizzle(row_bytes, elem);
      const int64_t cols = row_bytes / elem;
      for (int64_t rows : {8, 64, 128}) {
        ComposedLayout c{sw, compact_row_major({rows, cols})};
        EXPECT_TRUE(is_bijection(c, rows * cols)) << to_string(c);
      }
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(sw(j), j) << to_string(sw);
    }
  // 128B with 2-byte elements: row r's 16-byte chunk q lands in chunk q ^ (r % 8).
  const Swizzle sw = tensor_core_swizzle(128, 2);
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t q = 0; q < 8; ++q)
      EXPECT_EQ(sw(r * 64 + q * 8 + 5), r * 64 + (q ^ (r % 8)) * 8 + 5);
  // The check itself: half rows whose offsets leave [0, 64) are not a bijection onto it.
  EXPECT_FALSE(is_bijection({sw, make_layout({2, 32}, {64, 1})}, 64));
  EXPECT_FALSE(is_bijection({Swizzle{1, 0, 0}, compact_row_major({2, 2})}, 4));  // x ^ x
}

// wgmma's accumulator: thread t of warp w holds rows 16w + (t%32)/4 (+ 8), columns
// 2 (t % 4) (+ 1, + 8j), registers in the order the instruction writes them.
TEST(Layout, WgmmaAccumulatorLayout) {
  const Layout l = wgmma_accumulator_layout(128, 64, 256);  // two warpgroups, one block each
  EXPECT_TRUE(is_bijection({Swizzle{}, l}, 128 * 64));
  auto at = [&](int64_t t, int64_t v) { return l(t + 256 * v); };
  EXPECT_EQ(at(0, 0), 0);
  EXPECT_EQ(at(0, 1), 1);          // the pair
  EXPECT_EQ(at(0, 2), 8 * 64);     // the lower half: row 8
  EXPECT_EQ(at(0, 4), 8);          // the next 8 columns
  EXPECT_EQ(at(1, 0), 2);          // lane 1: columns 2, 3
  EXPECT_EQ(at(4, 0), 64);         // lane 4: row 1
  EXPECT_EQ(at(32, 0), 16 * 64);   // warp 1: row 16
  EXPECT_EQ(at(128, 0), 64 * 64);  // warpgroup 1: row 64
  EXPECT_EQ(at(31, 31), (7 + 8) * 64 + 6 + 1 + 56);
  const Layout two = wgmma_accumulator_layout(128, 64, 128);  // one warpgroup, two blocks
  EXPECT_TRUE(is_bijection({Swizzle{}, two}, 128 * 64));
  EXPECT_EQ(two(0 + 128 * 32), 64 * 64);  // value 32 starts the second 64-row block
}

}  // namespace
}  // namespace tilerun::compiler
