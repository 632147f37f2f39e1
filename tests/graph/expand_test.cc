// Expansion at scale and at the limits: a long repeated block plans and orders correctly (the
// plan, hazard edges and graph building were quadratic), and a tensor beyond the kernels' 32-bit
// indexing is an error at the op's YAML position instead of a race found in the proofs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "tilerun/tilerun.h"

namespace tilerun::graph {
namespace {

Model repeated_block(int repeat, const std::string& dims = "{T: 4, D: 8}") {
  return parse_model("model: chain\ndims: " + dims +
                         "\ninputs:\n  x: {shape: [T, D]}\nlayers:\n  - name: b\n    repeat: " +
                         std::to_string(repeat) +
                         "\n    carry: {x: y}\n    weights:\n      g: {shape: [D]}\n    ops:\n"
                         "      - {op: rmsnorm, in: [x, g], out: h}\n"
                         "      - {op: scale, in: h, out: s, alpha: 0.5}\n"
                         "      - {op: mul, in: [s, h], out: m}\n"
                         "      - {op: silu, in: m, out: a}\n"
                         "      - {op: add, in: [a, x], out: y}\n"
                         "outputs: [b.y]\n",
                     "chain.yaml");
}

int64_t bytes_of(const GraphTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.type.shape) n *= d;
  return dtype_bytes(t.type.dtype, n);
}

// Every dependency points backwards; no two tensors live at once share bytes, and the later of
// two sharing them waits for the earlier (checked between tensors placed at the same offset,
// where a reuse bug shows first).
void expect_sound(const KernelGraph& kg) {
  std::vector<int> first(kg.ops.tensors.size(), -1), last(kg.ops.tensors.size(), -1);
  for (size_t j = 0; j < kg.nodes.size(); ++j) {
    const KernelNode& n = kg.nodes[j];
    ASSERT_TRUE(std::is_sorted(n.deps.begin(), n.deps.end()));
    for (int d : n.deps) ASSERT_LT(d, static_cast<int>(j));
    for (int t : n.buffers) {
      if (first[t] < 0) first[t] = static_cast<int>(j);
      last[t] = static_cast<int>(j);
    }
  }
  std::map<int64_t, std::vector<int>> at;
  for (size_t t = 0; t < kg.ops.tensors.size(); ++t)
    if (first[t] >= 0 && bytes_of(kg.ops.tensors[t]) > 0) at[kg.plan.offsets[t]].push_back(t);
  for (const auto& [offset, ts] : at)
    for (size_t a = 0; a < ts.size(); ++a)
      for (size_t b = a + 1; b < ts.size(); ++b) {
        int x = ts[a], y = ts[b];
        bool live =
            kg.persistent[x] || kg.persistent[y] || (first[x] <= last[y] && first[y] <= last[x]);
        ASSERT_FALSE(live) << kg.ops.tensors[x].name << " and " << kg.ops.tensors[y].name
                           << " share offset " << offset;
        // The later one's first node waits for the earlier one's last node (or for a later
        // occupant of those bytes, which waited for it).
        int early = first[x] < first[y] ? x : y, late = early == x ? y : x;
        const std::vector<int>& deps = kg.nodes[first[late]].deps;
        ASSERT_TRUE(!deps.empty() && deps.back() >= last[early])
            << kg.ops.tensors[late].name << " reuses " << kg.ops.tensors[early].name;
      }
}

TEST(Expand, LongRepeatedBlockPlansWithReuse) {
  for (bool backward : {false, true}) {
    Model model = repeated_block(3000);
    OpGraph ops = build_forward(model);
    if (backward) append_backward(model, ops);
    KernelGraph kg = expand(std::move(ops));
    ASSERT_GE(kg.nodes.size(), 15000u);
    expect_sound(kg);
    // Forward only, the block's activations die within a repetition: beyond the persistent
    // tensors (inputs, weights, outputs), the arena holds a few repetitions' worth, not 3000.
    int64_t persistent = 0;
    for (size_t t = 0; t < kg.ops.tensors.size(); ++t)
      if (kg.persistent[t])
        persistent += (std::max<int64_t>(bytes_of(kg.ops.tensors[t]), 1) + kArenaAlignment - 1) /
                      kArenaAlignment * kArenaAlignment;
    if (!backward) EXPECT_LT(kg.plan.arena_bytes - persistent, 16 * kArenaAlignment);
    EXPECT_LT(kg.plan.arena_bytes, kg.plan.total_bytes);
  }
}

TEST(Expand, TensorBeyondThe32BitIndexIsAnErrorAtTheOp) {
  Model model = repeated_block(1, "{T: 2147483648, D: 8}");
  OpGraph ops = build_forward(model);
  try {
    expand(std::move(ops));
    FAIL() << "a tensor of 2^34 elements expanded";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("chain.yaml:12:9: error: op 'rmsnorm' (forward): tensor 'x'", 0), 0u)
        << what;
    EXPECT_NE(what.find("indexes with 32-bit integers, limit 2147483647 elements"),
              std::string::npos)
        << what;
    EXPECT_EQ(e.exit_code(), 2);
  }
}

}  // namespace
}  // namespace tilerun::graph
