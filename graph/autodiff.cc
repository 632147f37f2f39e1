#include "graph/autodiff.h"

#include <algorithm>
#include <map>
#include <set>

#include "compiler/base/check.h"
#include "graph/model/loss_spec.h"

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

// A float input or weight: integer inputs (targets, indices) and low-precision codes (FP4
// weights, their E8M0 scales) are never differentiated.
bool differentiable(const GraphTensor& t) {
  return (t.kind == TensorKind::Input || t.kind == TensorKind::Weight) &&
         dtype_is_differentiable(t.type.dtype);
}

// Whether each tensor is a float that depends on a float input or weight: only those carry
// gradients. An integer output (argmax's index, topk's indices) has none: no gradient flows into
// it, nor through it into the op's inputs; the gradient flows through the values it selects.
// A detaching op's outputs (stop_gradient's) are constants to the backward pass: a training target
// computed from the model gets no backward ops at all.
std::vector<bool> requires_grad(const OpGraph& g) {
  std::vector<bool> req(g.tensors.size(), false);
  for (size_t i = 0; i < g.tensors.size(); ++i) req[i] = differentiable(g.tensors[i]);
  for (const GraphOp& op : g.ops) {
    const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
    bool any = false;
    if (!(schema && schema->detaches))
      for (int in : op.inputs) any = any || req[in];
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      const bool detached =
          schema && std::find(schema->detached_outputs.begin(), schema->detached_outputs.end(),
                              static_cast<int>(o)) != schema->detached_outputs.end();
      const int out = op.outputs[o];
      req[out] = any && !detached && dtype_is_differentiable(g.tensors[out].type.dtype);
    }
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
    // An op whose outputs carry no gradient (argmax: only an integer index), or only zero ones
    // (read by nothing that differentiates, or through stop_gradient), passes none back: its
    // inputs' gradients stay zero and no backward kernel runs for it.
    bool flows = false;
    for (int out : fwd_.outputs) {
      auto it = grad_.find(out);
      flows = flows || (req_[out] && it != grad_.end() && !is_zero(it->second));
    }
    if (!any || !flows) return;
    // Output gradients that nothing produced (an output unused downstream) are zeros; an integer
    // output has no gradient to bind (a rule never reads its dy).
    for (size_t i = 0; i < fwd_.outputs.size(); ++i)
      if (req_[fwd_.outputs[i]]) bind("dy" + std::to_string(i), dy(i));
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

  // A gradient tensor no op writes: zero-filled (an input seeding itself is not a Gradient).
  bool is_zero(int id) const {
    return g_.tensors[id].kind == TensorKind::Gradient && g_.tensors[id].producer < 0;
  }

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

// The ops computing each loss term's value, after the model's ops (in its last layer); the
// default is half_sum_squares of each output.
void add_loss_terms(const Model& model, OpGraph& g) {
  const std::vector<LossTerm> terms =
      model.loss.terms.empty() ? default_loss_terms(model) : model.loss.terms;
  const int layer = std::max(0, static_cast<int>(model.layers.size()) - 1);
  for (const LossTerm& term : terms) {
    const kernels::OpSchema* schema = kernels::op_registry().find(term.op.type);
    TR_CHECK(schema != nullptr, "unknown loss op " + term.op.type);
    GraphOp op{.type = term.op.type,
               .attrs = term.op.attrs,
               .layer = layer,
               .direction = Direction::Forward,
               .loc = term.op.loc};
    std::vector<kernels::TensorType> in_types;
    for (const std::string& in : term.op.inputs) {
      int id = g.find(in);
      TR_CHECK(id >= 0, "loss term " + term.name + " reads unknown tensor " + in);
      op.inputs.push_back(id);
      in_types.push_back(g.tensors[id].type);
    }
    for (const kernels::AttrSpec& spec : schema->attrs)
      if (!op.attrs.count(spec.name) && spec.default_value)
        op.attrs[spec.name] = *spec.default_value;
    std::vector<kernels::TensorType> out = schema->infer(in_types, op.attrs);
    TR_CHECK(out.size() == 1, "a loss op has one output");
    const int op_id = static_cast<int>(g.ops.size());
    int value = g.add_tensor({.name = g.unique_name("loss:" + term.name),
                              .type = out[0],
                              .kind = TensorKind::Activation,
                              .producer = op_id});
    op.outputs = {value};
    g.ops.push_back(std::move(op));
    g.loss.push_back({.name = term.name, .weight = term.weight, .op = op_id, .value = value});
  }
}

// grad[x] = contribution, or grad[x] + contribution when x already has one (two loss terms on
// one tensor).
void add_seed(OpGraph& g, int x, int contribution, const GraphOp& at) {
  auto it = g.grad.find(x);
  if (it == g.grad.end()) {
    g.grad[x] = contribution;
    return;
  }
  int sum = g.add_tensor({.name = g.unique_name("grad.seed." + g.tensors[x].name),
                          .type = g.tensors[x].type,
                          .kind = TensorKind::Gradient,
                          .producer = static_cast<int>(g.ops.size())});
  g.ops.push_back(GraphOp{.type = "add",
                          .inputs = {it->second, contribution},
                          .outputs = {sum},
                          .layer = at.layer,
                          .direction = Direction::Backward,
                          .loc = at.loc});
  it->second = sum;
}

// The op that wrote `ids` when it declares their values in [0, b) with b <= bound
// (kernels::IndexOutput), distinct when `distinct` and sorted when `sorted`, else -1.
int range_producer(const OpGraph& g, int ids, int64_t bound, bool distinct, bool sorted) {
  const int p = g.tensors[ids].producer;
  if (p < 0) return -1;
  const GraphOp& op = g.ops[p];
  const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
  if (schema == nullptr || schema->index_outputs.empty()) return -1;
  std::vector<kernels::TensorType> in_types;
  for (int in : op.inputs) in_types.push_back(g.tensors[in].type);
  for (const kernels::IndexOutput& o : schema->index_outputs)
    if (static_cast<size_t>(o.slot) < op.outputs.size() && op.outputs[o.slot] == ids &&
        o.bound(in_types, op.attrs) <= bound && (o.distinct || !distinct) && (o.sorted || !sorted))
      return p;
  return -1;
}

// The status every contract established by construction shares: index_established's [-1, 0],
// written once by a kernel before the first op that needs it.
int established_status(OpGraph& g, const GraphOp& op) {
  for (const GraphIndexCheck& k : g.index_checks)
    if (k.producer >= 0) return k.status;
  const int status = g.add_tensor({.name = g.unique_name("index_established"),
                                   .type = {DType::I32, {2}},
                                   .kind = TensorKind::Activation,
                                   .producer = static_cast<int>(g.ops.size())});
  g.ops.push_back(GraphOp{.type = "index_established",
                          .outputs = {status},
                          .layer = op.layer,
                          .direction = Direction::Forward,
                          .loc = op.loc});
  return status;
}

// Before an op with index contracts: a check_index per index input (one per tensor and bound,
// shared by later ops that index with it; its error names the first), its status appended to
// the op's inputs; for indices whose producer establishes their range by construction, no check
// but index_established's status, so the op's kernels assume the contract the same way.
void add_index_checks(OpGraph& g, GraphOp& op) {
  const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
  TR_CHECK(schema != nullptr, "checked model uses unknown op " + op.type);
  if (schema->index_contracts.empty()) return;
  std::vector<kernels::TensorType> in_types;
  for (int in : op.inputs) in_types.push_back(g.tensors[in].type);
  std::vector<int> statuses;
  const size_t first_new = g.index_checks.size();
  for (const kernels::IndexContract& c : schema->index_contracts) {
    const int ids = op.inputs[c.slot];
    const int64_t bound = c.bound(in_types, op.attrs);
    const int producer = range_producer(g, ids, bound, c.distinct, c.sorted);
    if (c.distinct && producer < 0) {
      const int p = g.tensors[ids].producer;
      throw Error(op.loc, "op '" + op.type + "': input '" + schema->inputs[c.slot] + "' ('" +
                              g.tensors[ids].name + "') must hold distinct indices into " +
                              c.indexes + ", and only a producer that declares them so " +
                              "(argsort's order, counting_sort's position or order) establishes " +
                              "that; it comes from " +
                              (p < 0 ? std::string("outside the graph (an input or weight)")
                                     : "op '" + g.ops[p].type + "'"));
    }
    if (producer >= 0) {
      const int status = established_status(g, op);
      g.index_checks.push_back({.status = status,
                                .producer = producer,
                                .ids = ids,
                                .bound = bound,
                                .slot = c.slot,
                                .indexes = c.indexes,
                                .sorted = c.sorted});
      statuses.push_back(status);
      continue;
    }
    // A check for sortedness also checks the range, so it serves a contract without.
    int status = -1;
    for (const GraphIndexCheck& k : g.index_checks)
      if (k.producer < 0 && k.ids == ids && k.bound == bound && (k.sorted || !c.sorted))
        status = k.status;
    if (status < 0) {
      status = g.add_tensor({.name = g.unique_name("check:" + g.tensors[ids].name),
                             .type = {DType::I32, {2}},
                             .kind = TensorKind::Activation,
                             .producer = static_cast<int>(g.ops.size())});
      g.ops.push_back(GraphOp{.type = "check_index",
                              .inputs = {ids},
                              .outputs = {status},
                              .attrs = {{"bound", bound}, {"sorted", c.sorted}},
                              .layer = op.layer,
                              .direction = Direction::Forward,
                              .loc = op.loc});
      g.index_checks.push_back({.status = status,
                                .ids = ids,
                                .bound = bound,
                                .slot = c.slot,
                                .indexes = c.indexes,
                                .sorted = c.sorted});
    }
    statuses.push_back(status);
  }
  // The op itself comes right after its checks.
  for (size_t i = first_new; i < g.index_checks.size(); ++i)
    g.index_checks[i].op = static_cast<int>(g.ops.size());
  op.inputs.insert(op.inputs.end(), statuses.begin(), statuses.end());
}

// An op that chooses (chooses_from_inputs) does so from its float inputs' values:
// OpGraph::selection_inputs. Its outputs must be in the graph.
void note_selection_inputs(OpGraph& g, const GraphOp& op) {
  if (!chooses_from_inputs(g, op)) return;
  for (int in : op.inputs)
    if (dtype_is_float(g.tensors[in].type.dtype) &&
        std::find(g.selection_inputs.begin(), g.selection_inputs.end(), in) ==
            g.selection_inputs.end())
      g.selection_inputs.push_back(in);
}

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
      add_index_checks(g, op);
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
      note_selection_inputs(g, op);
      g.ops.push_back(std::move(op));
    }
  }
  for (const std::string& out : model.outputs) {
    int id = g.find(out);
    TR_CHECK(id >= 0, "checked model has unknown output " + out);
    g.outputs.push_back(id);
  }
  add_loss_terms(model, g);
  return g;
}

void append_backward(const Model&, OpGraph& g) {
  std::vector<bool> req = requires_grad(g);
  std::vector<bool> seeded_directly(g.ops.size(), false);
  for (const GraphLossTerm& term : g.loss) {
    const GraphOp op = g.ops[term.op];  // a copy: seeding appends to g.ops
    if (op.type == "half_sum_squares" && term.weight == 1.0) {
      // L = 0.5 * sum(x^2)  =>  dL/dx = x: the seed is the input itself, no kernel.
      seeded_directly[term.op] = true;
      if (req[op.inputs[0]]) add_seed(g, op.inputs[0], op.inputs[0], op);
    } else if (req[term.value]) {
      int id = g.add_tensor({.name = g.unique_name("grad." + g.tensors[term.value].name),
                             .type = g.tensors[term.value].type,
                             .kind = TensorKind::Gradient,
                             .producer = static_cast<int>(g.ops.size())});
      g.ops.push_back(GraphOp{.type = "loss_seed",
                              .inputs = {term.value},
                              .outputs = {id},
                              .attrs = {{"weight", term.weight}},
                              .layer = op.layer,
                              .direction = Direction::Backward,
                              .loc = op.loc});
      g.grad[term.value] = id;
    }
  }
  const size_t forward_ops = seeded_directly.size();
  for (size_t i = forward_ops; i-- > 0;) {
    if (seeded_directly[i]) continue;
    const GraphOp fwd = g.ops[i];  // a copy: emitting appends to g.ops
    RuleEmitter(g, fwd, static_cast<int>(i), g.grad, req).emit();
  }
  // Inputs and weights that nothing reads keep a zero gradient: a tensor without a producer.
  for (size_t i = 0; i < req.size(); ++i) {
    if (differentiable(g.tensors[i]) && !g.grad.count(static_cast<int>(i))) {
      int id = g.add_tensor({.name = g.unique_name("grad." + g.tensors[i].name),
                             .type = g.tensors[i].type,
                             .kind = TensorKind::Gradient});
      g.grad[static_cast<int>(i)] = id;
    }
  }
}

}  // namespace tilerun::graph
