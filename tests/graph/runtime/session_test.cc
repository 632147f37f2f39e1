// The Session end to end on the CPU backend: the tiny model's forward and backward agree with the
// double-precision reference, repeat bit for bit, and depend on the seed.
#include "tilerun/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <random>

#include "compiler/ir/kernel.h"
#include "graph/autodiff.h"
#include "graph/fold_fp4_weights.h"
#include "graph/kernel_graph.h"
#include "tests/graph/runtime/bf16_round_case.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

tilerun::Model tiny() { return load_model(std::string(TILERUN_SOURCE_DIR) + "/configs/tiny.yaml"); }

uint64_t fresh_seed() { return std::random_device{}(); }

TEST(Session, TinyStepMatchesTheReference) {
  Session s(tiny(), {.device = Device::Cpu, .seed = fresh_seed()});
  EXPECT_EQ(s.device_name(), "cpu");
  EXPECT_GT(s.compile_stats().kernels_total, 0);
  EXPECT_LE(s.compile_stats().kernels_distinct, s.compile_stats().kernels_total);
  EXPECT_LE(s.arena_bytes(), s.tensor_bytes());
  s.forward();
  s.backward();
  CheckResult c = s.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " error " << c.worst_error << " > " << c.tolerance;
  // Every output, loss value and every weight's and input's gradient was compared.
  EXPECT_EQ(c.tensors_checked,
            static_cast<int>(s.outputs().size() + s.losses().size() + s.gradients().size()));
  EXPECT_FALSE(s.timings().empty());
}

// An sgd step: w - lr * dw, bit for bit (lr = 1/4 makes lr * dw exact, so one rounding is left),
// and only after backward(); afterwards the old outputs are not checked against the new weights.
// A bf16 store (CallOp::Bf16Bits) rounds an f32 to nearest even on its bits, a NaN to 0x7fc0:
// every exponent with fractions at and around the halfway point, then random bit patterns.
TEST(Session, Bf16StoresRoundToNearestEven) {
  const uint64_t seed = std::random_device{}();
  const std::vector<uint32_t> x = testing::bf16_rounding_patterns(seed, 1 << 16);
  const std::vector<uint16_t> y = testing::bf16_cast_in_session(Device::Cpu, x);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], testing::bf16_rounded(x[i]))
        << "f32 bits " << std::hex << x[i] << " (seed " << std::dec << seed << ")";
}

TEST(Session, SgdUpdateMovesEachWeightAgainstItsGradient) {
  const std::string yaml =
      "model: s\ndims: {T: 4, D: 8}\ninputs:\n  x: {shape: [T, D]}\nlayers:\n  - name: l\n"
      "    weights:\n      w: {shape: [D, D]}\n    ops:\n      - {op: matmul, in: [x, w], out: y}\n"
      "outputs: [l.y]\n";
  Session plain(parse_model(yaml, "s.yaml"), {.device = Device::Cpu});
  plain.forward();
  plain.backward();
  EXPECT_THROW(plain.update(), Error);  // no optimizer

  Session s(parse_model(yaml + "optimizer: {sgd: {lr: 0.25}}\n", "s.yaml"),
            {.device = Device::Cpu, .seed = fresh_seed()});
  s.forward();
  EXPECT_THROW(s.update(), Error);  // no gradients yet
  s.backward();
  const HostTensor w = s.tensor("l.w"), dw = s.gradient("l.w");
  s.update();
  EXPECT_THROW(s.check(), Error);
  const HostTensor w1 = s.tensor("l.w");
  const float* a = reinterpret_cast<const float*>(w.data.data());
  const float* g = reinterpret_cast<const float*>(dw.data.data());
  const float* b = reinterpret_cast<const float*>(w1.data.data());
  int changed = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    EXPECT_EQ(b[i], a[i] - 0.25f * g[i]) << i;
    changed += b[i] != a[i];
  }
  EXPECT_GT(changed, 0);
  s.forward();  // the next step runs on the new weights and checks out
  s.backward();
  EXPECT_TRUE(s.check().ok);
}

