#include "graph/autodiff.h"

#include <map>
#include <set>

#include "compiler/base/check.h"

namespace tilerun::graph {

namespace {

TensorKind kind_of(TensorRole role) {
  switch (role) {
    case TensorRole::Input:
      return TensorKind::Input;
    case TensorRole::Weight:
      return TensorKind::Weight;
    case TensorRole::Activation:
      return TensorKind::Activation;
  }
  return TensorKind::Activation;
}

// Whether each tensor depends on an input or weight: only those need gradients.
std::vector<bool> requires_grad(const OpGraph& g) {
  std::vector<bool> req(g.tensors.size(), false);
  for (size_t i = 0; i < g.tensors.size(); ++i)
    req[i] = g.tensors[i].kind == TensorKind::Input || g.tensors[i].kind == TensorKind::Weight;
  for (const GraphOp& op : g.ops) {
    bool any = false;
    for (int in : op.inputs) any = any || req[in];
    for (int out : op.outputs) req[out] = any;
  }
  return req;
}

// Emits one forward op's gradient rule into the graph.
class RuleEmitter {
 public:
  RuleEmitter(OpGraph& g, const GraphOp& fwd, int op_index, std::map<int, int>& grad,
              const std::vector<bool>& req)
      : g_(g), fwd_(fwd), op_index_(op_index), grad_(grad), req_(req) {}

  void emit() {
    const kernels::OpSchema* schema = kernels::op_registry().find(fwd_.type);
    TR_CHECK(schema != nullptr, "forward op without schema: " + fwd_.type);
    std::vector<bool> needs(fwd_.inputs.size());
    bool any = false;
    for (size_t i = 0; i < fwd_.inputs.size(); ++i) any |= needs[i] = req_[fwd_.inputs[i]];
    if (!any) return;
    // Output gradients that nothing produced (an output unused downstream) are zeros.
    for (size_t i = 0; i < fwd_.outputs.size(); ++i) bind("dy" + std::to_string(i), dy(i));
    for (size_t i = 0; i < fwd_.inputs.size(); ++i) bind("x" + std::to_string(i), fwd_.inputs[i]);
    for (size_t i = 0; i < fwd_.outputs.size(); ++i) bind("y" + std::to_string(i), fwd_.outputs[i]);
    if (!schema->gradient)
      throw Error(fwd_.loc, "op '" + fwd_.type + "' has no gradient rule, but its inputs need one");
    std::vector<kernels::TensorType> in_types;
    for (int in : fwd_.inputs) in_types.push_back(g_.tensors[in].type);
    for (const kernels::GradOp& gop : schema->gradient(in_types, fwd_.attrs, needs)) emit_op(gop);
    // Accumulate each produced input gradient into the running gradient of that input.
    // One op may read a tensor in several slots (x*x): each slot's contribution is its own sum,
    // named after the slot so the names stay distinct.
    for (size_t i = 0; i < fwd_.inputs.size(); ++i) {
      auto it = names_.find("dx" + std::to_string(i));
      if (!needs[i] || zeros_.count("dx" + std::to_string(i))) continue;
      TR_CHECK(it != names_.end(),
               fwd_.type + "'s gradient rule did not produce dx" + std::to_string(i));
      accumulate(fwd_.inputs[i], it->second, i);
    }
  }

 private:
  void bind(const std::string& name, int id) { names_[name] = id; }

  // The gradient of forward output i; a zero-filled tensor if nothing downstream used it.
  int dy(size_t i) {
    int y = fwd_.outputs[i];
    auto it = grad_.find(y);
    if (it != grad_.end()) return it->second;
    GraphTensor t{.name = g_.unique_name("grad." + g_.tensors[y].name),
                  .type = g_.tensors[y].type,
                  .kind = TensorKind::Gradient};
    int id = g_.add_tensor(t);
    grad_[y] = id;
    return id;
  }

  void emit_op(const kernels::GradOp& gop) {
    std::vector<int> ins;
    for (const std::string& n : gop.inputs) {
      auto it = names_.find(n);
      TR_CHECK(it != names_.end(), fwd_.type + "'s gradient rule reads unknown value " + n);
      ins.push_back(it->second);
    }
    const std::string prefix = "grad." + std::to_string(op_index_) + "." + fwd_.type + ".";
    // A gradient that is zero wherever it exists (a comparison's, a mask's): it contributes
    // nothing, so no tensor and no kernel.
    if (gop.type == "zeros") {
      TR_CHECK(gop.outputs.size() == 1, "zeros has one output");
      zeros_.insert(gop.outputs[0]);
      return;
    }
    if (gop.type == "alias") {
      TR_CHECK(ins.size() == 1 && gop.outputs.size() == 1, "alias takes one input and one output");
      bind(gop.outputs[0], ins[0]);
      return;
    }
    const kernels::OpSchema* schema = kernels::op_registry().find(gop.type);
    TR_CHECK(schema != nullptr, "gradient rule of " + fwd_.type + " emits unknown op " + gop.type);
    std::vector<kernels::TensorType> in_types;
    for (int in : ins) in_types.push_back(g_.tensors[in].type);
    std::vector<kernels::TensorType> out_types =
        schema->infer(in_types, with_defaults(*schema, gop.attrs));
    TR_CHECK(out_types.size() == gop.outputs.size(), "output count of " + gop.type);
    GraphOp op{.type = gop.type,
               .inputs = ins,
               .attrs = with_defaults(*schema, gop.attrs),
               .layer = fwd_.layer,
               .direction = Direction::Backward,
               .loc = fwd_.loc};
    int op_id = static_cast<int>(g_.ops.size());
    for (size_t i = 0; i < gop.outputs.size(); ++i) {
      GraphTensor t{.name = g_.unique_name(prefix + gop.outputs[i]),
                    .type = out_types[i],
                    .kind = TensorKind::Gradient,
                    .producer = op_id};
      int id = g_.add_tensor(t);
      op.outputs.push_back(id);
      bind(gop.outputs[i], id);
    }
    g_.ops.push_back(std::move(op));
  }

