#include "graph/plan.h"

#include <algorithm>
#include <map>

#include "compiler/base/check.h"

namespace tilerun::graph {

namespace {

int64_t align_up(int64_t n) {
  return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

bool live_together(const std::vector<BufferUse>& buffers, int a, int b,
                   const std::function<bool(int, int)>& ordered) {
  const BufferUse &x = buffers[a], &y = buffers[b];
  if (x.persistent || y.persistent) return true;
  if (x.first <= y.last && y.first <= x.last) return true;
  return ordered && !ordered(a, b) && !ordered(b, a);
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferUse>& buffers,
                       const std::function<bool(int, int)>& ordered) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  // Persistent buffers first, then by start of life; ties by larger size, then by index, so the
  // order (and with it every offset) is fixed.
  std::vector<int> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const BufferUse &x = buffers[a], &y = buffers[b];
    if (x.persistent != y.persistent) return x.persistent;
    if (x.first != y.first) return x.first < y.first;
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return a < b;
  });
  std::vector<int> placed;
  for (int id : order) {
    const BufferUse& buf = buffers[id];
    TR_CHECK(buf.bytes >= 0 && buf.first <= buf.last, "malformed buffer use");
    int64_t size = align_up(std::max<int64_t>(buf.bytes, 1));
    plan.total_bytes += size;
    // Occupied ranges of the placed buffers live at the same time, sorted by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int other : placed)
      if (live_together(buffers, id, other, ordered))
        busy.push_back({plan.offsets[other], plan.offsets[other] + align_up(std::max<int64_t>(
                                                                       buffers[other].bytes, 1))});
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap that holds it; otherwise after the last busy range.
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (const auto& [begin, end] : busy) {
      if (begin - cursor >= size && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, end);
    }
    if (best < 0) best = cursor;
    plan.offsets[id] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
    placed.push_back(id);
  }
  return plan;
}

bool plan_conflicts(const std::vector<BufferUse>& buffers, const MemoryPlan& plan, int a, int b,
                    const std::function<bool(int, int)>& ordered) {
  if (a == b || !live_together(buffers, a, b, ordered)) return false;
  int64_t a0 = plan.offsets[a], a1 = a0 + buffers[a].bytes;
  int64_t b0 = plan.offsets[b], b1 = b0 + buffers[b].bytes;
  return a0 < b1 && b0 < a1;
}

}  // namespace tilerun::graph