// The default loss, 0.5 * sum(y^2), is computed in the graph: its value agrees with the output
// the session returns (summed here in double).
TEST(Session, LossValueIsComputedInTheGraph) {
  Session s(tiny(), {.device = Device::Cpu, .seed = fresh_seed(), .forward_only = true});
  EXPECT_THROW(s.losses(), Error);  // nothing computed yet
  s.forward();
  std::vector<LossValue> losses = s.losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].name, "half_sum_squares");
  EXPECT_EQ(losses[0].weight, 1.0);
  const HostTensor y = s.outputs().at("block.1.y");
  double want = 0;
  const float* v = reinterpret_cast<const float*>(y.data.data());
  for (int64_t i = 0; i < y.numel(); ++i) want += 0.5 * double(v[i]) * double(v[i]);
  EXPECT_NEAR(losses[0].value, want, 1e-5 * want);
}

TEST(Session, RepeatsBitForBitAndDependsOnTheSeed) {
  uint64_t seed = fresh_seed();
  auto step = [&](uint64_t sd) {
    Session s(tiny(), {.device = Device::Cpu, .seed = sd});
    s.forward();
    s.backward();
    TensorMap all = s.outputs();
    for (auto& [name, t] : s.gradients()) all["grad." + name] = t;
    return all;
  };
  TensorMap a = step(seed), b = step(seed), c = step(seed + 1);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    EXPECT_EQ(t.data, b.at(name).data) << name;
    EXPECT_NE(t.data, c.at(name).data) << name;
  }
}

// One step's outputs and gradients, and the session's kernel count, with or without folding.
std::pair<TensorMap, int> step_folded(const Model& model, uint64_t seed, bool fold,
                                      bool fp4_weights = false) {
  Session s(model, {.device = Device::Cpu, .seed = seed, .fold = fold, .fp4_weights = fp4_weights});
  s.forward();
  s.backward();
  TensorMap all = s.outputs();
  for (auto& [name, t] : s.gradients()) all["grad." + name] = t;
  return {all, s.compile_stats().kernels_total};
}

// Folded and not: the same bits everywhere; returns (folded kernels, unfolded kernels).
std::pair<int, int> expect_folding_keeps_the_bits(const Model& model, const std::string& what) {
  const uint64_t seed = fresh_seed();
  const auto [folded, folded_kernels] = step_folded(model, seed, true);
  const auto [plain, plain_kernels] = step_folded(model, seed, false);
  EXPECT_EQ(folded.size(), plain.size()) << what;
  for (const auto& [name, t] : folded)
    if (plain.count(name)) EXPECT_EQ(t.data, plain.at(name).data) << name << " " << what;
  return {folded_kernels, plain_kernels};
}

// A matmul's add folded in (graph/fold_adds.h): a residual add after a projection and a
// gradient's two contributions, bf16 on the tensor cores' epilogue (whole and edge tiles) and f32
// through the add's own kernel: every output and gradient bit for bit as unfolded, fewer kernels.
TEST(Session, FoldedAddsGiveTheSameBits) {
  for (const char* dtype : {"bf16", "f32"}) {
    const std::string yaml =
        std::string("model: s\ndtype: ") + dtype +
        "\ndims: {T: 200, D: 64, F: 136}\ninputs:\n  x: {shape: [T, D]}\nlayers:\n  - name: l\n"
        "    weights:\n      w1: {shape: [D, F]}\n      w2: {shape: [F, D]}\n"
        "      w3: {shape: [D, D]}\n    ops:\n"
        "      - {op: matmul, in: [x, w1], out: h}\n"
        "      - {op: relu, in: h, out: a}\n"
        "      - {op: matmul, in: [a, w2], out: p}\n"
        "      - {op: add, in: [p, x], out: r}\n"      // a residual add
        "      - {op: matmul, in: [r, w3], out: q}\n"  // r read twice: dr accumulates
        "      - {op: mul, in: [q, r], out: y}\n"
        "outputs: [l.y]\n";
    const auto [folded, plain] = expect_folding_keeps_the_bits(parse_model(yaml, "s.yaml"), dtype);
    // f32 (SIMT) would run the add's kernel after the product: not folded, as many kernels.
    if (std::string(dtype) == "bf16")
      EXPECT_LT(folded, plain);
    else
      EXPECT_EQ(folded, plain);
  }
}

// hc_pre_grad takes the streams' other gradient (hc_post's) as its dx kernel's addend: the mHC
// model's gradients bit for bit as unfolded, one kernel fewer a layer.
TEST(Session, FoldedStreamGradientsGiveTheSameBits) {
  const auto [folded, plain] = expect_folding_keeps_the_bits(
      load_model(std::string(TILERUN_SOURCE_DIR) + "/configs/mhc-fused.yaml"), "mhc-fused");
  EXPECT_LT(folded, plain);
}

