#include "graph/model/loss_spec.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/model/op_spec.h"

namespace tilerun::graph {

namespace {

const std::vector<std::string> kLossOps = {"cross_entropy", "half_sum_squares", "kl_div", "mse"};
const std::vector<std::string> kTermKeys = {"weight", "name"};
const std::vector<std::string> kOptimizers = {"adamw", "sgd"};

std::string line_col(const SourceLoc& loc) {
  return std::to_string(loc.line) + ":" + std::to_string(loc.col);
}

// A finite number within f32's range (every kernel takes its scalars as f32).
double read_f32_number(const YamlNode& node, const std::string& what) {
  double v = read_float(node, what);
  if (!std::isfinite(v) || std::abs(v) > std::numeric_limits<float>::max())
    throw Error(node.loc,
                what + " is " + describe(node) + "; expected a finite number within f32 range");
  return v;
}

// `prefix` names the term in messages: "loss term 2", "loss term 0 of layer 'attn.1'".
LossTerm read_term(const YamlNode& node, const std::string& prefix,
                   const kernels::OpRegistry& registry, const std::map<std::string, int64_t>& dims,
                   const TensorLookup& tensors) {
  expect_kind(node, YamlNode::Kind::Mapping, prefix);
  const std::vector<std::string> known = loss_ops(registry);
  for (const YamlEntry& e : node.entries)
    if (e.key == "term") {
      std::string type = read_string(e.value, "the op of " + prefix);
      if (std::find(known.begin(), known.end(), type) == known.end())
        throw Error(e.value.loc, "unknown loss " + quote(type) + did_you_mean(type, known) +
                                     " (known losses: " + join(known) + ")");
    }
  OpSpec spec = parse_op_spec(node,
                              OpSpecForm{.prefix = prefix,
                                         .suffix = "",
                                         .type_key = "term",
                                         .extra_keys = kTermKeys,
                                         .has_outputs = false},
                              registry, dims);
  const std::string where = prefix + " (" + spec.schema->name + ")";
  LossTerm term;
  term.name = spec.schema->name;
  term.op.type = spec.schema->name;
  term.op.attrs = spec.attrs;
  term.op.loc = spec.loc;
  for (const YamlEntry& e : node.entries) {
    if (e.key == "weight") term.weight = read_f32_number(e.value, "the weight of " + where);
    if (e.key == "name") term.name = read_identifier(e.value, "the name of " + where);
  }
  std::vector<kernels::TensorType> in_types;
  std::string listing;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    std::string full =
        tensors.resolve(*spec.inputs[i], "input " + std::to_string(i) + " of " + where);
    in_types.push_back(tensors.type_of(full));
    listing += (i ? ", " : "") + spec.schema->inputs[i] + " = " + full + " " +
               kernels::to_string(in_types.back());
    term.op.inputs.push_back(std::move(full));
  }
  try {
    spec.schema->infer(in_types, term.op.attrs);
  } catch (const kernels::ShapeError& e) {
    throw Error(spec.loc, where + ": " + e.what() + " (inputs: " + listing + ")");
  }
  term.op.outputs = {"loss:" + term.name};
  return term;
}

// The terms of a `loss:` sequence (of the model, or of `layer`), names unique among them.
std::vector<LossTerm> read_terms(const YamlNode& node, const std::string& layer,
                                 const kernels::OpRegistry& registry,
                                 const std::map<std::string, int64_t>& dims,
                                 const TensorLookup& tensors) {
  std::vector<LossTerm> terms;
  for (size_t i = 0; i < node.items.size(); ++i) {
    std::string prefix = "loss term " + std::to_string(i);
    if (!layer.empty()) prefix += " of layer '" + layer + "'";
    LossTerm term = read_term(node.items[i], prefix, registry, dims, tensors);
    for (const LossTerm& other : terms)
      if (other.name == term.name)
        throw Error(term.op.loc, "duplicate loss term name '" + term.name + "' (first at " +
                                     line_col(other.op.loc) +
                                     "); expected a unique 'name:' for each term");
    terms.push_back(std::move(term));
  }
  return terms;
}

}  // namespace

std::vector<std::string> loss_ops(const kernels::OpRegistry& registry) {
  std::vector<std::string> out;
  for (const std::string& name : kLossOps)
    if (registry.find(name)) out.push_back(name);
  return out;
}

