// The hazard edges are complete: in graph mode the GPU runs any two kernels of a layer's graph at
// once unless a path of dependency edges orders them, so every two nodes that touch overlapping
// arena bytes, one of them writing, must be ordered by such a path. Checked here from first
// principles — the bytes each node's buffers occupy (the memory plan's offsets, views into their
// bases) and whether the kernel writes them (its signature) — on every shipped config, forward,
// backward and optimizer update, independently of how graph/dependencies.cc derives the edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/ir/kernel.h"
#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "graph/optimizer.h"
#include "tilerun/tilerun.h"

namespace tilerun::graph {
namespace {

struct Span {
  int64_t begin = 0, end = 0;
  bool write = false;
  int tensor = -1;
};

int64_t bytes_of(const GraphTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.type.shape) n *= d;
  return dtype_bytes(t.type.dtype, n);
}

// The arena bytes each node touches.
std::vector<std::vector<Span>> spans_of(const KernelGraph& kg) {
  std::vector<std::vector<Span>> spans(kg.nodes.size());
  for (size_t j = 0; j < kg.nodes.size(); ++j) {
    const KernelNode& n = kg.nodes[j];
    const compiler::KernelSignature& sig = kg.kernels[n.kernel]->sig;
    for (size_t b = 0; b < n.buffers.size(); ++b) {
      const int t = n.buffers[b];
      const TensorView& v = kg.views[t];
      const int64_t begin = v.base >= 0 ? kg.plan.offsets[v.base] + v.offset : kg.plan.offsets[t];
      const int64_t size = bytes_of(kg.ops.tensors[t]);
      if (size == 0) continue;
      spans[j].push_back({begin, begin + size, sig.buffers.at(b).is_output, t});
    }
  }
  return spans;
}

// The pairs of nodes of one layer and direction that touch overlapping bytes, one of them
// writing, with no path of edges between them; `first` describes the first such pair.
int unordered_conflicts(const KernelGraph& kg, std::string* first) {
  const size_t n = kg.nodes.size();
  // reach[j][i]: node i is ordered before node j by a path of edges.
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t j = 0; j < n; ++j)
    for (int d : kg.nodes[j].deps) {
      reach[j][d] = true;
      for (size_t i = 0; i < static_cast<size_t>(d); ++i)
        if (reach[d][i]) reach[j][i] = true;
    }
  const std::vector<std::vector<Span>> spans = spans_of(kg);
  auto name = [&](size_t node) { return kg.kernels[kg.nodes[node].kernel]->sig.name; };
  int count = 0;
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < j; ++i) {
      // Kernels of different layers or directions are in different graphs, which the stream
      // runs one after another.
      if (reach[j][i] || kg.nodes[i].layer != kg.nodes[j].layer ||
          kg.nodes[i].direction != kg.nodes[j].direction)
        continue;
      bool conflict = false;
      for (const Span& a : spans[i])
        for (const Span& b : spans[j])
          if (!conflict && (a.write || b.write) && a.begin < b.end && b.begin < a.end) {
            conflict = true;
            if (count == 0 && first)
              *first = "node " + std::to_string(i) + " (" + name(i) +
                       (a.write ? ", writes " : ", reads ") + kg.ops.tensors[a.tensor].name +
                       ") and node " + std::to_string(j) + " (" + name(j) +
                       (b.write ? ", writes " : ", reads ") + kg.ops.tensors[b.tensor].name +
                       ") share bytes with no path of edges between them";
          }
      count += conflict;
    }
  return count;
}

KernelGraph training_graph(const Model& model) {
  OpGraph ops = build_forward(model);
  append_backward(model, ops);
  append_update(model, ops);
  return expand(std::move(ops));
}

TEST(Hazards, EveryConflictingPairOfEveryShippedConfigIsOrdered) {
  int configs = 0;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(TILERUN_SOURCE_DIR "/configs"))
    if (e.path().extension() == ".yaml") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const std::filesystem::path& p : paths) {
    std::string first;
    EXPECT_EQ(unordered_conflicts(training_graph(load_model(p.string())), &first), 0)
        << p.filename().string() << ": " << first;
    ++configs;
  }
  EXPECT_GE(configs, 10);
}

// The check finds what it is for: without its edges, a graph's conflicts are all unordered.
TEST(Hazards, AGraphWithoutItsEdgesHasUnorderedConflicts) {
  KernelGraph kg = training_graph(load_model(TILERUN_SOURCE_DIR "/configs/embedding.yaml"));
  int edges = 0;
  for (KernelNode& n : kg.nodes) {
    edges += static_cast<int>(n.deps.size());
    n.deps.clear();
  }
  std::string first;
  EXPECT_GT(edges, 0);
  EXPECT_GT(unordered_conflicts(kg, &first), 0);
  EXPECT_NE(first.find("share bytes"), std::string::npos) << first;
}

}  // namespace
}  // namespace tilerun::graph
