// A whole step through the kernel library: a small model using every forward op (both matmul
// transposes, a carried residual so gradients accumulate) goes through graph/autodiff (the
// gradient rules) and graph/expand (the kernel expansions); every kernel node runs through the
// CPU JIT in order, and the outputs and every input and weight gradient are compared with the
// double-precision reference of the same OpGraph.
#include <cmath>

#include "graph/autodiff.h"
#include "graph/kernel_graph.h"
#include "graph/reference.h"
#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

constexpr const char* kModel = R"(
model: step
dtype: f32
dims: {T: 7, D: 33, F: 130, K: 5}
inputs:
  x: {shape: [T, D]}
layers:
  - name: block
    repeat: 2
    carry: {x: y}
    weights:
      g: {shape: [D]}
      w1: {shape: [D, F]}
      w2: {shape: [D, F]}
      s: {shape: [T, F]}
    ops:
      - {op: rmsnorm, in: [x, g], out: h, eps: 1.0e-5}
      - {op: matmul, in: [h, w1], out: a}
      - {op: silu, in: a, out: sa}
      - {op: mul, in: [sa, s], out: gated}
      - {op: softmax, in: gated, out: p}
      - {op: matmul, in: [p, w2], out: m, transpose_b: true}
      - {op: scale, in: m, out: ms, alpha: 0.5}
      - {op: add, in: [x, ms], out: y}
  - name: head
    weights:
      w3: {shape: [T, K]}
    ops:
      - {op: matmul, in: [block.y, w3], out: z, transpose_a: true}
outputs: [block.y, head.z]
)";

// Runs one step of `yaml` through the CPU JIT and compares its outputs and every input and
// weight gradient with the double-precision reference; returns how many tensors it compared.
size_t check_step(const char* yaml) {
  Model model = parse_model(yaml, "step_test.yaml");
  graph::OpGraph ops = graph::build_forward(model);
  graph::append_backward(model, ops);
  graph::KernelGraph kg = graph::expand(ops);

  // Inputs and weights random (rounded to f32), zero gradients zero, everything else poisoned.
  std::mt19937_64 rng(testing::test_seed());
  std::vector<RefTensor> ref_in(ops.tensors.size());
  std::vector<std::vector<float>> buf(kg.ops.tensors.size());
  for (size_t t = 0; t < kg.ops.tensors.size(); ++t) {
    const graph::GraphTensor& gt = kg.ops.tensors[t];
    RefTensor r = testing::random_tensor(rng, gt.type.shape, -1, 1);
    for (double& v : r.data) v = static_cast<float>(v);
    bool bound = gt.kind == graph::TensorKind::Input || gt.kind == graph::TensorKind::Weight;
    if (bound) ref_in[t] = r;
    buf[t].assign(r.data.size(), kg.zero_init[t] ? 0.0f : std::nanf(""));
    if (bound) buf[t].assign(r.data.begin(), r.data.end());
  }

  testing::KernelRunner runner;
  for (const graph::KernelNode& node : kg.nodes) {
    compiler::KernelArgs args{.dims = node.dims, .scalars = node.scalars};
    for (int t : node.buffers) args.buffers.push_back(buf[t].data());
    runner.compiled(kg.kernels[node.kernel]).launch(args);
  }

  std::vector<RefTensor> want = graph::evaluate_reference(ops, ref_in);
  std::vector<std::pair<std::string, int>> checked;
  for (int out : ops.outputs) checked.push_back({ops.tensors[out].name, out});
  for (const auto& [x, dx] : ops.grad)
    if (ops.tensors[x].kind != graph::TensorKind::Activation)
      checked.push_back({"grad of " + ops.tensors[x].name, dx});
  for (const auto& [name, t] : checked) {
    // A bool tensor's kernels wrote a byte an element into its (f32-sized) buffer.
    const bool is_bool = kg.ops.tensors[t].type.dtype == DType::Bool;
    const auto* bytes = reinterpret_cast<const uint8_t*>(buf[t].data());
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < buf[t].size(); ++i) {
      double e = (is_bool ? bytes[i] : buf[t][i]) - want[t].data[i];
      err2 += e * e;
      ref2 += want[t].data[i] * want[t].data[i];
    }
    double rel = std::sqrt(err2 / ref2);
    std::printf("[ step     ] %-24s relative L2 %.2e\n", name.c_str(), rel);
    EXPECT_LE(rel, 1e-5) << name;  // NaN (an unwritten element) fails too
  }
  return checked.size();
}

TEST(StepTest, ForwardAndBackwardMatchReference) {
  EXPECT_EQ(check_step(kModel), 2u + 1u + 4u * 2u + 1u);  // outputs, x, 4 weights x 2, w3
}

// Broadcast operands (a bias row, a per-row gate, a scalar) whose gradients are summed back by
// sum_to, a bool mask from a comparison of tensors that need gradients (no gradient, no kernel),
// where, minimum and div.
constexpr const char* kBroadcastModel = R"(
model: broadcast_step
dtype: f32
dims: {T: 7, D: 33}
inputs:
  x: {shape: [T, D]}
layers:
  - name: b
    weights:
      bias: {shape: [D]}
      gate: {shape: [T, 1]}
      s: {shape: []}
    ops:
      - {op: add, in: [x, bias], out: h}
      - {op: mul, in: [h, gate], out: g}
      - {op: gt, in: [h, g], out: m}
      - {op: where, in: [m, g, bias], out: w}
      - {op: sub, in: [w, s], out: d}
      - {op: minimum, in: [d, h], out: e}
      - {op: exp, in: s, out: es}
      - {op: div, in: [e, es], out: y}
outputs: [b.y, b.m]
)";

TEST(StepTest, BroadcastGradientsMatchReference) {
  EXPECT_EQ(check_step(kBroadcastModel), 2u + 1u + 3u);  // outputs, x, 3 weights
}

}  // namespace
}  // namespace tilerun::kernels