LossDecl parse_loss(const YamlNode& node, const kernels::OpRegistry& registry,
                    const std::map<std::string, int64_t>& dims, const TensorLookup& tensors) {
  const std::vector<std::string> known = loss_ops(registry);
  if (node.is_scalar()) {
    if (node.text == "half_sum_squares") return {};
    if (std::find(known.begin(), known.end(), node.text) != known.end())
      throw Error(node.loc,
                  "loss " + quote(node.text) +
                      " needs its inputs; expected a list of terms such as [{term: " + node.text +
                      ", in: [...]}] (only half_sum_squares, over every "
                      "output, may be named alone)");
    throw Error(node.loc, "unknown loss " + quote(node.text) + did_you_mean(node.text, known) +
                              " (known losses: " + join(known) + ")");
  }
  expect_kind(node, YamlNode::Kind::Sequence, "'loss' (half_sum_squares or a list of terms)");
  if (node.items.empty()) throw Error(node.loc, "'loss' is empty; expected at least one term");
  return {read_terms(node, "", registry, dims, tensors)};
}

std::vector<LossTerm> parse_layer_loss(const YamlNode& node, const std::string& layer,
                                       const kernels::OpRegistry& registry,
                                       const std::map<std::string, int64_t>& dims,
                                       const TensorLookup& tensors) {
  expect_kind(node, YamlNode::Kind::Sequence,
              "the 'loss' of layer '" + layer + "' (a list of terms)");
  if (node.items.empty())
    throw Error(node.loc,
                "the 'loss' of layer '" + layer + "' is empty; expected at least one term");
  std::vector<LossTerm> terms = read_terms(node, layer, registry, dims, tensors);
  for (LossTerm& term : terms) term.name = layer + "." + term.name;
  return terms;
}

std::vector<LossTerm> default_loss_terms(const Model& model) {
  // An integer output (argmax's index) or low-precision codes and scales (quantize's) have no
  // square to halve and no gradient: left out.
  std::vector<const TensorDecl*> outputs;
  for (const std::string& out : model.outputs) {
    const TensorDecl* decl = model.find_tensor(out);
    if (decl && dtype_is_differentiable(decl->dtype)) outputs.push_back(decl);
  }
  std::vector<LossTerm> terms;
  for (const TensorDecl* out : outputs) {
    std::string name =
        outputs.size() == 1 ? "half_sum_squares" : "half_sum_squares(" + out->name + ")";
    terms.push_back({.name = name,
                     .op = {.type = "half_sum_squares",
                            .inputs = {out->name},
                            .outputs = {"loss:" + name},
                            .loc = out->loc}});
  }
  return terms;
}

OptimizerDecl parse_optimizer(const YamlNode& node) {
  expect_kind(node, YamlNode::Kind::Mapping, "'optimizer' ({sgd: {lr: ...}} or {adamw: {...}})");
  if (node.entries.size() != 1)
    throw Error(node.loc, "'optimizer' has " + std::to_string(node.entries.size()) +
                              " keys; expected exactly one of " + join(kOptimizers));
  const YamlEntry& e = node.entries[0];
  if (std::find(kOptimizers.begin(), kOptimizers.end(), e.key) == kOptimizers.end())
    throw Error(e.key_loc, "unknown optimizer " + quote(e.key) + did_you_mean(e.key, kOptimizers) +
                               " (known optimizers: " + join(kOptimizers) + ")");
  OptimizerDecl opt;
  opt.loc = e.key_loc;
  const bool adamw = e.key == "adamw";
  opt.kind = adamw ? OptimizerDecl::Kind::AdamW : OptimizerDecl::Kind::Sgd;
  const std::string what = "optimizer '" + e.key + "'";
  MapReader r(e.value, what,
              adamw ? std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay"}
                    : std::vector<std::string>{"lr"});
  // Each hyper-parameter with the range it must lie in.
  auto read = [&](const char* key, double& value, bool (*ok)(double), const char* expected) {
    const YamlNode* n = key == std::string("lr") ? &r.required(key) : r.find(key);
    if (!n) return;
    value = read_f32_number(*n, std::string(key) + " of " + what);
    if (!ok(value))
      throw Error(n->loc, std::string(key) + " of " + what + " is " + describe(*n) + "; expected " +
                              expected);
  };
  read(
      "lr", opt.lr, [](double v) { return v > 0; }, "a positive number");
  if (adamw) {
    auto unit = [](double v) { return v >= 0 && v < 1; };
    read("beta1", opt.beta1, unit, "a number in [0, 1)");
    read("beta2", opt.beta2, unit, "a number in [0, 1)");
    read(
        "eps", opt.eps, [](double v) { return v > 0; }, "a positive number");
    read(
        "weight_decay", opt.weight_decay, [](double v) { return v >= 0; }, "a non-negative number");
  }
  return opt;
}

}  // namespace tilerun::graph
