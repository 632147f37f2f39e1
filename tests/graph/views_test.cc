// Views in the graph: a reshape, expand_dims, squeeze, or a contiguous aligned slice/split runs
// no kernel and is its base's bytes at an offset in the plan; the memory plan keeps a base alive
// while a view of it is read and the hazard edges order every pair of kernels touching the same
// bytes (checked over the plan's actual byte ranges); a model whose result depends on that runs
// on the CPU against the double reference; shape mistakes of the view ops are refused at the
// op's YAML position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "compiler/ir/kernel.h"
#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "tests/tools/cli_run.h"
#include "tilerun/tilerun.h"

namespace tilerun::graph {
namespace {

KernelGraph expanded(const std::string& yaml, bool backward = true) {
  Model model = parse_model(yaml, "views.yaml");
  OpGraph ops = build_forward(model);
  if (backward) append_backward(model, ops);
  return expand(std::move(ops));
}

int tensor(const KernelGraph& kg, const std::string& name) {
  int id = kg.ops.find(name);
  EXPECT_GE(id, 0) << name;
  return id;
}

int64_t bytes_of(const GraphTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.type.shape) n *= d;
  return dtype_bytes(t.type.dtype, n);
}

// The forward kernel nodes of ops of `type`.
int nodes_of(const KernelGraph& kg, const std::string& type) {
  int n = 0;
  for (const KernelNode& node : kg.nodes)
    n += node.direction == Direction::Forward && kg.ops.ops[node.op].type == type;
  return n;
}

// Every two kernels touching overlapping arena bytes, one of them writing, are ordered through
// the dependency edges (transitively): what graph mode relies on, views included. A scratch or
// output buffer counts as written, the others as read.
void expect_bytes_ordered(const KernelGraph& kg) {
  const size_t n = kg.nodes.size();
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));  // before[j][i]: i -> j
  for (size_t j = 0; j < n; ++j)
    for (int d : kg.nodes[j].deps) {
      before[j][d] = true;
      for (size_t i = 0; i < n; ++i)
        if (before[d][i]) before[j][i] = true;
    }
  struct Range {
    int64_t begin, end;
    bool write;
  };
  std::vector<std::vector<Range>> ranges(n);
  for (size_t j = 0; j < n; ++j) {
    const KernelNode& node = kg.nodes[j];
    const auto& sig = kg.kernels[node.kernel]->sig;
    for (size_t b = 0; b < node.buffers.size(); ++b) {
      int t = node.buffers[b];
      int64_t begin = kg.plan.offsets[t];
      ranges[j].push_back({begin, begin + bytes_of(kg.ops.tensors[t]), sig.buffers[b].is_output});
    }
  }
  int pairs = 0;
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < j; ++i)
      for (const Range& a : ranges[i])
        for (const Range& b : ranges[j])
          if ((a.write || b.write) && a.begin < b.end && b.begin < a.end) {
            ++pairs;
            ASSERT_TRUE(before[j][i]) << "node " << j << " (" << kg.ops.ops[kg.nodes[j].op].type
                                      << ") is not ordered after node " << i << " ("
                                      << kg.ops.ops[kg.nodes[i].op].type << ")";
          }
  EXPECT_GT(pairs, 0);
}

// h is read through the view v by the last op; b is made after h's last direct reader and has
// h's size, so a plan blind to the view would hand b h's bytes and y would add b to itself.
constexpr const char* kLateReader = R"(
model: late
dims: {T: 8, D: 16}
inputs:
  x: {shape: [T, D]}
layers:
  - name: l
    ops:
      - {op: silu, in: x, out: h}
      - {op: reshape, in: h, out: v, shape: [128]}
      - {op: scale, in: h, out: a, alpha: 2.0}
      - {op: silu, in: a, out: b}
      - {op: reshape, in: b, out: bv, shape: [128]}
      - {op: add, in: [v, bv], out: y}
outputs: [l.y]
)";

TEST(Views, ReshapeRunsNoKernelAndSharesItsBasesBytes) {
  KernelGraph kg = expanded(kLateReader);
  EXPECT_EQ(nodes_of(kg, "reshape"), 0);
  const int h = tensor(kg, "l.h"), v = tensor(kg, "l.v"), b = tensor(kg, "l.b");
  EXPECT_EQ(kg.views[v].base, h);
  EXPECT_EQ(kg.plan.offsets[v], kg.plan.offsets[h]);
  EXPECT_EQ(kg.views[h].base, -1);
  // b is live while v is read, so it may not sit on h's bytes.
  const int64_t h0 = kg.plan.offsets[h], b0 = kg.plan.offsets[b];
  EXPECT_FALSE(h0 < b0 + bytes_of(kg.ops.tensors[b]) && b0 < h0 + bytes_of(kg.ops.tensors[h]));
  expect_bytes_ordered(kg);
}

TEST(Views, BaseKeptAliveForALateViewReaderMatchesTheReference) {
  Model model = parse_model(kLateReader, "late.yaml");
  Session session(model, {.device = Device::Cpu});
  session.forward();
  session.backward();
  CheckResult r = session.check();
  EXPECT_TRUE(r.ok) << r.worst_tensor << " error " << r.worst_error;
  EXPECT_EQ(r.tensors_checked, 3);  // y, the loss value and grad(x)
}