// hc_pre's mix output (x·fn) read by its backward instead of the GEMM again: the mHC model's
// outputs and gradients bit for bit as without it, two kernels (the GEMM and its split sum) fewer.
TEST(Session, HcPreMixOutputKeepsTheBits) {
  std::ifstream file(std::string(TILERUN_SOURCE_DIR) + "/configs/mhc-fused.yaml");
  std::stringstream text;
  text << file.rdbuf();
  const std::string with_mix = text.str();
  const std::string from = "out: [y, post, comb, mix], iters: 20, mix: true";
  const size_t at = with_mix.find(from);
  ASSERT_NE(at, std::string::npos) << "configs/mhc-fused.yaml's hc_pre line changed";
  std::string without = with_mix;
  without.replace(at, from.size(), "out: [y, post, comb], iters: 20");
  const uint64_t seed = fresh_seed();
  const auto [got, got_kernels] = step_folded(parse_model(with_mix, "mix.yaml"), seed, true);
  const auto [want, want_kernels] = step_folded(parse_model(without, "plain.yaml"), seed, true);
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name).data, t.data) << name;
  }
  EXPECT_LT(got_kernels, want_kernels);
}

// moe_route (one kernel each way) against the router it replaces, composed of softplus, sqrt,
// add, topk, take_along_axis, reduce_sum, div and scale: in f32 the same weights, experts and
// gradients bit for bit (with a sigmoid score, V3's, too; and with the weights in bf16 by `to`
// against a cast after the composed form).
TEST(Session, MoeRouteIsTheComposedRouterBitForBit) {
  for (const std::string variant : {"sqrt_softplus", "sigmoid", "to_bf16"}) {
    const bool sigmoid = variant == "sigmoid", bf16 = variant == "to_bf16";
    const std::string head =
        "model: s\ndtype: f32\ndims: {T: 300, E: 64}\ninputs:\n  logits: {shape: [T, E]}\n"
        "layers:\n  - name: l\n    weights:\n"
        "      e_bias: {shape: [E], init: {normal: {std: 0.3}}}\n    ops:\n";
    const std::string tail = "outputs: [l.w, l.expert]\n";
    const std::string fused =
        head + "      - {op: moe_route, in: [logits, e_bias], out: [w, expert], k: 6, scale: 1.5" +
        (sigmoid ? ", score: sigmoid" : "") + (bf16 ? ", to: bf16" : "") + "}\n" + tail;
    const std::string score = sigmoid ? "      - {op: sigmoid, in: logits, out: scores}\n"
                                      : "      - {op: softplus, in: logits, out: sp}\n"
                                        "      - {op: sqrt, in: sp, out: scores}\n";
    const std::string composed =
        head + score +
        "      - {op: add, in: [scores, e_bias], out: biased}\n"
        "      - {op: topk, in: biased, out: [top, expert], k: 6}\n"
        "      - {op: take_along_axis, in: [scores, expert], out: chosen}\n"
        "      - {op: reduce_sum, in: chosen, out: total, axes: [1], keepdims: true}\n"
        "      - {op: div, in: [chosen, total], out: shares}\n" +
        (bf16 ? "      - {op: scale, in: shares, out: w32, alpha: 1.5}\n"
                "      - {op: cast, in: w32, out: w, to: bf16}\n"
              : "      - {op: scale, in: shares, out: w, alpha: 1.5}\n") +
        tail;
    const uint64_t seed = fresh_seed();
    const auto [got, got_kernels] = step_folded(parse_model(fused, "fused.yaml"), seed, true);
    const auto [want, want_kernels] =
        step_folded(parse_model(composed, "composed.yaml"), seed, true);
    for (const char* name : {"l.w", "l.expert", "grad.logits"}) {
      ASSERT_TRUE(got.count(name) && want.count(name)) << name;
      EXPECT_EQ(got.at(name).dtype, want.at(name).dtype) << name << " (" << variant << ")";
      EXPECT_EQ(got.at(name).data, want.at(name).data) << name << " (" << variant << ")";
    }
    // One kernel each way (and the step's own two) against 18 or more.
    EXPECT_LE(got_kernels + 14, want_kernels) << got_kernels << " against " << want_kernels;
  }
}

