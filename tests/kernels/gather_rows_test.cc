// gather_rows_grad with counting_sort's inverses gives embedding_grad's sums: the MoE's three
// gathers (the tokens into expert-major routes by row, each route's weight by order, the expert
// outputs back by position) on fresh random routings, bit for bit the f32 sums in the inverse's
// order and within rounding of the double reference; with D a multiple of 8 (8 columns a
// thread) and not, and past kMaxSortedIds ids too, where embedding_grad scans every id for every
// table row.
#include <algorithm>
#include <numeric>
#include <random>

#include "tests/kernels/kernel_runner.h"
#include "tilerun/tilerun.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;

testing::KernelRunner& runner() {
  static testing::KernelRunner* r = new testing::KernelRunner;
  return *r;
}

RefTensor ints(std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  RefTensor t{.shape = std::move(shape), .data = {}};
  for (int64_t x : v) t.data.push_back(static_cast<double>(x));
  return t;
}

// A routing of `tokens` tokens to `k` distinct experts of `experts` each, and counting_sort's
// outputs for it: position [T·k] (route -> place in expert-major order, ties in route order),
// order (its inverse), row (place -> token).
struct Routing {
  std::vector<int64_t> position, order, row;
};

Routing route(std::mt19937_64& rng, int64_t tokens, int64_t k, int64_t experts) {
  std::vector<int64_t> expert;
  std::vector<int64_t> all(experts);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    expert.insert(expert.end(), all.begin(), all.begin() + k);
  }
  const int64_t n = tokens * k;
  Routing r{.position = std::vector<int64_t>(n), .order = {}, .row = {}};
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = 0; i < n; ++i)
      if (expert[i] == e) {
        r.position[i] = static_cast<int64_t>(r.order.size());
        r.order.push_back(i);
        r.row.push_back(i / k);
      }
  return r;
}

// gather_rows_grad against its definition summed in f32 in j order (the kernel's arithmetic, so
// bit for bit), and against embedding_grad's double reference (the same sum, any order).
void expect_inverse_sums(const RefTensor& table, const RefTensor& ids, const RefTensor& inverse,
                         RefTensor dy, DType dtype) {
  dy = testing::rounded(dtype, dy);
  std::vector<Bytes> got =
      runner().run("gather_rows_grad", {table, ids, inverse, dy}, {}, dtype, 7.0);
  ASSERT_EQ(got.size(), 1u);
  const int64_t v = table.shape[0], d = table.shape[1], j = inverse.numel() / v;
  std::vector<double> want(v * d);
  for (int64_t row = 0; row < v; ++row)
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0;
      for (int64_t p = 0; p < j; ++p)
        acc += static_cast<float>(dy.data[static_cast<int64_t>(inverse.data[row * j + p]) * d + c]);
      want[row * d + c] = acc;
    }
  EXPECT_EQ(got[0].data, testing::encode(dtype, want).data) << "not the f32 sums in j order";
  const RefTensor ref = testing::schema_of("embedding_grad").reference({table, ids, dy}, {})[0];
  const std::vector<double> g = testing::decode(got[0]);
  double err = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err += (g[i] - ref.data[i]) * (g[i] - ref.data[i]);
    norm += ref.data[i] * ref.data[i];
  }
  EXPECT_LE(std::sqrt(err / norm), dtype == DType::F32 ? 1e-6 : 1e-2);
}

TEST(GatherRows, MoeGathersSumTheirInverseRows) {
  std::mt19937_64 rng(testing::test_seed());
  for (DType dtype : {DType::F32, DType::BF16})
    for (auto [tokens, k, experts, d] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{9, 2, 4, 5},
                                         {37, 6, 16, 33},
                                         {24, 3, 8, 64},       // 8 columns a thread
                                         {40, 6, 16, 1040},    // and a column tile's tail
                                         {3000, 6, 64, 3}}) {  // 18000 ids > kMaxSortedIds
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " T=" + std::to_string(tokens));
      const Routing r = route(rng, tokens, k, experts);
      const int64_t n = tokens * k;
      // The tokens into expert-major order: ids = row, inverse = position [T, k].
      expect_inverse_sums(testing::random_tensor(rng, {tokens, d}), ints({n}, r.row),
                          ints({tokens, k}, r.position), testing::random_tensor(rng, {n, d}),
                          dtype);
      // Each route's weight into expert-major order: ids = order, inverse = position.
      expect_inverse_sums(testing::random_tensor(rng, {n, 1}), ints({n}, r.order),
                          ints({n}, r.position), testing::random_tensor(rng, {n, 1}), dtype);
      // The expert outputs back per token: ids = position [T, k], inverse = order.
      expect_inverse_sums(testing::random_tensor(rng, {n, d}), ints({tokens, k}, r.position),
                          ints({n}, r.order), testing::random_tensor(rng, {tokens, k, d}), dtype);
    }
}

// A wrong inverse (an entry naming another row's token, or outside the ids) is a NaN row, never
// a silently wrong sum; the other rows keep their sums.
TEST(GatherRows, AWrongInverseGivesNaNRows) {
  std::mt19937_64 rng(testing::test_seed());
  const Routing r = route(rng, 20, 2, 5);
  std::vector<int64_t> bad = r.position;
  std::swap(bad[0], bad[2]);  // tokens 0 and 1 trade a route
  bad[7] = 40;                // token 3: past the 40 ids
  // A thread per element (narrow rows), a block per row, and 8 columns a thread.
  for (int64_t d : {4, 40, 64}) {
    const RefTensor table = testing::random_tensor(rng, {20, d}),
                    dy = testing::random_tensor(rng, {40, d});
    std::vector<double> got = testing::decode(
        runner().run("gather_rows_grad", {table, ints({40}, r.row), ints({20, 2}, bad), dy}, {},
                     DType::F32, 7.0)[0]);
    for (int64_t t = 0; t < 20; ++t)
      for (int64_t c = 0; c < d; ++c) {
        const bool wrong = t == 0 || t == 1 || t == 3;
        EXPECT_EQ(std::isnan(got[t * d + c]), wrong) << "token " << t << " D = " << d;
      }
  }
}

}  // namespace
}  // namespace tilerun::kernels