// The view's reader waits for the base's writer (read after write through the view).
TEST(Views, ReaderOfAViewDependsOnTheWriterOfItsBase) {
  KernelGraph kg = expanded(kLateReader, /*backward=*/false);
  int writer = -1, reader = -1;
  for (size_t j = 0; j < kg.nodes.size(); ++j) {
    const std::string& type = kg.ops.ops[kg.nodes[j].op].type;
    if (type == "silu" && writer < 0) writer = static_cast<int>(j);
    if (type == "add") reader = static_cast<int>(j);
  }
  ASSERT_GE(writer, 0);
  ASSERT_GE(reader, 0);
  const std::vector<int>& deps = kg.nodes[reader].deps;
  EXPECT_NE(std::find(deps.begin(), deps.end(), writer), deps.end());
}

constexpr const char* kParts = R"(
model: parts
dims: {T: 8, D: 16}
inputs:
  x: {shape: [T, D]}
layers:
  - name: l
    ops:
      - {op: silu, in: x, out: s}
      - {op: split, in: s, out: [p, q], parts: 2}
      - {op: slice, in: s, out: r, start: 2, stop: 6}
      - {op: expand_dims, in: r, out: r3, axis: 0}
      - {op: squeeze, in: r3, out: r2, axis: 0}
      - {op: slice, in: s, out: c, axis: 1, start: 4, stop: 12}
      - {op: slice, in: s, out: odd, start: 1, stop: 2}
      - {op: concat, in: [p, q, r2], out: y}
      - {op: mul, in: [c, c], out: z}
outputs: [l.y, l.z, l.odd]
)";

TEST(Views, LeadingSlicesAndSplitsAreOffsetsIntoTheirBase) {
  KernelGraph kg = expanded(kParts);
  const int s = tensor(kg, "l.s");
  const int64_t row = 16 * 4;  // bytes of one row of s
  EXPECT_EQ(nodes_of(kg, "split"), 0);
  EXPECT_EQ(nodes_of(kg, "expand_dims"), 0);
  EXPECT_EQ(nodes_of(kg, "squeeze"), 0);
  EXPECT_EQ(kg.plan.offsets[tensor(kg, "l.p")], kg.plan.offsets[s]);
  EXPECT_EQ(kg.plan.offsets[tensor(kg, "l.q")], kg.plan.offsets[s] + 4 * row);
  EXPECT_EQ(kg.plan.offsets[tensor(kg, "l.r2")], kg.plan.offsets[s] + 2 * row);
  EXPECT_EQ(kg.views[tensor(kg, "l.r2")].base, s);  // a view of a view points at the base
  // A slice along the inner axis is strided: a copy kernel; concat is one (all three parts in
  // one launch: whole vectors of 8 a row). A one-row slice at
  // row 1 is 64 bytes in: aligned, a view.
  EXPECT_EQ(kg.views[tensor(kg, "l.c")].base, -1);
  EXPECT_EQ(kg.views[tensor(kg, "l.odd")].base, s);
  EXPECT_EQ(nodes_of(kg, "concat"), 1);
  EXPECT_TRUE(kg.persistent[s]);  // l.odd, a view of it, is an output
  expect_bytes_ordered(kg);
  Session session(parse_model(kParts, "parts.yaml"), {.device = Device::Cpu});
  session.forward();
  session.backward();
  CheckResult r = session.check();
  EXPECT_TRUE(r.ok) << r.worst_tensor << " error " << r.worst_error;
}

// The shipped config that uses every shape op: views cost no kernel, every two kernels on
// shared bytes are ordered, and the step matches the reference.
TEST(Views, ConfigWithEveryShapeOpIsSound) {
  Model model = load_model(TILERUN_SOURCE_DIR "/configs/views.yaml");
  OpGraph ops = build_forward(model);
  append_backward(model, ops);
  KernelGraph kg = expand(std::move(ops));
  for (const char* view : {"reshape", "view", "expand_dims", "squeeze", "split"})
    EXPECT_EQ(nodes_of(kg, view), 0) << view;
  EXPECT_EQ(nodes_of(kg, "slice"), 1);  // the strided one; the leading one is a view
  expect_bytes_ordered(kg);
}