// swiglu's weight (a MoE route's, per row) against swiglu then a mul by the [R, 1] column: the
// outputs and the gradients of x and of the weights bit for bit, in f32 and bf16, on vector rows
// (F a multiple of 8) and scalar ones.
TEST(Session, SwigluWeightIsSwigluThenAMulBitForBit) {
  for (const char* dtype : {"bf16", "f32"})
    for (const int64_t f : {512, 13}) {
      const std::string head = std::string("model: s\ndtype: ") + dtype +
                               "\ndims: {R: 70, F2: " + std::to_string(2 * f) +
                               "}\ninputs:\n  x: {shape: [R, F2]}\n  w: {shape: [R, 1]}\n"
                               "layers:\n  - name: l\n    ops:\n";
      const std::string fused =
          head + "      - {op: swiglu, in: [x, w], out: y, limit: 3.0}\noutputs: [l.y]\n";
      const std::string composed = head +
                                   "      - {op: swiglu, in: x, out: a, limit: 3.0}\n"
                                   "      - {op: mul, in: [a, w], out: y}\noutputs: [l.y]\n";
      const uint64_t seed = fresh_seed();
      const auto [got, got_kernels] = step_folded(parse_model(fused, "fused.yaml"), seed, true);
      const auto [want, want_kernels] =
          step_folded(parse_model(composed, "composed.yaml"), seed, true);
      for (const char* name : {"l.y", "grad.x", "grad.w"}) {
        ASSERT_TRUE(got.count(name) && want.count(name)) << name;
        EXPECT_EQ(got.at(name).data, want.at(name).data) << name << " " << dtype << " F " << f;
      }
      EXPECT_LT(got_kernels, want_kernels);
    }
}

// gather_sum (the MoE combine) against gather_rows, reduce_sum over the routes and an add, on a
// real routing (moe_route, counting_sort): the output and the gradients of the routed rows and
// of the addend bit for bit, in f32 and bf16, on vector rows (D a multiple of 8) and scalar ones.
TEST(Session, GatherSumIsGatherReduceAddBitForBit) {
  for (const char* dtype : {"bf16", "f32"})
    for (const int64_t d : {1024, 13}) {
      const std::string head =
          std::string("model: s\ndtype: ") + dtype +
          "\ndims: {T: 50, E: 8, D: " + std::to_string(d) +
          "}\ninputs:\n  x: {shape: [T, D]}\n  logits: {shape: [T, E]}\n  bias: {shape: [E]}\n"
          "  s: {shape: [T, D]}\nlayers:\n  - name: l\n    ops:\n"
          "      - {op: moe_route, in: [logits, bias], out: [w, expert], k: 6}\n"
          "      - {op: counting_sort, in: expert, out: [position, order, row, offsets], bins: E}\n"
          "      - {op: gather_rows, in: [x, row, position], out: xs}\n"
          "      - {op: tanh, in: xs, out: ye}\n";
      const std::string fused =
          head + "      - {op: gather_sum, in: [ye, position, order, s], out: y}\noutputs: [l.y]\n";
      const std::string composed = head +
                                   "      - {op: gather_rows, in: [ye, position, order], out: yt}\n"
                                   "      - {op: reduce_sum, in: yt, out: r, axes: [1]}\n"
                                   "      - {op: add, in: [r, s], out: y}\noutputs: [l.y]\n";
      const uint64_t seed = fresh_seed();
      const auto [got, got_kernels] = step_folded(parse_model(fused, "fused.yaml"), seed, true);
      const auto [want, want_kernels] =
          step_folded(parse_model(composed, "composed.yaml"), seed, true);
      for (const char* name : {"l.y", "grad.x", "grad.s"}) {
        ASSERT_TRUE(got.count(name) && want.count(name)) << name;
        EXPECT_EQ(got.at(name).data, want.at(name).data) << name << " " << dtype << " D " << d;
      }
      EXPECT_LT(got_kernels, want_kernels);
    }
}

