// `loss:` (terms with weights, integer targets) and `optimizer:` as written in a model file: what
// parses, what the graph computes from it, and the mistakes refused at their FILE:LINE:COL.
#include <gtest/gtest.h>

#include <string>

#include "graph/autodiff.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

// A classifier head: logits [T, V] from x [T, D] and w [D, V]; integer targets [T].
std::string model(const std::string& tail,
                  const std::string& targets = "{shape: [T], dtype: i32}") {
  return "model: m\n"                  // 1
         "dims: {T: 4, D: 8, V: 5}\n"  // 2
         "inputs:\n"                   // 3
         "  x: {shape: [T, D]}\n"      // 4
         "  targets: " +
         targets +
         "\n"                                               // 5
         "layers:\n"                                        // 6
         "  - name: head\n"                                 // 7
         "    weights:\n"                                   // 8
         "      w: {shape: [D, V]}\n"                       // 9
         "    ops:\n"                                       // 10
         "      - {op: matmul, in: [x, w], out: logits}\n"  // 11
         "outputs: [head.logits]\n"                         // 12
         + tail;                                            // 13...
}

void expect_error(const std::string& text, const std::string& prefix, const std::string& phrase) {
  try {
    parse_model(text, "m.yaml");
    ADD_FAILURE() << "parsed without error; expected " << prefix << " ..." << phrase;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.substr(0, prefix.size()), prefix) << what;
    EXPECT_NE(what.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << what;
    EXPECT_EQ(e.exit_code(), 2);
  }
}

