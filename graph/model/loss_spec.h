// A model file's `loss:` (a list of weighted terms, or the name of the default), a layer's own
// `loss:` terms, and
// `optimizer:` (sgd or adamw with their hyper-parameters), checked at their YAML positions.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "graph/model/yaml_util.h"
#include "kernels/op_registry.h"

namespace tilerun::graph {

// The ops a loss term may be (those registered).
std::vector<std::string> loss_ops(const kernels::OpRegistry& registry);

// What the loss parser needs from the model parser: a tensor reference (a scalar node) as a full
// tensor name (throwing at the node when there is none), and a tensor's type.
struct TensorLookup {
  std::function<std::string(const YamlNode& ref, const std::string& where)> resolve;
  std::function<kernels::TensorType(const std::string& full_name)> type_of;
};

// `loss: half_sum_squares` (the default: no terms) or a sequence of terms
// `{term: OP, in: [...], weight: W, name: N, ...attributes}`.
LossDecl parse_loss(const YamlNode& node, const kernels::OpRegistry& registry,
                    const std::map<std::string, int64_t>& dims, const TensorLookup& tensors);

// A layer's own `loss:` (a sequence of terms, read in one repetition `layer`, "attn.0", whose
// local names the terms' inputs may use): each term named `layer.name`, added to the model's.
std::vector<LossTerm> parse_layer_loss(const YamlNode& node, const std::string& layer,
                                       const kernels::OpRegistry& registry,
                                       const std::map<std::string, int64_t>& dims,
                                       const TensorLookup& tensors);

// The default loss's terms: half_sum_squares of each float output ("half_sum_squares", or
// "half_sum_squares(OUT)" when there are several).
std::vector<LossTerm> default_loss_terms(const Model& model);

// `optimizer: {sgd: {lr: X}}` or `{adamw: {lr, beta1, beta2, eps, weight_decay}}`.
OptimizerDecl parse_optimizer(const YamlNode& node);

}  // namespace tilerun::graph