// A single-use fake_quant after rmsnorm (FP8 per 128; FP4 with power-of-two scales), after
// rmsnorm_rope (V4's KV path: FP8 per 64 of the copied dims, the rotated ones kept) and after
// swiglu (with and without a route weight) runs in their kernels (graph/fold_quant.h); an rmsnorm
// that quantises already (its quant attributes written by hand) keeps the fake_quant after it:
// every output and gradient bit for bit as unfolded, in bf16 and f32, on tiles whose last one is
// guarded; a fake_quant of a tensor read twice stays.
TEST(Session, FoldedQuantEpiloguesGiveTheSameBits) {
  for (const char* dtype : {"bf16", "f32"}) {
    const std::string yaml =
        std::string("model: s\ndtype: ") + dtype +
        "\ndims: {T: 37, H: 11, D: 256, R: 32}\ninputs:\n  x: {shape: [T, D]}\n"
        "  q: {shape: [T, H, D]}\n  cos: {shape: [T, R]}\n  sin: {shape: [T, R]}\n"
        "  z: {shape: [T, D]}\n  zw: {shape: [T, 1]}\n"
        "layers:\n  - name: l\n    weights:\n      g: {shape: [D], init: ones}\n"
        "      gq: {shape: [D], init: ones}\n    ops:\n"
        "      - {op: rmsnorm, in: [x, g], out: h}\n"
        "      - {op: fake_quant, in: h, out: hq, format: f8e4m3, block: 128}\n"
        "      - {op: rmsnorm, in: [hq, g], out: h2}\n"
        "      - {op: fake_quant, in: h2, out: h2q, format: fp4e2m1, block: 32, scale: ue8m0}\n"
        "      - {op: rmsnorm_rope, in: [q, gq, cos, sin], out: k}\n"
        "      - {op: fake_quant, in: k, out: kq, format: f8e4m3, block: 64, extent: 192}\n"
        "      - {op: rmsnorm, in: [x, g], out: u}\n"  // u is read twice: its fake_quant stays
        "      - {op: fake_quant, in: u, out: uq, format: f8e4m3, block: 128}\n"
        "      - {op: mul, in: [uq, u], out: v}\n"
        // rmsnorm quantising already (written by hand): the fake_quant after it stays
        "      - {op: rmsnorm, in: [x, g], out: e, quant_format: f8e4m3, quant_block: 128}\n"
        "      - {op: fake_quant, in: e, out: eq, format: fp4e2m1, block: 32, scale: ue8m0}\n"
        "      - {op: swiglu, in: z, out: za, limit: 1.5}\n"
        "      - {op: fake_quant, in: za, out: zq, format: f8e4m3, block: 128}\n"
        "      - {op: swiglu, in: [z, zw], out: zb, limit: 1.5}\n"
        "      - {op: fake_quant, in: zb, out: zbq, format: fp4e2m1, block: 32, scale: ue8m0}\n"
        "outputs: [l.h2q, l.kq, l.v, l.zq, l.zbq, l.eq]\n";
    const auto [folded, plain] = expect_folding_keeps_the_bits(parse_model(yaml, "s.yaml"), dtype);
    EXPECT_EQ(folded + 5, plain) << dtype;
  }
}

