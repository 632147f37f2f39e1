#include "graph/plan.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>

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

// The bytes of buffers whose life is over, by offset: each segment remembers its last occupant,
// whose uses must all come before a new occupant's (the `ordered` rule). Adjacent segments merge
// into one gap; a new buffer takes the front of the smallest gap that holds it (best fit).
class FreeSpace {
 public:
  explicit FreeSpace(const std::function<bool(int, int)>& ordered) : ordered_(ordered) {}

  void release(int64_t begin, int64_t end, int owner) {
    segments_[begin] = {end, owner};
    // Merge with the gap that ends at `begin` and the one that starts at `end`.
    auto it = gap_ending_at_.find(begin);
    int64_t gap_begin = begin, gap_end = end;
    if (it != gap_ending_at_.end()) {
      gap_begin = it->second;
      erase_gap(gap_begin, begin);
    }
    auto next = gaps_by_begin_.find(end);
    if (next != gaps_by_begin_.end()) {
      gap_end = next->second;
      erase_gap(end, gap_end);
    }
    insert_gap(gap_begin, gap_end);
  }

  // The offset of the smallest gap whose first `size` bytes `id` may take, or -1. Looks at a
  // bounded number of gaps so that a pool of gaps nobody may take (their last occupant runs
  // on a branch parallel to everything after it) costs no more than a fixed price per buffer.
  int64_t take(int id, int64_t size) {
    constexpr int kMaxTries = 64;
    int tries = 0;
    for (auto it = by_size_.lower_bound({size, INT64_MIN});
         it != by_size_.end() && tries < kMaxTries; ++it, ++tries) {
      int64_t begin = it->second;
      if (!may_take(id, begin, begin + size)) continue;
      int64_t end = begin + it->first;
      erase_gap(begin, end);
      if (begin + size < end) insert_gap(begin + size, end);
      cut_segments(begin, begin + size);
      return begin;
    }
    return -1;
  }

  // The gap that ends at `top`, when `id` may take all of it: the buffer can start there and
  // grow the arena by less.
  int64_t take_tail(int id, int64_t top) {
    auto it = gap_ending_at_.find(top);
    if (it == gap_ending_at_.end() || !may_take(id, it->second, top)) return -1;
    int64_t begin = it->second;
    erase_gap(begin, top);
    cut_segments(begin, top);
    return begin;
  }

 private:
  struct Segment {
    int64_t end;
    int owner;
  };

  bool may_take(int id, int64_t begin, int64_t end) const {
    if (!ordered_) return true;
    for (auto it = segments_.lower_bound(begin); it != segments_.end() && it->first < end; ++it)
      if (!ordered_(it->second.owner, id)) return false;
    return true;
  }

  // Segments are aligned to the arena alignment and gaps split only at buffer sizes, so a taken
  // range starts and ends on segment boundaries or inside one segment, which is split.
  void cut_segments(int64_t begin, int64_t end) {
    auto it = segments_.lower_bound(begin);
    while (it != segments_.end() && it->first < end) {
      Segment seg = it->second;
      it = segments_.erase(it);
      if (seg.end > end) {
        segments_[end] = seg;
        break;
      }
    }
  }

  void insert_gap(int64_t begin, int64_t end) {
    gaps_by_begin_[begin] = end;
    gap_ending_at_[end] = begin;
    by_size_.insert({end - begin, begin});
  }

  void erase_gap(int64_t begin, int64_t end) {
    gaps_by_begin_.erase(begin);
    gap_ending_at_.erase(end);
    by_size_.erase({end - begin, begin});
  }

  const std::function<bool(int, int)>& ordered_;
  std::map<int64_t, Segment> segments_;            // free bytes by offset, with their last occupant
  std::map<int64_t, int64_t> gaps_by_begin_;       // merged free ranges: begin -> end
  std::map<int64_t, int64_t> gap_ending_at_;       // end -> begin
  std::set<std::pair<int64_t, int64_t>> by_size_;  // (size, begin): smallest first, then lowest
};

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
  // Persistent buffers are live with everything: they pack from offset 0. The others are placed
  // in order of first use; before each, the buffers whose last use lies before its first use
  // give their bytes back, and it takes them if `ordered` allows (O(n log n) overall).
  FreeSpace free_space(ordered);
  using Ending = std::pair<int, int>;  // (last use, buffer)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<>> live;
  int64_t top = 0;
  for (int id : order) {
    const BufferUse& buf = buffers[id];
    TR_CHECK(buf.bytes >= 0 && buf.first <= buf.last, "malformed buffer use");
    int64_t size = align_up(std::max<int64_t>(buf.bytes, 1));
    plan.total_bytes += size;
    int64_t at = -1;
    if (!buf.persistent) {
      while (!live.empty() && live.top().first < buf.first) {
        int done = live.top().second;
        live.pop();
        int64_t begin = plan.offsets[done];
        free_space.release(begin, begin + align_up(std::max<int64_t>(buffers[done].bytes, 1)),
                           done);
      }
      at = free_space.take(id, size);
      if (at < 0) at = free_space.take_tail(id, top);
      live.push({buf.last, id});
    }
    if (at < 0) at = top;
    plan.offsets[id] = at;
    top = std::max(top, at + size);
  }
  plan.arena_bytes = top;
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
