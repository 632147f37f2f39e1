// The memory plan on random buffer sets: no two live buffers overlap, offsets are aligned and
// deterministic, and reuse makes the arena no larger than the sum of the buffers.
#include "graph/plan.h"

#include <gtest/gtest.h>

#include <random>

namespace tilerun::graph {
namespace {

std::vector<BufferUse> random_buffers(std::mt19937_64& rng, int n, int steps) {
  std::vector<BufferUse> out;
  for (int i = 0; i < n; ++i) {
    int a = static_cast<int>(rng() % steps), b = static_cast<int>(rng() % steps);
    out.push_back({.bytes = static_cast<int64_t>(rng() % 5000),
                   .first = std::min(a, b),
                   .last = std::max(a, b),
                   .persistent = rng() % 5 == 0});
  }
  return out;
}

TEST(MemoryPlan, LiveBuffersNeverOverlap) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferUse> bufs = random_buffers(rng, 1 + trial % 60, 1 + trial % 40);
    MemoryPlan plan = plan_memory(bufs);
    ASSERT_EQ(plan.offsets.size(), bufs.size());
    for (size_t a = 0; a < bufs.size(); ++a) {
      EXPECT_EQ(plan.offsets[a] % kArenaAlignment, 0);
      EXPECT_LE(plan.offsets[a] + bufs[a].bytes, plan.arena_bytes);
      for (size_t b = a + 1; b < bufs.size(); ++b) {
        bool live = bufs[a].persistent || bufs[b].persistent ||
                    (bufs[a].first <= bufs[b].last && bufs[b].first <= bufs[a].last);
        bool overlap = plan.offsets[a] < plan.offsets[b] + bufs[b].bytes &&
                       plan.offsets[b] < plan.offsets[a] + bufs[a].bytes;
        EXPECT_FALSE(live && overlap) << "buffers " << a << " and " << b << " trial " << trial;
        EXPECT_EQ(plan_conflicts(bufs, plan, a, b), live && overlap);
      }
    }
    EXPECT_LE(plan.arena_bytes, plan.total_bytes);
  }
}

// With `ordered` (here: every step of a is an ancestor of b's first step in a random DAG, the
// rule graph/expand uses), no two buffers that may run at the same time share bytes, and a
// buffer takes bytes of an earlier one only when ordered after it.
TEST(MemoryPlan, ReuseOnlyAlongTheOrder) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 100; ++trial) {
    const int steps = 2 + trial % 40;
    std::vector<std::vector<bool>> anc(steps, std::vector<bool>(steps, false));  // anc[j][i]
    for (int j = 1; j < steps; ++j)
      for (int i = 0; i < j; ++i)
        if (rng() % 3 == 0) {
          anc[j][i] = true;
          for (int k = 0; k < i; ++k) anc[j][k] = anc[j][k] || anc[i][k];
        }
    std::vector<BufferUse> bufs = random_buffers(rng, 1 + trial % 80, steps);
    auto ordered = [&](int a, int b) {
      for (int u = bufs[a].first; u <= bufs[a].last; ++u)
        if (!anc[bufs[b].first][u]) return false;
      return true;
    };
    MemoryPlan plan = plan_memory(bufs, ordered);
    for (size_t a = 0; a < bufs.size(); ++a)
      for (size_t b = a + 1; b < bufs.size(); ++b)
        EXPECT_FALSE(plan_conflicts(bufs, plan, a, b, ordered))
            << "buffers " << a << " and " << b << " trial " << trial;
    EXPECT_LE(plan.arena_bytes, plan.total_bytes);
  }
}

TEST(MemoryPlan, DeterministicAndReusing) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<BufferUse> bufs = random_buffers(rng, 50, 30);
  MemoryPlan a = plan_memory(bufs), b = plan_memory(bufs);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.arena_bytes, b.arena_bytes);
  // A chain of short-lived equal buffers reuses two slots.
  std::vector<BufferUse> chain;
  for (int i = 0; i < 10; ++i) chain.push_back({.bytes = 1000, .first = i, .last = i + 1});
  MemoryPlan c = plan_memory(chain);
  EXPECT_EQ(c.arena_bytes, 2 * 1024);
  EXPECT_EQ(c.total_bytes, 10 * 1024);
}

}  // namespace
}  // namespace tilerun::graph