// MoE experts' weights trained through an MXFP4 fake_quant (V4's): each fake_quant whose only
// readers are grouped_matmuls becomes a quantize to codes and e8m0 scales, and the forward's and
// the backward's dx products grouped_matmul_fp4s of the codes (graph/fold_fp4_weights.h), both
// transposes; every output and gradient bit for bit as unfolded, no kernel more. A fake_quant
// that something else reads too stays.
TEST(Session, FoldedFp4WeightsGiveTheSameBits) {
  const std::string yaml =
      "model: s\ndtype: bf16\ndims: {T: 150, D: 128, F: 64, E: 5}\ninputs:\n"
      "  x: {shape: [T, D]}\nlayers:\n  - name: l\n    weights:\n"
      "      wg: {shape: [D, E]}\n      w1: {shape: [E, F, D], init: {normal: {std: 0.1}}}\n"
      "      w2: {shape: [E, F, D], init: {normal: {std: 0.1}}}\n"
      "      w3: {shape: [E, F, D], init: {normal: {std: 0.1}}}\n    ops:\n"
      "      - {op: matmul, in: [x, wg], out: logits}\n"
      "      - {op: argmax, in: logits, out: ids, keepdims: true}\n"
      "      - {op: counting_sort, in: ids, out: [position, order, row, offsets], bins: E}\n"
      "      - {op: gather_rows, in: [x, row, position], out: xs}\n"
      "      - {op: fake_quant, in: w1, out: w1q, format: fp4e2m1, block: 32, scale: ue8m0}\n"
      "      - {op: grouped_matmul, in: [xs, w1q, offsets], out: h, transpose_b: true}\n"
      "      - {op: silu, in: h, out: a}\n"
      "      - {op: fake_quant, in: w2, out: w2q, format: fp4e2m1, block: 32, scale: ue8m0}\n"
      "      - {op: grouped_matmul, in: [a, w2q, offsets], out: y}\n"
      // read by a grouped_matmul and by a mul: stays
      "      - {op: fake_quant, in: w3, out: w3q, format: fp4e2m1, block: 32, scale: ue8m0}\n"
      "      - {op: grouped_matmul, in: [xs, w3q, offsets], out: z, transpose_b: true}\n"
      "      - {op: mul, in: [w3q, w3], out: v}\n"
      "outputs: [l.y, l.z, l.v]\n";
  const Model model = parse_model(yaml, "s.yaml");
  const uint64_t seed = fresh_seed();
  const auto [folded, folded_kernels] = step_folded(model, seed, true, /*fp4_weights=*/true);
  const auto [plain, plain_kernels] = step_folded(model, seed, true);
  EXPECT_EQ(folded.size(), plain.size());
  for (const auto& [name, t] : folded) EXPECT_EQ(t.data, plain.at(name).data) << name;
  EXPECT_EQ(folded_kernels, plain_kernels);
  graph::OpGraph g = graph::build_forward(model);
  graph::append_backward(model, g);
  EXPECT_EQ(graph::fold_fp4_weights(g), 2);
  int fp4 = 0, quantize = 0, fake_quant = 0;
  for (const graph::GraphOp& op : g.ops) {
    fp4 += op.type == "grouped_matmul_fp4";
    quantize += op.type == "quantize";
    fake_quant += op.type == "fake_quant";
  }
  EXPECT_EQ(fp4, 4);  // two forward products, their two dx
  EXPECT_EQ(quantize, 2);
  EXPECT_EQ(fake_quant, 1);
}

// weighted_relu_sum then an add of a mask (the indexer's score as a user may write it): folded
// into the op's bias, the same bits.
TEST(Session, FoldedScoreMaskGivesTheSameBits) {
  const std::string yaml =
      "model: s\ndtype: bf16\ndims: {T: 9, H: 4, C: 40}\ninputs:\n  x: {shape: [T, H, C]}\n"
      "  w: {shape: [T, H]}\n  m: {shape: [T, C]}\nlayers:\n  - name: l\n    ops:\n"
      "      - {op: weighted_relu_sum, in: [x, w], out: s, alpha: 0.5}\n"
      "      - {op: add, in: [s, m], out: y}\n"
      "outputs: [l.y]\n";
  const auto [folded, plain] = expect_folding_keeps_the_bits(parse_model(yaml, "s.yaml"), "score");
  EXPECT_LT(folded, plain);
}

// A routing argmax whose two logits tie in f32 (1 and 1 + 2^-30 rounded) but not in double: the
// run sends the token to expert 0 (ties to the lowest index), a reference choosing from its own
// logits to expert 1, and the check would measure another row of the table (100 against 0), not
// the run's error. check() gives the choosing ops the run's values, so it passes, and the
// reference still makes the choice itself: a table read through any other row would fail it.
TEST(Session, CheckChoosesFromTheRunsValues) {
  const std::string yaml =
      "model: near_tie\ndtype: f32\ndims: {T: 1, D: 2, E: 2, V: 2}\n"
      "inputs:\n  x: {shape: [T, D]}\n"
      "layers:\n  - name: route\n    weights:\n"
      "      w: {shape: [D, E]}\n      table: {shape: [E, V]}\n"
      "    ops:\n"
      "      - {op: matmul, in: [x, w], out: logits}\n"
      "      - {op: argmax, in: logits, out: expert, axis: -1}\n"
      "      - {op: embedding, in: [table, expert], out: y}\n"
      "outputs: [route.y]\n";
  auto f32 = [](std::vector<int64_t> shape, std::vector<float> v) {
    HostTensor t{.dtype = DType::F32, .shape = std::move(shape), .data = {}};
    t.data.resize(v.size() * 4);
    std::memcpy(t.data.data(), v.data(), t.data.size());
    return t;
  };
  Session s(parse_model(yaml, "near_tie.yaml"), {.device = Device::Cpu});
  s.set_tensor("x", f32({1, 2}, {1.0f, std::ldexp(1.0f, -30)}));
  s.set_tensor("route.w", f32({2, 2}, {1.0f, 1.0f, 0.0f, 1.0f}));
  s.set_tensor("route.table", f32({2, 2}, {0.0f, 0.0f, 100.0f, 100.0f}));
  s.forward();
  // The premise: the run's logits tie, and the token took row 0.
  const HostTensor logits = s.selection_inputs().at("route.logits");
  EXPECT_EQ(std::memcmp(logits.data.data(), logits.data.data() + 4, 4), 0);
  const HostTensor y = s.tensor("route.y");
  float y0 = -1;
  std::memcpy(&y0, y.data.data(), 4);
  EXPECT_EQ(y0, 0.0f);
  const CheckResult c = s.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " " << c.worst_error;
  EXPECT_EQ(c.worst_error, 0.0);
}