TEST(LossSpec, TermsWithWeightsNamesAndAttributes) {
  Model m =
      parse_model(model("loss:\n"
                        "  - {term: cross_entropy, in: [head.logits, targets], ignore_index: -1}\n"
                        "  - {term: half_sum_squares, in: head.logits, weight: 0.25, name: reg}\n"),
                  "m.yaml");
  ASSERT_EQ(m.loss.terms.size(), 2u);
  const LossTerm& ce = m.loss.terms[0];
  EXPECT_EQ(ce.name, "cross_entropy");
  EXPECT_EQ(ce.weight, 1.0);
  EXPECT_EQ(ce.op.type, "cross_entropy");
  EXPECT_EQ(ce.op.inputs, (std::vector<std::string>{"head.logits", "targets"}));
  EXPECT_EQ(std::get<int64_t>(ce.op.attrs.at("ignore_index")), -1);
  EXPECT_EQ(ce.op.loc.line, 14);
  EXPECT_EQ(m.loss.terms[1].name, "reg");
  EXPECT_EQ(m.loss.terms[1].weight, 0.25);
  std::string summary = model_summary(m);
  EXPECT_NE(summary.find("  cross_entropy: cross_entropy(head.logits, targets)"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("  reg: half_sum_squares(head.logits) * 0.25"), std::string::npos)
      << summary;
}

// The graph computes each term's value; a term of weight 1 over half_sum_squares seeds its input
// with itself (no kernel), any other term starts from a loss_seed of its weight; the integer
// targets get no gradient.
TEST(LossSpec, GraphSeedsEachTermAndSkipsIntegerInputs) {
  Model m = parse_model(model("loss:\n"
                              "  - {term: cross_entropy, in: [head.logits, targets], weight: 2}\n"
                              "  - {term: half_sum_squares, in: head.logits}\n"),
                        "m.yaml");
  graph::OpGraph g = graph::build_forward(m);
  ASSERT_EQ(g.loss.size(), 2u);
  EXPECT_EQ(g.tensors[g.loss[0].value].name, "loss:cross_entropy");
  EXPECT_EQ(g.tensors[g.loss[0].value].type, (kernels::TensorType{DType::F32, {}}));
  EXPECT_EQ(g.loss[0].weight, 2.0);
  graph::append_backward(m, g);
  int seeds = 0;
  for (const graph::GraphOp& op : g.ops)
    if (op.type == "loss_seed") {
      ++seeds;
      EXPECT_EQ(std::get<double>(op.attrs.at("weight")), 2.0);
    }
  EXPECT_EQ(seeds, 1);
  EXPECT_FALSE(g.grad.count(g.find("targets")));
  EXPECT_TRUE(g.grad.count(g.find("x")));
  EXPECT_TRUE(g.grad.count(g.find("head.w")));
}

TEST(LossSpec, MseAndKlDivTermsTakeTwoTensorsOfOneType) {
  Model m = parse_model(model("loss:\n"
                              "  - {term: mse, in: [head.logits, head.logits], name: zero}\n"
                              "  - {term: kl_div, in: [head.logits, head.logits], weight: 3}\n"),
                        "m.yaml");
  ASSERT_EQ(m.loss.terms.size(), 2u);
  EXPECT_EQ(m.loss.terms[0].op.type, "mse");
  EXPECT_EQ(m.loss.terms[1].name, "kl_div");
  expect_error(model("loss:\n  - {term: mse, in: [head.logits, x]}\n"), "m.yaml:14:5: error:",
               "loss term 0 (mse): input 'b' is f32[4,8], expected f32[4,5] like 'a'");
}

TEST(LossSpec, DefaultIsHalfSumSquaresOfEveryOutput) {
  Model m = parse_model(model("loss: half_sum_squares\n"), "m.yaml");
  EXPECT_TRUE(m.loss.terms.empty());
  graph::OpGraph g = graph::build_forward(m);
  ASSERT_EQ(g.loss.size(), 1u);
  EXPECT_EQ(g.loss[0].name, "half_sum_squares");
  graph::append_backward(m, g);
  const int logits = g.find("head.logits");
  EXPECT_EQ(g.grad.at(logits), logits);  // dL/dy = y, an alias
}

// A repeated layer's own `loss:` is read in each repetition (its local names, blk.0.logp then
// blk.1.logp) and adds to the model's loss, here the default one.
std::string layer_loss_model(const std::string& term) {
  return "model: m\n"                                         // 1
         "dims: {T: 4, D: 8}\n"                               // 2
         "inputs:\n"                                          // 3
         "  x: {shape: [T, D]}\n"                             // 4
         "layers:\n"                                          // 5
         "  - name: blk\n"                                    // 6
         "    repeat: 2\n"                                    // 7
         "    carry: {x: y}\n"                                // 8
         "    weights:\n"                                     // 9
         "      w: {shape: [D, D]}\n"                         // 10
         "    ops:\n"                                         // 11
         "      - {op: matmul, in: [x, w], out: y}\n"         // 12
         "      - {op: log_softmax, in: y, out: logp}\n"      // 13
         "      - {op: stop_gradient, in: y, out: target}\n"  // 14
         "      - {op: softmax, in: target, out: q}\n"        // 15
         "    loss:\n"                                        // 16
         "      - " +
         term +
         "\n"                   // 17
         "outputs: [blk.y]\n";  // 18
}

TEST(LossSpec, LayerTermsAddToTheDefaultOncePerRepetition) {
  Model m = parse_model(layer_loss_model("{term: kl_div, in: [logp, q], weight: 0.5, name: kl}"),
                        "m.yaml");
  ASSERT_EQ(m.loss.terms.size(), 3u);
  EXPECT_EQ(m.loss.terms[0].name, "half_sum_squares");
  EXPECT_EQ(m.loss.terms[0].op.inputs, std::vector<std::string>{"blk.1.y"});
  for (int rep = 0; rep < 2; ++rep) {
    const LossTerm& kl = m.loss.terms[1 + rep];
    const std::string blk = "blk." + std::to_string(rep);
    EXPECT_EQ(kl.name, blk + ".kl");
    EXPECT_EQ(kl.weight, 0.5);
    EXPECT_EQ(kl.op.inputs, (std::vector<std::string>{blk + ".logp", blk + ".q"}));
    EXPECT_EQ(kl.op.loc.line, 17);
  }
  graph::OpGraph g = graph::build_forward(m);
  ASSERT_EQ(g.loss.size(), 3u);
  EXPECT_EQ(g.loss[2].name, "blk.1.kl");
}

// stop_gradient passes the value and no gradient: a weight read only through it gets none, and
// what is computed from its output alone (a detached training target) gets no backward ops.
TEST(LossSpec, StopGradientLeavesWhatIsBeforeAndAfterItWithoutAGradient) {
  Model m = parse_model(
      "model: m\n"
      "dims: {T: 4, D: 8}\n"
      "inputs:\n"
      "  x: {shape: [T, D]}\n"
      "layers:\n"
      "  - name: head\n"
      "    weights:\n"
      "      w: {shape: [D, D]}\n"
      "      v: {shape: [D]}\n"
      "    ops:\n"
      "      - {op: matmul, in: [x, w], out: y}\n"
      "      - {op: stop_gradient, in: y, out: t}\n"
      "      - {op: scale, in: t, out: u, alpha: 2.0}\n"
      "      - {op: mul, in: [u, v], out: z}\n"
      "      - {op: add, in: [z, y], out: s}\n"
      "outputs: [head.s]\n",
      "m.yaml");
  graph::OpGraph g = graph::build_forward(m);
  graph::append_backward(m, g);
  // A zero gradient is a tensor no op writes (filled with zeros, no kernel).
  auto computed = [&](const char* name) {
    auto it = g.grad.find(g.find(name));
    return it != g.grad.end() && g.tensors[it->second].producer >= 0;
  };
  EXPECT_TRUE(computed("head.v"));
  EXPECT_TRUE(computed("head.z"));
  EXPECT_TRUE(computed("head.w"));  // through s = z + y only
  EXPECT_FALSE(computed("head.u"));
  EXPECT_FALSE(computed("head.t"));
  // scale's rule (a scale of dy) is not emitted: the one scale op is the forward one.
  int scales = 0;
  for (const graph::GraphOp& op : g.ops) scales += op.type == "scale";
  EXPECT_EQ(scales, 1);
}

// sparse_attention's `mass` output carries no gradient (OpSchema::detached_outputs): a model
// whose loss reads only the mass gives q and kv no gradient and runs no backward kernel for the
// attention; with y in the loss as well, the attention's rule runs for y alone.
TEST(LossSpec, ADetachedOutputPassesNoGradient) {
  auto build = [](const char* outputs) {
    Model m =
        parse_model(std::string("model: m\n"
                                "dims: {T: 4, H: 2, E: 8, S: 6, K: 3}\n"
                                "inputs:\n"
                                "  kv: {shape: [S, E]}\n"
                                "  idx: {shape: [T, K], dtype: i32}\n"
                                "  bias: {shape: [T, K]}\n"
                                "  sink: {shape: [H]}\n"
                                "layers:\n"
                                "  - name: a\n"
                                "    weights:\n"
                                "      q: {shape: [T, H, E]}\n"
                                "    ops:\n"
                                "      - {op: sparse_attention, in: [q, kv, idx, bias, sink],\n"
                                "         out: [y, mass], scale: 0.5, mass: true}\n"
                                "outputs: ") +
                        outputs + "\n",
                    "m.yaml");
    graph::OpGraph g = graph::build_forward(m);
    graph::append_backward(m, g);
    return g;
  };
  auto computed = [](const graph::OpGraph& g, const char* name) {
    auto it = g.grad.find(g.find(name));
    return it != g.grad.end() && g.tensors[it->second].producer >= 0;
  };
  auto rules = [](const graph::OpGraph& g) {
    int n = 0;
    for (const graph::GraphOp& op : g.ops) n += op.type == "sparse_attention_grad";
    return n;
  };
  graph::OpGraph only_mass = build("[a.mass]");
  EXPECT_FALSE(computed(only_mass, "a.q"));
  EXPECT_EQ(rules(only_mass), 0);
  graph::OpGraph both = build("[a.y, a.mass]");
  EXPECT_TRUE(computed(both, "a.q"));
  EXPECT_EQ(rules(both), 1);
}

TEST(LossSpecErrors, LayerTermsNameTheirLayerAndPosition) {
  expect_error(layer_loss_model("{term: kl_div, in: [logp, qq]}"), "m.yaml:17:35: error:",
               "unknown tensor 'qq' (input 1 of loss term 0 of layer 'blk.0' (kl_div))");
  expect_error(layer_loss_model("{term: kl_div, in: [logp, w]}"),
               "m.yaml:17:9: error:", "loss term 0 of layer 'blk.0' (kl_div): input 'q'");
}

TEST(LossSpec, Optimizers) {
  Model sgd = parse_model(model("optimizer: {sgd: {lr: 0.5}}\n"), "m.yaml");
  EXPECT_EQ(sgd.optimizer.kind, OptimizerDecl::Kind::Sgd);
  EXPECT_EQ(sgd.optimizer.lr, 0.5);
  Model adamw = parse_model(
      model("optimizer:\n  adamw: {lr: 1.0e-3, beta2: 0.95, weight_decay: 0}\n"), "m.yaml");
  EXPECT_EQ(adamw.optimizer.kind, OptimizerDecl::Kind::AdamW);
  EXPECT_EQ(adamw.optimizer.lr, 1e-3);
  EXPECT_EQ(adamw.optimizer.beta1, 0.9);
  EXPECT_EQ(adamw.optimizer.beta2, 0.95);
  EXPECT_EQ(adamw.optimizer.eps, 1e-8);
  EXPECT_EQ(adamw.optimizer.weight_decay, 0.0);
  EXPECT_NE(model_summary(adamw).find("optimizer: adamw (lr 0.001"), std::string::npos);
}

TEST(LossSpecErrors, UnknownLossOrOptimizer) {
  expect_error(model("loss:\n  - {term: cross_entropyy, in: [head.logits, targets]}\n"),
               "m.yaml:14:12: error:",
               "unknown loss 'cross_entropyy'; did you mean 'cross_entropy'? (known losses: ");
  expect_error(model("loss:\n  - {in: [head.logits, targets]}\n"),
               "m.yaml:14:5: error:", "missing required key 'term' in loss term 0");
  expect_error(model("loss: cross_entropy\n"), "m.yaml:13:7: error:",
               "loss 'cross_entropy' needs its inputs; expected a list of terms");
  expect_error(model("loss: []\n"),
               "m.yaml:13:7: error:", "'loss' is empty; expected at least one term");
  expect_error(model("optimizer: {adam: {lr: 0.1}}\n"), "m.yaml:13:13: error:",
               "unknown optimizer 'adam'; did you mean 'adamw'? (known optimizers: adamw, sgd)");
  expect_error(model("optimizer: {sgd: {lr: 0.1}, adamw: {lr: 0.1}}\n"), "m.yaml:13:12: error:",
               "'optimizer' has 2 keys; expected exactly one of adamw, sgd");
}

TEST(LossSpecErrors, TargetsOfTheWrongDtypeOrShape) {
  expect_error(
      model("loss:\n  - {term: cross_entropy, in: [head.logits, targets]}\n", "{shape: [T]}"),
      "m.yaml:14:5: error:",
      "loss term 0 (cross_entropy): input 'targets' is f32[4], expected i32[4] like "
      "'logits without its last axis' (inputs: logits = head.logits f32[4,5], targets = "
      "targets f32[4])");
  expect_error(model("loss:\n  - {term: cross_entropy, in: [head.logits, targets]}\n",
                     "{shape: [V], dtype: i32}"),
               "m.yaml:14:5: error:", "input 'targets' is i32[5], expected i32[4]");
  expect_error(
      model("loss:\n  - {term: cross_entropy, in: [head.logits]}\n"),
      "m.yaml:14:31: error:", "op 'cross_entropy' takes 2 inputs (logits, targets), found 1");
  expect_error(model("loss:\n  - {term: cross_entropy, in: [head.logit, targets]}\n"),
               "m.yaml:14:32: error:", "unknown tensor 'head.logit' (input 0 of loss term 0");
  expect_error(model("loss:\n  - {term: cross_entropy, in: [head.logits, targets], ignore: 1}\n"),
               "m.yaml:14:55: error:",
               "unknown attribute 'ignore' for op 'cross_entropy'; did you mean 'ignore_index'?");
}

TEST(LossSpecErrors, WeightsNamesAndHyperParameters) {
  expect_error(model("loss:\n  - {term: half_sum_squares, in: head.logits, weight: .nan}\n"),
               "m.yaml:14:55: error:", "expected a finite number within f32 range");
  expect_error(model("loss:\n  - {term: half_sum_squares, in: head.logits}\n"
                     "  - {term: half_sum_squares, in: x}\n"),
               "m.yaml:15:5: error:",
               "duplicate loss term name 'half_sum_squares' (first at 14:5); expected a unique "
               "'name:'");
  expect_error(model("optimizer: {sgd: {lr: 0}}\n"),
               "m.yaml:13:23: error:", "lr of optimizer 'sgd' is '0'; expected a positive number");
  expect_error(model("optimizer: {sgd: {lr: -0.1}}\n"),
               "m.yaml:13:23: error:", "expected a positive number");
  expect_error(model("optimizer: {sgd: {}}\n"), "m.yaml:13:18: error:", "lr");
  expect_error(model("optimizer: {adamw: {lr: 0.1, beta1: 1}}\n"), "m.yaml:13:37: error:",
               "beta1 of optimizer 'adamw' is '1'; expected a number in [0, 1)");
  expect_error(model("optimizer: {adamw: {lr: 0.1, momentum: 0.9}}\n"),
               "m.yaml:13:30: error:", "unknown key 'momentum' in optimizer 'adamw'");
  expect_error(model("optimizer: {sgd: {lr: 0.1, beta1: 0.9}}\n"),
               "m.yaml:13:28: error:", "unknown key 'beta1' in optimizer 'sgd'");
}

}  // namespace
}  // namespace tilerun
