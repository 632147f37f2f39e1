#include "graph/optimizer.h"

#include <algorithm>

#include "compiler/base/check.h"

namespace tilerun::graph {

namespace {

// Optimiser state: a tensor without a producer, so it is zero at the start and outlives every
// step (graph/reuse.cc), written only by the update ops bound to it.
int add_state(OpGraph& g, const std::string& name, kernels::TensorType type) {
  return g.add_tensor(
      {.name = g.unique_name(name), .type = std::move(type), .kind = TensorKind::Gradient});
}

}  // namespace

void append_update(const Model& model, OpGraph& g) {
  const OptimizerDecl& opt = model.optimizer;
  if (opt.kind == OptimizerDecl::Kind::None) return;
  std::map<std::string, int> layer_of;
  for (const TensorDecl& t : model.tensors) layer_of[t.name] = std::max(t.layer, 0);
  const int last_layer = std::max(0, static_cast<int>(model.layers.size()) - 1);
  const bool adamw = opt.kind == OptimizerDecl::Kind::AdamW;
  int bias = -1;
  if (adamw) {
    bias = add_state(g, "adamw.bias", {DType::F32, {2}});
    g.ops.push_back(GraphOp{.type = "adamw_bias",
                            .inputs = {bias},
                            .outputs = {bias},
                            .attrs = {{"beta1", opt.beta1}, {"beta2", opt.beta2}},
                            .layer = last_layer,
                            .direction = Direction::Update,
                            .loc = opt.loc});
  }
  const size_t tensors = g.tensors.size();
  for (size_t i = 0; i < tensors; ++i) {
    const GraphTensor t = g.tensors[i];  // a copy: add_state grows g.tensors
    const int w = static_cast<int>(i);
    if (t.kind != TensorKind::Weight || !dtype_is_differentiable(t.type.dtype) || !g.grad.count(w))
      continue;
    const int dw = g.grad.at(w);
    GraphOp op{.layer = layer_of.count(t.name) ? layer_of.at(t.name) : last_layer,
               .direction = Direction::Update,
               .loc = opt.loc};
    if (!adamw) {
      op.type = "sgd_update";
      op.inputs = {w, dw};
      op.outputs = {w};
      op.attrs = {{"lr", opt.lr}};
    } else {
      const std::string name = t.name;
      const kernels::TensorType state{DType::F32, t.type.shape};
      const int m = add_state(g, "adamw.m." + name, state);
      const int v = add_state(g, "adamw.v." + name, state);
      op.type = "adamw_update";
      op.inputs = {w, dw, m, v, bias};
      op.outputs = {w, m, v};
      op.attrs = {{"lr", opt.lr},
                  {"beta1", opt.beta1},
                  {"beta2", opt.beta2},
                  {"eps", opt.eps},
                  {"weight_decay", opt.weight_decay}};
    }
    g.ops.push_back(std::move(op));
  }
}

}  // namespace tilerun::graph
