// graph/plan: a liveness-based static memory plan. Every buffer gets an offset in one arena,
// 256-byte aligned; two buffers share bytes only if their live ranges are disjoint. Offsets are
// a pure function of the input (a fixed order and a fixed best-fit rule), so plans are
// deterministic.
#pragma once

#include <cstdint>
#include <vector>

namespace tilerun::graph {

inline constexpr int64_t kArenaAlignment = 256;

struct BufferUse {
  int64_t bytes = 0;
  int first = 0;            // the first step (e.g. kernel index) that touches it
  int last = 0;             // the last step that touches it (inclusive)
  bool persistent = false;  // live for the whole program (weights, inputs, outputs, gradients)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per buffer
  int64_t arena_bytes = 0;
  int64_t total_bytes = 0;  // sum of the buffers' sizes (aligned), what no reuse would need
};

MemoryPlan plan_memory(const std::vector<BufferUse>& buffers);

// Whether two buffers' byte ranges overlap while both are live (for tests and assertions).
bool plan_conflicts(const std::vector<BufferUse>& buffers, const MemoryPlan& plan, int a, int b);

}  // namespace tilerun::graph
