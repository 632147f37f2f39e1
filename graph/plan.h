// graph/plan: a liveness-based static memory plan. Every buffer gets an offset in one arena,
// 256-byte aligned; two buffers share bytes only if their live ranges are disjoint. Offsets are
// a pure function of the input (a fixed order and a fixed best-fit rule), so plans are
// deterministic.
#pragma once

#include <cstdint>
#include <functional>
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

// `ordered(a, b)`, when given: every use of buffer a comes before every use of buffer b in every
// order the program allows (its data dependencies), not just in the list order of first/last.
// Two non-persistent buffers then share bytes only if ordered one way or the other, so reuse
// never orders two kernels the program leaves free to overlap (a CUDA graph's branches).
// Without it, disjoint [first, last] ranges suffice.
MemoryPlan plan_memory(const std::vector<BufferUse>& buffers,
                       const std::function<bool(int a, int b)>& ordered = nullptr);

// Whether two buffers' byte ranges overlap while both are live (for tests and assertions), with
// `ordered` as in plan_memory.
bool plan_conflicts(const std::vector<BufferUse>& buffers, const MemoryPlan& plan, int a, int b,
                    const std::function<bool(int a, int b)>& ordered = nullptr);

}  // namespace tilerun::graph
