// Expansion at scale and at the limits: a long repeated block plans and orders correctly (the
// plan, hazard edges and graph building were quadratic); float tensors of more than 2^31
// elements expand (64-bit index arithmetic); a dim beyond a kernel's bounds, or an integer
// tensor beyond 2^31 - 1 elements, is an error at the op's YAML position instead of a value that
// wraps; kernels whose writes nothing reads are dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "compiler/ir/kernel.h"
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

TEST(Expand, ADimBeyondTheKernelsBoundsIsAnErrorAtTheOp) {
  Model model = repeated_block(1, "{T: 2147483648, D: 8}");
  OpGraph ops = build_forward(model);
  try {
    expand(std::move(ops));
    FAIL() << "rmsnorm over 2^31 rows expanded";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("chain.yaml:12:9: error: op 'rmsnorm' (forward): kernel 'rmsnorm", 0), 0u)
        << what;
    EXPECT_NE(what.find("= 2147483648 is outside its bounds [1, 2147483647]"), std::string::npos)
        << what;
    EXPECT_EQ(e.exit_code(), 2);
  }
}

// The elements of the flat maps and the gathered table pass 2^31; every kernel and its launch
// checks out (no element cap, no dim beyond a bound). The H200 runs both:
// tests/cuda/large_tensor_gpu_test.cc.
TEST(Expand, FloatTensorsBeyond2To31ElementsExpand) {
  for (const char* text : {"model: big\ndtype: bf16\ndims: {R: 65537, C: 65536}\n"
                           "inputs:\n  x: {shape: [R, C]}\n  w: {shape: [R, C]}\n"
                           "layers:\n  - name: l\n    ops:\n      - {op: mul, in: [x, w], out: y}\n"
                           "outputs: [l.y]\n",
                           "model: table\ndtype: bf16\ndims: {V: 11718750, D: 256, N: 4096}\n"
                           "inputs:\n  ids: {shape: [N], dtype: i32}\n"
                           "layers:\n  - name: l\n    weights:\n      table: {shape: [V, D]}\n"
                           "    ops:\n      - {op: embedding, in: [table, ids], out: y}\n"
                           "outputs: [l.y]\n"}) {
    SCOPED_TRACE(text);
    KernelGraph kg = expand(build_forward(parse_model(text, "big.yaml")));
    int64_t most = 0;
    for (const GraphTensor& t : kg.ops.tensors) {
      int64_t n = 1;
      for (int64_t d : t.type.shape) n *= d;
      most = std::max(most, n);
    }
    EXPECT_GT(most, int64_t{1} << 31);
    EXPECT_FALSE(kg.nodes.empty());
  }
}

TEST(Expand, AnIntegerTensorBeyond2To31ElementsIsAnErrorAtTheOp) {
  Model model = parse_model(
      "model: count\ndims: {T: 65536, K: 32769}\ninputs:\n  ids: {shape: [T, K], dtype: i32}\n"
      "layers:\n  - name: l\n    ops:\n      - {op: bincount, in: ids, out: c, bins: 8}\n"
      "outputs: [l.c]\n",
      "count.yaml");
  try {
    expand(build_forward(model));
    FAIL() << "bincount over 2^31 + 2^16 ids expanded";
  } catch (const Error& e) {
    std::string what = e.what();
    // The first kernel to meet ids is the index check the graph adds before bincount, at
    // bincount's line.
    EXPECT_EQ(what.rfind("count.yaml:8:9: error: op 'check_index' (forward): tensor 'ids'", 0), 0u)
        << what;
    EXPECT_NE(what.find("takes at most 2147483647 elements in an integer tensor"),
              std::string::npos)
        << what;
    EXPECT_EQ(e.exit_code(), 2);
  }
}

// Dead kernels (prune.h): rmsnorm's gradient rule writes dgamma whatever gamma is; with gamma a
// constant (a fill) nothing reads it, so its kernel is dropped, while with gamma a weight it
// stays; either way the step matches the double reference.
TEST(Prune, TheGradientOfAConstantRunsNoKernel) {
  for (bool weight : {false, true}) {
    const std::string gamma =
        weight ? "    weights:\n      g: {shape: [D]}\n    ops:\n"
               : "    ops:\n      - {op: fill, out: g, shape: [D], value: 1.5}\n";
    const Model model = parse_model(
        "model: norm\ndims: {T: 6, D: 16}\ninputs:\n  x: {shape: [T, D]}\nlayers:\n"
        "  - name: l\n" +
            gamma +
            "      - {op: rmsnorm, in: [x, g], out: h}\n"
            "      - {op: silu, in: h, out: y}\n"
            "outputs: [l.y]\n",
        "norm.yaml");
    OpGraph ops = build_forward(model);
    append_backward(model, ops);
    const KernelGraph kg = expand(std::move(ops));
    int dgamma = 0, dx = 0;
    for (const KernelNode& n : kg.nodes) {
      const std::string& name = kg.kernels[n.kernel]->sig.name;
      dgamma += name.find("rmsnorm_grad_dgamma") != std::string::npos;
      dx += name.find("rmsnorm_grad_dx") != std::string::npos;
    }
    EXPECT_EQ(dx, 1) << "weight " << weight;
    EXPECT_EQ(dgamma, weight ? 1 : 0) << "weight " << weight;
    // Every kernel listed is one a node runs.
    std::vector<bool> used(kg.kernels.size(), false);
    for (const KernelNode& n : kg.nodes) used[n.kernel] = true;
    EXPECT_EQ(std::count(used.begin(), used.end(), false), 0);
    Session s(model, {.device = Device::Cpu, .seed = 3});
    s.forward();
    s.backward();
    const CheckResult c = s.check();
    EXPECT_TRUE(c.ok) << c.worst_tensor << " " << c.worst_error;
  }
}

}  // namespace
}  // namespace tilerun::graph