TEST(Session, ReplaysTheSameStep) {
  Session s(tiny(), {.device = Device::Cpu, .seed = fresh_seed()});
  s.forward();
  s.backward();
  TensorMap g1 = s.gradients();
  s.forward();
  s.backward();
  TensorMap g2 = s.gradients();
  for (const auto& [name, t] : g1) EXPECT_EQ(t.data, g2.at(name).data) << name;
}

TEST(Session, BindingErrorsAreClear) {
  Session s(tiny(), {.device = Device::Cpu});
  HostTensor wrong{.dtype = DType::F32, .shape = {3}, .data = std::vector<uint8_t>(12)};
  try {
    s.set_tensor("x", wrong);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected f32["), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.set_tensor("no_such_tensor", wrong), Error);
  EXPECT_THROW(s.gradient("x"), Error);  // before backward()
  EXPECT_THROW(s.backward(), Error);     // before forward()
}

}  // namespace
}  // namespace tilerun

// The memory plan of the whole tiny step: no two tensors that are live at the same time share a
// byte, and every persistent tensor is disjoint from every other tensor.
namespace tilerun::graph {
namespace {

TEST(TinyPlan, NoTwoLiveTensorsOverlap) {
  Model model = tiny();
  OpGraph ops = build_forward(model);
  append_backward(model, ops);
  KernelGraph kg = expand(std::move(ops));
  const size_t n = kg.ops.tensors.size();
  std::vector<int> first(n, INT32_MAX), last(n, -1);
  for (size_t i = 0; i < kg.nodes.size(); ++i)
    for (int t : kg.nodes[i].buffers) {
      first[t] = std::min(first[t], static_cast<int>(i));
      last[t] = std::max(last[t], static_cast<int>(i));
    }
  auto bytes = [&](size_t t) {
    int64_t e = 1;
    for (int64_t d : kg.ops.tensors[t].type.shape) e *= d;
    return dtype_bytes(kg.ops.tensors[t].type.dtype, e);
  };
  int live_pairs = 0;
  for (size_t a = 0; a < n; ++a) {
    EXPECT_EQ(kg.plan.offsets[a] % kArenaAlignment, 0);
    EXPECT_LE(kg.plan.offsets[a] + bytes(a), kg.plan.arena_bytes);
    for (size_t b = a + 1; b < n; ++b) {
      bool live = kg.persistent[a] || kg.persistent[b] ||
                  (last[a] >= 0 && last[b] >= 0 && first[a] <= last[b] && first[b] <= last[a]);
      if (!live) continue;
      ++live_pairs;
      bool overlap = kg.plan.offsets[a] < kg.plan.offsets[b] + bytes(b) &&
                     kg.plan.offsets[b] < kg.plan.offsets[a] + bytes(a);
      EXPECT_FALSE(overlap) << kg.ops.tensors[a].name << " and " << kg.ops.tensors[b].name;
    }
  }
  EXPECT_GT(live_pairs, 0);
  EXPECT_LT(kg.plan.arena_bytes, kg.plan.total_bytes);  // the tiny step does reuse memory
}

// Memory reuse never orders two kernels the data leaves free to overlap: every dependency edge
// either joins kernels that touch a common tensor or follows a chain of read-after-write edges.
// Checked on the tiny step, every op family and the 200-kernel DAG of four branches.
TEST(TinyPlan, ReuseAddsNoOrderingBeyondTheData) {
  for (const char* path :
       {"/configs/tiny.yaml", "/configs/ops.yaml", "/configs/bench/dag200.yaml"}) {
    Model model = load_model(std::string(TILERUN_SOURCE_DIR) + path);
    OpGraph ops = build_forward(model);
    append_backward(model, ops);
    KernelGraph kg = expand(std::move(ops));
    const size_t n = kg.nodes.size();
    // RAW ancestors of every node, from the kernels' buffer lists (outputs written, the rest
    // read: a node whose buffers include a tensor an earlier node wrote reads or rewrites it).
    std::vector<std::set<int>> writes(n), touches(n);
    for (size_t i = 0; i < n; ++i) {
      const compiler::KernelSignature& sig = kg.kernels[kg.nodes[i].kernel]->sig;
      for (size_t b = 0; b < kg.nodes[i].buffers.size(); ++b) {
        touches[i].insert(kg.nodes[i].buffers[b]);
        if (sig.buffers[b].is_output) writes[i].insert(kg.nodes[i].buffers[b]);
      }
    }
    std::vector<std::set<int>> anc(n);
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < j; ++i) {
        bool raw = false;
        for (int t : writes[i]) raw = raw || touches[j].count(t);
        if (raw) {
          anc[j].insert(static_cast<int>(i));
          anc[j].insert(anc[i].begin(), anc[i].end());
        }
      }
    int edges = 0;
    for (size_t j = 0; j < n; ++j)
      for (int i : kg.nodes[j].deps) {
        ++edges;
        bool common = false;
        for (int t : touches[i]) common = common || touches[j].count(t);
        EXPECT_TRUE(common || anc[j].count(i))
            << path << ": node " << j << " ordered after node " << i << " by memory reuse alone";
      }
    EXPECT_GT(edges, 0) << path;
  }
}

}  // namespace
}  // namespace tilerun::graph