  // grad[x] += contribution, as a new tensor so that the summation order is the fixed reverse
  // op order.
  void accumulate(int x, int contribution, size_t slot) {
    auto it = grad_.find(x);
    if (it == grad_.end()) {
      grad_[x] = contribution;
      return;
    }
    int op_id = static_cast<int>(g_.ops.size());
    GraphTensor t{.name = g_.unique_name("grad." + std::to_string(op_index_) + ".sum" +
                                         std::to_string(slot) + "." + g_.tensors[x].name),
                  .type = g_.tensors[x].type,
                  .kind = TensorKind::Gradient,
                  .producer = op_id};
    int sum = g_.add_tensor(t);
    g_.ops.push_back(GraphOp{.type = "add",
                             .inputs = {it->second, contribution},
                             .outputs = {sum},
                             .layer = fwd_.layer,
                             .direction = Direction::Backward,
                             .loc = fwd_.loc});
    it->second = sum;
  }

  static Attrs with_defaults(const kernels::OpSchema& schema, Attrs attrs) {
    for (const kernels::AttrSpec& spec : schema.attrs)
      if (!attrs.count(spec.name) && spec.default_value) attrs[spec.name] = *spec.default_value;
    return attrs;
  }

  OpGraph& g_;
  const GraphOp& fwd_;
  int op_index_;
  std::map<int, int>& grad_;
  const std::vector<bool>& req_;
  std::map<std::string, int> names_;
  std::set<std::string> zeros_;  // values of "zeros" ops
};

}  // namespace

OpGraph build_forward(const Model& model) {
  OpGraph g;
  std::map<std::string, const TensorDecl*> decls;  // Model::find_tensor is a linear scan
  for (const TensorDecl& t : model.tensors) decls.emplace(t.name, &t);
  for (const TensorDecl& t : model.tensors) {
    if (t.role == TensorRole::Activation) continue;  // added when their producer is
    g.add_tensor({.name = t.name, .type = {t.dtype, t.shape}, .kind = kind_of(t.role)});
  }
  for (size_t l = 0; l < model.layers.size(); ++l) {
    for (const OpDecl& d : model.layers[l].ops) {
      GraphOp op{.type = d.type,
                 .attrs = d.attrs,
                 .layer = static_cast<int>(l),
                 .direction = Direction::Forward,
                 .loc = d.loc};
      for (const std::string& in : d.inputs) {
        int id = g.find(in);
        TR_CHECK(id >= 0, "checked model reads unknown tensor " + in);
        op.inputs.push_back(id);
      }
      int op_id = static_cast<int>(g.ops.size());
      for (const std::string& out : d.outputs) {
        auto decl_it = decls.find(out);
        TR_CHECK(decl_it != decls.end(), "checked model writes undeclared tensor " + out);
        const TensorDecl* decl = decl_it->second;
        op.outputs.push_back(g.add_tensor({.name = out,
                                           .type = {decl->dtype, decl->shape},
                                           .kind = TensorKind::Activation,
                                           .producer = op_id}));
      }
      g.ops.push_back(std::move(op));
    }
  }
  for (const std::string& out : model.outputs) {
    int id = g.find(out);
    TR_CHECK(id >= 0, "checked model has unknown output " + out);
    g.outputs.push_back(id);
  }
  return g;
}

void append_backward(const Model& model, OpGraph& g) {
  if (model.loss.kind != "half_sum_squares")
    throw Error("model '" + model.name + "': unknown loss '" + model.loss.kind +
                "', expected half_sum_squares");
  std::vector<bool> req = requires_grad(g);
  // L = 0.5 * sum(out^2)  =>  dL/dout = out: the seed is the output itself.
  for (int out : g.outputs)
    if (req[out]) g.grad[out] = out;
  const size_t forward_ops = g.ops.size();
  for (size_t i = forward_ops; i-- > 0;) {
    const GraphOp fwd = g.ops[i];  // a copy: emitting appends to g.ops
    RuleEmitter(g, fwd, static_cast<int>(i), g.grad, req).emit();
  }
  // Inputs and weights that nothing reads keep a zero gradient: a tensor without a producer.
  for (size_t i = 0; i < req.size(); ++i) {
    TensorKind k = g.tensors[i].kind;
    if ((k == TensorKind::Input || k == TensorKind::Weight) && !g.grad.count(static_cast<int>(i))) {
      int id = g.add_tensor({.name = g.unique_name("grad." + g.tensors[i].name),
                             .type = g.tensors[i].type,
                             .kind = TensorKind::Gradient});
      g.grad[static_cast<int>(i)] = id;
    }
  }
}

}  // namespace tilerun::graph