// The run report's kernel counts come from the kernel nodes: a model of nothing but views
// reports zero kernels, and its forward pass still gives the right values.
TEST(Views, ReportCountsViewsAsZeroKernels) {
  TILERUN_REQUIRE_CLI();
  const std::string dir = ::testing::TempDir();
  const std::string model = dir + "/only_views.yaml", report = dir + "/only_views.json";
  std::FILE* f = std::fopen(model.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"(model: only_views
dims: {T: 8, D: 16}
inputs:
  x: {shape: [T, D]}
layers:
  - name: l
    ops:
      - {op: reshape, in: x, out: a, shape: [2, 4, D]}
      - {op: split, in: a, out: [p, q], parts: 2}
      - {op: squeeze, in: q, out: y, axis: 0}
outputs: [l.y]
)",
             f);
  std::fclose(f);
  const std::string cmd = "'" + tilerun::testing::cli_path() + "' " + model +
                          " --device cpu --forward-only --check --report " + report + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("check: ok"), std::string::npos) << out;
  std::ifstream in(report);
  nlohmann::json j = nlohmann::json::parse(in);
  // The only kernels are the default loss's value (0.5·Σy²: its two fixed-order sum kernels).
  EXPECT_EQ(j["kernels_total"], 2) << j.dump();
  int64_t layer_kernels = 0;
  for (const auto& layer : j["layers"]) layer_kernels += layer["kernels"].get<int64_t>();
  EXPECT_EQ(layer_kernels, 2) << j.dump();
  EXPECT_EQ(j["loss"]["terms"].size(), 1u) << j.dump();
}

// A slice whose offset is not 16-byte aligned (kernels assume aligned buffers) is a copy.
TEST(Views, UnalignedSliceIsACopy) {
  KernelGraph kg = expanded(R"(
model: odd
dims: {T: 5, D: 3}
inputs:
  x: {shape: [T, D]}
layers:
  - name: l
    ops:
      - {op: slice, in: x, out: y, start: 1, stop: 4}
outputs: [l.y]
)");
  EXPECT_EQ(kg.views[tensor(kg, "l.y")].base, -1);
  EXPECT_EQ(nodes_of(kg, "slice"), 1);
}

// Shape mistakes are refused at the op's position, naming the operand and what was expected.
void expect_refused(const std::string& op_line, const std::string& phrase) {
  const std::string yaml =
      "model: bad\ndims: {T: 4, D: 6}\ninputs:\n  x: {shape: [T, D]}\n"
      "  w: {shape: [T, 5]}\nlayers:\n  - name: l\n    ops:\n" +
      op_line + "\noutputs: [l.y]\n";
  try {
    parse_model(yaml, "bad.yaml");
    ADD_FAILURE() << "accepted: " << op_line;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("bad.yaml:9:9: error:", 0), 0u) << what;
    EXPECT_NE(what.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << what;
  }
}

TEST(Views, ShapeMistakesAreErrorsAtTheOp) {
  expect_refused("      - {op: reshape, in: x, out: y, shape: [5, 5]}",
                 "input 'x' is f32[4,6] with 24 elements, expected attribute 'shape' [5,5]");
  expect_refused("      - {op: reshape, in: x, out: y, shape: [-1, 5]}", "to hold as many");
  expect_refused("      - {op: squeeze, in: x, out: y, axis: 0}",
                 "expected size 1 along axis 0 to squeeze, found 4");
  expect_refused("      - {op: expand_dims, in: x, out: y, axis: 3}",
                 "attribute 'axis' is 3, expected an axis of input 'x' f32[4,6] in [-3, 3)");
  expect_refused("      - {op: slice, in: x, out: y, axis: 1, stop: 7}",
                 "attribute 'stop' is 7, expected a position in [-6, 6] along axis 1");
  expect_refused("      - {op: slice, in: x, out: y, start: 3, stop: 2}",
                 "select nothing of axis 0");
  expect_refused("      - {op: concat, in: [x, w], out: y}",
                 "input 'x1' is f32[4,5], expected the dtype and every size but axis 0 of 'x0'");
  expect_refused("      - {op: split, in: x, out: [y, z], axis: 1, parts: 4}",
                 "attribute 'parts' is 4, expected a positive divisor of 6");
  expect_refused("      - {op: split, in: x, out: [y, z], sizes: [1, 2]}",
                 "adds up to 3, expected 4");
  expect_refused("      - {op: permute, in: x, out: y, perm: [1, 1]}",
                 "attribute 'perm' [1,1], expected a permutation of the 2 axes of input 'x'");
  expect_refused("      - {op: transpose, in: x, out: y, dim1: 2}",
                 "attribute 'dim1' is 2, expected an axis of input 'x' f32[4,6] in [-2, 2)");
  expect_refused("      - {op: broadcast_to, in: x, out: y, shape: [2, 4, 5]}",
                 "input 'x' is f32[4,6], expected sizes that broadcast to attribute 'shape' "
                 "[2,4,5]");
  expect_refused("      - {op: matmul, in: [x, w], out: y}",
                 "input 'b' is f32[4,5], expected 6 rows to match the inner dim of 'a' f32[4,6]");
  expect_refused("      - {op: einsum, in: [x, w], out: y, equation: \"td,dk->tk\"}",
                 "input 'b' is f32[4,5], expected size 6 for index 'd'");
  expect_refused("      - {op: einsum, in: [x, w], out: y, equation: \"td,sk->ts\"}",
                 "index 'd' appears in 'a' only");
  expect_refused("      - {op: split, in: x, out: [y, z], parts: 4}",
                 "it gives 4 outputs for these attributes, found 2 names in 'out'");
}

}  // namespace
}  // namespace tilerun::graph
