// hc_pre's Sinkhorn (a thread per matrix entry for n <= 4, shuffles gathering each axis) and
// hc_pre_grad's taped backward (the forward run once, its states stored) against the sinkhorn
// op's kernels (a thread per matrix; the backward recomputes the forward to each step): the same
// arithmetic in the same order, so the same bits. With scale[2] = 0 the comb logits are exactly
// base[2n:] (mix·r·0 + base), so sinkhorn of those logits must give hc_pre's comb, and
// sinkhorn_grad with dy = dcomb hc_pre_grad's da[:, 2n:], bit for bit, for every token (several
// blocks, the last one partial), for n = 1 .. 5 (3 and 5: the one-thread kernels).
#include <cstring>
#include <random>

#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

uint32_t bits(double v) {
  const float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

class SinkhornTape : public ::testing::TestWithParam<int64_t> {};

TEST_P(SinkhornTape, HcPreAndItsGradMatchTheSinkhornOpBitForBit) {
  std::printf("[seed] %llu\n", static_cast<unsigned long long>(testing::test_seed()));
  std::mt19937_64 rng(testing::test_seed() + GetParam());
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  auto random = [&](std::vector<int64_t> shape) {
    RefTensor t{shape, {}};
    for (int64_t i = 0; i < t.numel(); ++i) t.data.push_back(static_cast<float>(u(rng)));
    return t;
  };
  const int64_t tokens = 77, n = GetParam(), d = 8, m = n * n + 2 * n;
  const Attrs attrs = {{"iters", int64_t{20}}, {"eps", 1e-6}};
  RefTensor x = random({tokens, n, d}), fn = random({n * d, m}), base = random({m});
  RefTensor scale{{3}, {0.7, 1.3, 0.0}};
  RefTensor dy = random({tokens, d}), dpost = random({tokens, n}), dcomb = random({tokens, n, n});

  testing::KernelRunner runner;
  RefTensor logits{{tokens, n, n}, {}};
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < n * n; ++e) logits.data.push_back(base.data[2 * n + e]);

  Attrs with_mix = attrs;
  with_mix["mix"] = true;  // the forward's x·fn, which hc_pre_grad reads
  std::vector<testing::Bytes> forward =
      runner.run("hc_pre", {x, fn, scale, base}, with_mix, DType::F32, 1234.5);
  ASSERT_EQ(forward.size(), 4u);
  const RefTensor mix{{tokens, m}, testing::decode(forward[3])};
  const std::vector<double> comb = testing::decode(forward[2]);
  std::vector<testing::Bytes> plain_forward =
      runner.run("sinkhorn", {logits}, attrs, DType::F32, 1234.5);
  ASSERT_EQ(plain_forward.size(), 1u);
  const std::vector<double> q = testing::decode(plain_forward[0]);
  ASSERT_EQ(comb.size(), static_cast<size_t>(tokens * n * n));
  ASSERT_EQ(q.size(), comb.size());
  for (size_t i = 0; i < q.size(); ++i)
    ASSERT_EQ(bits(comb[i]), bits(q[i]))
        << "comb element " << i << ": " << comb[i] << " vs " << q[i];

  std::vector<testing::Bytes> fused = runner.run(
      "hc_pre_grad", {x, fn, scale, base, dy, dpost, dcomb, mix}, attrs, DType::F32, 1234.5);
  ASSERT_EQ(fused.size(), 3u);
  const std::vector<double> dab = testing::decode(fused[2]);  // [T, M + 3]: da, then dscale

  std::vector<testing::Bytes> plain =
      runner.run("sinkhorn_grad", {logits, dcomb}, attrs, DType::F32, 1234.5);
  ASSERT_EQ(plain.size(), 1u);
  const std::vector<double> dx = testing::decode(plain[0]);

  ASSERT_EQ(dab.size(), static_cast<size_t>(tokens * (m + 3)));
  ASSERT_EQ(dx.size(), static_cast<size_t>(tokens * n * n));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < n * n; ++e)
      ASSERT_EQ(bits(dab[t * (m + 3) + 2 * n + e]), bits(dx[t * n * n + e]))
          << "token " << t << ", entry " << e << ": " << dab[t * (m + 3) + 2 * n + e] << " vs "
          << dx[t * n * n + e];
}

INSTANTIATE_TEST_SUITE_P(Streams, SinkhornTape, ::testing::Values(1, 2, 3, 4, 5));

}  // namespace
}  // namespace tilerun::kernels