namespace tilerun {
namespace {

// The gradient of a lone rmsnorm under 0.5 * sum(y^2) is ~0 (y's norm does not depend on x's
// scale): the executor's answer is rounding noise, and the check must judge that noise against
// the step's scale, not against the ~0 reference (it used to report a MISMATCH).
TEST(Session, CheckAcceptsANearZeroGradient) {
  Model m = parse_model(
      "model: lone\ndims: {T: 16, D: 256}\ninputs:\n  x: {shape: [T, D]}\nlayers:\n"
      "  - name: n\n    weights:\n      g: {shape: [D], init: ones}\n    ops:\n"
      "      - {op: rmsnorm, in: [x, g], out: y}\noutputs: [n.y]\n",
      "lone.yaml");
  Session s(m, {.device = Device::Cpu, .seed = fresh_seed()});
  s.forward();
  s.backward();
  CheckResult c = s.check();
  EXPECT_TRUE(c.ok) << c.worst_tensor << " error " << c.worst_error << " > " << c.tolerance;
  EXPECT_EQ(c.tensors_checked, 4);  // y, its loss value, grad x, grad g
}

// A model larger than the machine's memory is refused before compiling or allocating, with
// what it needs and what there is (it used to be std::bad_alloc after compiling).
TEST(Session, ModelLargerThanMemoryIsRefusedUpFront) {
  // 512 weights of 2^30 f32 elements (4 GiB each, each within the 32-bit index): 2 TiB.
  Model m = parse_model(
      "model: huge\ndims: {T: 32768, D: 32768}\ninputs:\n  x: {shape: [T, D]}\nlayers:\n"
      "  - name: b\n    repeat: 512\n    carry: {x: y}\n    weights:\n      w: {shape: [T, D]}\n"
      "    ops:\n      - {op: add, in: [x, w], out: y}\noutputs: [b.y]\n",
      "huge.yaml");
  try {
    Session s(m, {.device = Device::Cpu, .forward_only = true});
    FAIL() << "a 2 TiB model was accepted";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Runtime);
    EXPECT_NE(what.find("model 'huge' needs "), std::string::npos) << what;
    EXPECT_NE(what.find(" TiB, "), std::string::npos) << what;
    EXPECT_NE(what.find(" available (arena "), std::string::npos) << what;
  }
}

TEST(Session, DevicePointersNeedACudaSession) {
  Session s(tiny(), {.device = Device::Cpu});
  int fake = 0;
  try {
    s.set_tensor_from_device("x", &fake);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA session"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilerun
