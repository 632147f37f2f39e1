// The model parser: YAML tree → checked Model. The format is described in docs/model-format.md;
// every check here reports the offending node's file:line:col and what was expected.
#include "graph/model/model_parser.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "compiler/base/check.h"
#include "graph/model/loss_spec.h"
#include "graph/model/op_spec.h"
#include "graph/model/tensor_spec.h"
#include "graph/model/yaml_util.h"

namespace tilerun {
namespace graph {

namespace {

using kernels::TensorType;

const std::vector<std::string> kModelKeys = {"model",  "dtype",   "precision", "dims",     "inputs",
                                             "layers", "outputs", "loss",      "optimizer"};
const std::vector<std::string> kTensorKeys = {"shape", "dtype", "init"};
const std::vector<std::string> kLayerKeys = {"name", "repeat", "carry", "weights", "ops", "loss"};

// Bounds on what `repeat` may expand to, so a two-line file cannot ask for a billion ops.
constexpr int64_t kMaxRepeat = 10000;
constexpr size_t kMaxOps = 100000;

std::string line_col(const SourceLoc& loc) {
  return std::to_string(loc.line) + ":" + std::to_string(loc.col);
}

// A layer as written, checked once and then instantiated once per repetition.
struct LayerSpec {
  std::string name;
  int64_t repeat = 1;
  bool repeated = false;  // has a `repeat` key, so its tensors are named layer.i.x
  SourceLoc loc;
  const YamlNode* weights = nullptr;
  std::vector<OpSpec> ops;
  std::map<std::string, size_t> producer;  // local op output → index of the op producing it
  // Every local name (weights, op outputs) → where it is declared and what it is.
  std::map<std::string, std::pair<SourceLoc, std::string>> locals;
  std::vector<std::string> local_order;  // the same names in file order, for messages
  std::vector<const YamlEntry*> carry;   // key: read from outside; value: a local op output
  const YamlNode* loss = nullptr;        // the layer's own loss terms, read per repetition
};

// What a finished layer offers to later layers' qualified references (layer.x, layer.i.x).
struct DoneLayer {
  bool repeated = false;
  int64_t repeat = 1;
  std::vector<std::string> local_order;
};

class ModelParser {
 public:
  ModelParser(std::string file, const kernels::OpRegistry& registry, const ModelOptions& options)
      : file_(std::move(file)), registry_(registry), options_(options) {}

  Model parse(const YamlNode& root);

 private:
  void set_dims();
  TensorDecl read_tensor(const YamlEntry& entry, TensorRole role, const std::string& full_name,
                         int layer) const;
  void declare(TensorDecl t);

  void parse_layers(const YamlNode& node);
  LayerSpec read_layer(const YamlNode& node, size_t index);
  void add_local(LayerSpec& layer, const std::string& name, const SourceLoc& loc,
                 const std::string& what) const;
  void instantiate(const LayerSpec& layer, int64_t rep);
  std::string resolve(const std::string& name, const SourceLoc& loc, const std::string& where,
                      const LayerSpec* layer, int64_t rep,
                      const std::map<std::string, std::string>& locals) const;
  std::string resolve_qualified(const std::string& name, const SourceLoc& loc,
                                const std::string& where, const LayerSpec* layer) const;
  TensorType type_of(const std::string& full_name) const;

  void parse_outputs(const YamlNode& node);

  std::string file_;
  const kernels::OpRegistry& registry_;
  const ModelOptions& options_;
  Model m_;
  std::map<std::string, int64_t> dims_;
  std::map<std::string, size_t> index_;          // tensor name → position in m_.tensors
  std::map<std::string, SourceLoc> all_layers_;  // every layer name in the file (first pass)
  std::map<std::string, DoneLayer> done_;
  std::vector<LossTerm> layer_terms_;  // every repetition's own loss terms, in layer order
  size_t op_count_ = 0;
  // The model's `precision`: the value of every op's `precision` attribute (matmul's) that the op
  // does not set itself; empty: the attribute's own default.
  std::string precision_;
  int64_t param_numel_ = 0;
  int64_t param_bytes_ = 0;
};

// ModelOptions::dims over the file's own values. A name the file does not declare is a usage
// error naming the dims it does (a dim cannot be added: nothing in the file would refer to it).
void ModelParser::set_dims() {
  for (const auto& [name, value] : options_.dims) {
    auto it = std::find_if(m_.dims.begin(), m_.dims.end(),
                           [&](const auto& d) { return d.first == name; });
    if (it == m_.dims.end()) {
      std::vector<std::string> names;
      for (const auto& d : m_.dims) names.push_back(d.first);
      throw Error("--dim " + name + "=" + std::to_string(value) + ": model '" + m_.name + "' (" +
                      file_ + ") declares no dim '" + name + "'" + did_you_mean(name, names) +
                      (names.empty() ? " (it declares none)" : " (its dims: " + join(names) + ")"),
                  ErrorKind::Usage);
    }
    if (value <= 0)
      throw Error("--dim " + name + "=" + std::to_string(value) + ": expected a positive integer",
                  ErrorKind::Usage);
    it->second = value;
  }
}

Model ModelParser::parse(const YamlNode& root) {
  if (root.is_null())
    throw Error(SourceLoc{file_, 1, 1},
                "the model file is empty; expected a mapping with keys " + join(kModelKeys));
  MapReader top(root, "the model", kModelKeys);
  m_.name = read_identifier(top.required("model"), "'model'");
  if (const YamlNode* n = top.find("dtype")) m_.dtype = read_dtype(*n, "'dtype'");
  if (const YamlNode* n = top.find("precision")) {
    precision_ = read_string(*n, "'precision'");
    if (precision_ != "strict" && precision_ != "tf32")
      throw Error(n->loc, "'precision' is '" + precision_ +
                              "', expected strict or tf32 (the f32 matmuls' default)");
  }
  if (const YamlNode* n = top.find("dims")) {
    m_.dims = read_dims(*n);
  }
  set_dims();
  dims_.insert(m_.dims.begin(), m_.dims.end());
  if (const YamlNode* n = top.find("inputs")) {
    if (!n->is_null()) expect_kind(*n, YamlNode::Kind::Mapping, "'inputs'");
    for (const YamlEntry& e : n->entries) {
      check_identifier_key(e, "a model input");
      declare(read_tensor(e, TensorRole::Input, e.key, -1));
    }
  }
  parse_layers(top.required("layers"));
  if (options_.layers > 0 &&
      std::none_of(done_.begin(), done_.end(), [](const auto& d) { return d.second.repeated; }))
    throw Error("--layers " + std::to_string(options_.layers) + ": model '" + m_.name + "' (" +
                    file_ + ") has no layer with 'repeat:' to repeat",
                ErrorKind::Usage);
  parse_outputs(top.required("outputs"));
  if (const YamlNode* n = top.find("loss")) {
    TensorLookup lookup{.resolve =
                            [&](const YamlNode& ref, const std::string& where) {
                              return resolve(ref.text, ref.loc, where, nullptr, 0, {});
                            },
                        .type_of = [&](const std::string& full) { return type_of(full); }};
    m_.loss = parse_loss(*n, registry_, dims_, lookup);
  }
  // Layers' own terms add to the model's loss, the default one included.
  if (!layer_terms_.empty()) {
    if (m_.loss.terms.empty()) m_.loss.terms = default_loss_terms(m_);
    for (LossTerm& term : layer_terms_) m_.loss.terms.push_back(std::move(term));
  }
  if (const YamlNode* n = top.find("optimizer")) m_.optimizer = parse_optimizer(*n);
  return std::move(m_);
}

TensorDecl ModelParser::read_tensor(const YamlEntry& entry, TensorRole role,
                                    const std::string& full_name, int layer) const {
  std::string what =
      role == TensorRole::Input ? "input '" + entry.key + "'" : "weight '" + full_name + "'";
  MapReader r(entry.value, what, kTensorKeys);
  TensorDecl t;
  t.name = full_name;
  t.role = role;
  t.layer = layer;
  t.loc = entry.key_loc;
  t.dtype = m_.dtype;
  if (const YamlNode* n = r.find("dtype")) t.dtype = read_dtype(*n, "the dtype of " + what);
  t.shape = read_shape(r.required("shape"), full_name, m_.dims, t.dims);
  if (const YamlNode* n = r.find("init")) {
    t.init = read_init(*n, full_name);
    check_init_range(*n, t.init, t.dtype, full_name);
  }
  return t;
}

void ModelParser::declare(TensorDecl t) {
  TR_CHECK(!index_.count(t.name), "tensor declared twice: " + t.name);
  if (t.role == TensorRole::Weight &&
      (__builtin_add_overflow(param_numel_, t.numel(), &param_numel_) ||
       __builtin_add_overflow(param_bytes_, t.nbytes(), &param_bytes_)))
    throw Error(t.loc, "the model's parameter count overflows int64 at weight '" + t.name +
                           "'; expected a smaller model");
  index_[t.name] = m_.tensors.size();
  m_.tensors.push_back(std::move(t));
}

void ModelParser::parse_layers(const YamlNode& node) {
  expect_kind(node, YamlNode::Kind::Sequence, "'layers'");
  if (node.items.empty()) throw Error(node.loc, "'layers' is empty; expected at least one layer");
  // Every layer name up front, so that naming a later layer's tensor reads as "used before it
  // is produced" rather than "unknown". Malformed layers are reported in order, later.
  for (const YamlNode& item : node.items)
    for (const YamlEntry& e : item.entries)
      if (e.key == "name" && e.value.is_scalar()) all_layers_.emplace(e.value.text, e.value.loc);
  for (size_t i = 0; i < node.items.size(); ++i) {
    LayerSpec spec = read_layer(node.items[i], i);
    for (int64_t rep = 0; rep < spec.repeat; ++rep) instantiate(spec, rep);
    done_[spec.name] = DoneLayer{spec.repeated, spec.repeat, spec.local_order};
  }
}

LayerSpec ModelParser::read_layer(const YamlNode& node, size_t index) {
  MapReader r(node, "layer " + std::to_string(index), kLayerKeys);
  LayerSpec spec;
  spec.loc = node.loc;
  const YamlNode& name_node = r.required("name");
  spec.name = read_identifier(name_node, "a layer name");
  if (done_.count(spec.name))
    throw Error(name_node.loc, "duplicate layer name '" + spec.name + "' (first at " +
                                   line_col(all_layers_.at(spec.name)) +
                                   "); expected a unique name");
  std::string what = "layer '" + spec.name + "'";

  if (const YamlNode* n = r.find("repeat")) {
    std::optional<int64_t> v = as_int(*n);
    if (!v || *v <= 0)
      throw Error(n->loc,
                  "repeat of " + what + " is " + describe(*n) + "; expected a positive integer");
    if (*v > kMaxRepeat)
      throw Error(n->loc, "repeat of " + what + " is " + n->text + "; expected at most " +
                              std::to_string(kMaxRepeat));
    spec.repeat = *v;
    spec.repeated = true;
    if (options_.layers > 0) {
      if (options_.layers > kMaxRepeat)
        throw Error("--layers " + std::to_string(options_.layers) + ": expected at most " +
                        std::to_string(kMaxRepeat),
                    ErrorKind::Usage);
      spec.repeat = options_.layers;
    }
  }

  if (const YamlNode* n = r.find("weights")) {
    if (!n->is_null()) expect_kind(*n, YamlNode::Kind::Mapping, "the weights of " + what);
    spec.weights = n;
    for (const YamlEntry& e : n->entries) {
      check_identifier_key(e, "a weight");
      add_local(spec, e.key, e.key_loc, "a weight of " + what);
    }
  }

  const YamlNode& ops = r.required("ops");
  expect_kind(ops, YamlNode::Kind::Sequence, "the ops of " + what);
  if (ops.items.empty()) throw Error(ops.loc, what + " has no ops; expected at least one");
  for (size_t k = 0; k < ops.items.size(); ++k) {
    OpSpec op = parse_op_spec(ops.items[k], k, spec.name, registry_, dims_);
    if (!precision_.empty() && op.attrs.count("precision")) {
      bool given = false;
      for (const YamlEntry& e : ops.items[k].entries) given = given || e.key == "precision";
      if (!given) op.attrs["precision"] = precision_;
    }
    for (const YamlNode* out : op.outputs) {
      add_local(spec, out->text, out->loc,
                "the output of op " + std::to_string(k) + " (" + op.schema->name + ")");
      spec.producer[out->text] = k;
    }
    spec.ops.push_back(std::move(op));
  }
  op_count_ += spec.ops.size() * static_cast<size_t>(spec.repeat);
  if (op_count_ > kMaxOps)
    throw Error(spec.loc, "the model has more than " + std::to_string(kMaxOps) + " ops once " +
                              what + " is repeated; expected fewer");

  spec.loss = r.find("loss");
  if (const YamlNode* n = r.find("carry")) {
    if (!spec.repeated)
      throw Error(n->loc, "carry of " + what +
                              " without 'repeat': a carry feeds repetition i-1 into repetition i; "
                              "expected 'repeat: N' next to it");
    expect_kind(*n, YamlNode::Kind::Mapping, "the carry of " + what);
    std::vector<std::string> outputs;
    for (const auto& [name, _] : spec.producer) outputs.push_back(name);
    for (const YamlEntry& e : n->entries) {
      if (spec.locals.count(e.key))
        throw Error(e.key_loc, "carry key '" + e.key + "' is " + spec.locals.at(e.key).second +
                                   "; expected a tensor from outside the layer, which "
                                   "repetition i > 0 reads from repetition i-1");
      std::string value = read_string(e.value, "the carry of '" + e.key + "'");
      if (!spec.producer.count(value))
        throw Error(e.value.loc, "carry value " + quote(value) + " is not an op output of " + what +
                                     did_you_mean(value, outputs) +
                                     " (its op outputs: " + join(outputs) + ")");
      spec.carry.push_back(&e);
    }
  }
  return spec;
}

void ModelParser::add_local(LayerSpec& layer, const std::string& name, const SourceLoc& loc,
                            const std::string& what) const {
  auto input = index_.find(name);
  if (input != index_.end())
    throw Error(loc, "duplicate name '" + name + "': already a model input (at " +
                         line_col(m_.tensors[input->second].loc) +
                         "); expected a name that does not hide a model input");
  auto it = layer.locals.find(name);
  if (it != layer.locals.end())
    throw Error(loc, "duplicate name '" + name + "': already " + it->second.second + " (at " +
                         line_col(it->second.first) +
                         "); expected each tensor to be declared or produced once");
  layer.locals[name] = {loc, what};
  layer.local_order.push_back(name);
}

void ModelParser::instantiate(const LayerSpec& spec, int64_t rep) {
  int layer_index = static_cast<int>(m_.layers.size());
  LayerDecl decl;
  decl.name = spec.repeated ? spec.name + "." + std::to_string(rep) : spec.name;
  decl.loc = spec.loc;
  std::string prefix = decl.name + ".";
  std::map<std::string, std::string> locals;  // local name → full name, as declared so far

  if (spec.weights)
    for (const YamlEntry& e : spec.weights->entries) {
      declare(read_tensor(e, TensorRole::Weight, prefix + e.key, layer_index));
      locals[e.key] = prefix + e.key;
    }
  // Carry keys name tensors from outside the layer; check them before the ops read them.
  std::vector<std::string> carried_from;
  for (const YamlEntry* e : spec.carry)
    carried_from.push_back(
        resolve(e->key, e->key_loc, "the carry of layer '" + spec.name + "'", nullptr, 0, {}));

  for (size_t k = 0; k < spec.ops.size(); ++k) {
    const OpSpec& op = spec.ops[k];
    std::string where =
        "op " + std::to_string(k) + " (" + op.schema->name + ") of layer '" + decl.name + "'";
    OpDecl od;
    od.type = op.schema->name;
    od.attrs = op.attrs;
    od.loc = op.loc;
    std::vector<TensorType> in_types;
    std::string listing;  // "a = block.0.h f32[128,256], b = ..." for shape errors
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      std::string full = resolve(op.inputs[i]->text, op.inputs[i]->loc,
                                 "input " + std::to_string(i) + " of " + where, &spec, rep, locals);
      in_types.push_back(type_of(full));
      listing += (i ? ", " : "") + op.schema->inputs[i] + " = " + full + " " +
                 kernels::to_string(in_types.back());
      od.inputs.push_back(std::move(full));
    }
    std::vector<TensorType> out_types;
    try {
      out_types = op.schema->infer(in_types, od.attrs);
    } catch (const kernels::ShapeError& e) {
      throw Error(op.loc, where + ": " + e.what() + " (inputs: " + listing + ")");
    }
    // An op with optional outputs (split) gives as many as its attributes say.
    if (out_types.size() != op.outputs.size())
      throw Error(op.loc, where + ": it gives " + std::to_string(out_types.size()) + " output" +
                              (out_types.size() == 1 ? "" : "s") + " for these attributes, found " +
                              std::to_string(op.outputs.size()) + " names in 'out'");
    for (size_t j = 0; j < op.outputs.size(); ++j) {
      TensorDecl t;
      t.name = prefix + op.outputs[j]->text;
      t.role = TensorRole::Activation;
      t.dtype = out_types[j].dtype;
      t.shape = out_types[j].shape;
      t.layer = layer_index;
      t.loc = op.outputs[j]->loc;
      int64_t numel = 1;
      for (int64_t d : t.shape) {
        TR_CHECK(d > 0, "infer of " + od.type + " gave a non-positive size");
        if (__builtin_mul_overflow(numel, d, &numel) || numel > kMaxNumel)
          throw Error(op.loc, where + ": its output '" + op.outputs[j]->text + "' " +
                                  kernels::to_string(out_types[j]) +
                                  " has an element count that overflows int64; expected at "
                                  "most 2^57 - 1 elements");
        t.dims.push_back(std::to_string(d));
      }
      locals[op.outputs[j]->text] = t.name;
      od.outputs.push_back(t.name);
      declare(std::move(t));
    }
    decl.ops.push_back(std::move(od));
  }

  // Repetition i+1 reads the carried value where repetition i read the outside tensor, so the
  // two must have one type.
  for (size_t c = 0; c < spec.carry.size() && rep == 0; ++c) {
    const YamlEntry& e = *spec.carry[c];
    TensorType from = type_of(carried_from[c]), to = type_of(locals.at(e.value.text));
    if (!(from == to))
      throw Error(e.value.loc, "carry '" + e.key + ": " + e.value.text + "' of layer '" +
                                   spec.name + "' changes the type: '" + e.key + "' is " +
                                   kernels::to_string(from) + " but '" + e.value.text + "' is " +
                                   kernels::to_string(to) + "; expected the same dtype and shape");
  }
  if (spec.loss) {
    TensorLookup lookup{.resolve =
                            [&](const YamlNode& ref, const std::string& where) {
                              return resolve(ref.text, ref.loc, where, &spec, rep, locals);
                            },
                        .type_of = [&](const std::string& full) { return type_of(full); }};
    for (LossTerm& term : parse_layer_loss(*spec.loss, decl.name, registry_, dims_, lookup))
      layer_terms_.push_back(std::move(term));
  }
  m_.layers.push_back(std::move(decl));
}

std::string ModelParser::resolve(const std::string& name, const SourceLoc& loc,
                                 const std::string& where, const LayerSpec* layer, int64_t rep,
                                 const std::map<std::string, std::string>& locals) const {
  if (layer) {
    if (rep > 0)
      for (const YamlEntry* e : layer->carry)
        if (e->key == name)
          return layer->name + "." + std::to_string(rep - 1) + "." + e->value.text;
    auto local = locals.find(name);
    if (local != locals.end()) return local->second;
    auto later = layer->producer.find(name);
    if (later != layer->producer.end())
      throw Error(
          loc, "tensor '" + name + "' (" + where + ") is used before it is produced by op " +
                   std::to_string(later->second) + " (" + layer->ops[later->second].schema->name +
                   ") at " + line_col(layer->locals.at(name).first) +
                   "; expected ops in execution order");
  }
  if (name.find('.') != std::string::npos) return resolve_qualified(name, loc, where, layer);
  auto it = index_.find(name);
  if (it != index_.end()) return name;  // only model inputs have names without a dot

  std::vector<std::string> visible;
  for (const TensorDecl& t : m_.tensors)
    if (t.role == TensorRole::Input) visible.push_back(t.name);
  for (const auto& [local, _] : locals) visible.push_back(local);
  std::string hint;
  for (const auto& [layer_name, done] : done_)  // "y" meant as an earlier layer's "block.y"
    if (hint.empty() &&
        std::find(done.local_order.begin(), done.local_order.end(), name) != done.local_order.end())
      hint = "; did you mean '" + layer_name + "." + name + "'?";
  if (hint.empty()) hint = did_you_mean(name, visible);
  if (!is_identifier(name))
    throw Error(loc, quote(name) + " (" + where +
                         ") is not a tensor name; expected an identifier or layer.name");
  throw Error(loc, "unknown tensor " + quote(name) + " (" + where + ")" + hint +
                       " (visible here: " + (visible.empty() ? "no tensors" : join(visible)) +
                       ", and earlier layers' tensors as layer.name)");
}

std::string ModelParser::resolve_qualified(const std::string& name, const SourceLoc& loc,
                                           const std::string& where, const LayerSpec* layer) const {
  std::string layer_name = name.substr(0, name.find('.'));
  std::string rest = name.substr(layer_name.size() + 1);
  if (layer && layer_name == layer->name)
    throw Error(loc, quote(name) + " (" + where + ") names a tensor of the layer being defined; " +
                         "expected its local name '" + rest.substr(rest.rfind('.') + 1) + "'");
  auto done = done_.find(layer_name);
  if (done == done_.end()) {
    auto later = all_layers_.find(layer_name);
    if (later != all_layers_.end())
      throw Error(loc, "tensor " + quote(name) + " (" + where +
                           ") is used before it is produced: " + "layer '" + layer_name +
                           "' comes later (at " + line_col(later->second) +
                           "); expected layers in execution order");
    std::vector<std::string> names;
    for (const auto& [n, _] : done_) names.push_back(n);
    throw Error(loc, "unknown tensor " + quote(name) + " (" + where + "): there is no layer " +
                         quote(layer_name) + " before this point" +
                         did_you_mean(layer_name, names));
  }
  const DoneLayer& d = done->second;
  std::string local = rest, full;
  if (d.repeated) {
    size_t dot = rest.find('.');
    std::string index = rest.substr(0, dot);
    if (dot == std::string::npos) {  // layer.x: the last repetition's x
      full = layer_name + "." + std::to_string(d.repeat - 1) + "." + rest;
    } else if (!index.empty() && index.size() < 7 &&
               index.find_first_not_of("0123456789") == std::string::npos) {
      int64_t i = std::stoll(index);
      if (i >= d.repeat)
        throw Error(loc, quote(name) + " (" + where + ") names repetition " + index +
                             " of layer '" + layer_name + "'; expected 0 to " +
                             std::to_string(d.repeat - 1));
      local = rest.substr(dot + 1);
      full = layer_name + "." + std::to_string(i) + "." + local;
    }
  } else {
    full = name;
  }
  if (!full.empty() && index_.count(full)) return full;
  throw Error(loc, "unknown tensor " + quote(name) + " (" + where + "): layer '" + layer_name +
                       "' has no tensor " + quote(local) + did_you_mean(local, d.local_order) +
                       " (its tensors: " + join(d.local_order) + ")");
}

TensorType ModelParser::type_of(const std::string& full_name) const {
  const TensorDecl& t = m_.tensors.at(index_.at(full_name));
  return TensorType{t.dtype, t.shape};
}

void ModelParser::parse_outputs(const YamlNode& node) {
  std::vector<const YamlNode*> refs;
  if (node.is_scalar()) {
    refs.push_back(&node);
  } else {
    expect_kind(node, YamlNode::Kind::Sequence, "'outputs'");
    for (const YamlNode& item : node.items) {
      if (!item.is_scalar())
        throw Error(item.loc, "expected a tensor name in 'outputs', found " + describe(item));
      refs.push_back(&item);
    }
  }
  if (refs.empty()) throw Error(node.loc, "'outputs' is empty; expected at least one tensor");
  for (const YamlNode* ref : refs) {
    std::string full = resolve(ref->text, ref->loc, "in 'outputs'", nullptr, 0, {});
    if (m_.tensors[index_.at(full)].role != TensorRole::Activation)
      throw Error(
          ref->loc,
          "output " + quote(ref->text) + " is a " +
              (m_.tensors[index_.at(full)].role == TensorRole::Input ? "model input" : "weight") +
              "; expected a tensor produced by an op");
    if (std::find(m_.outputs.begin(), m_.outputs.end(), full) != m_.outputs.end())
      throw Error(ref->loc, "duplicate output '" + full + "'; expected each output once");
    m_.outputs.push_back(full);
  }
}

}  // namespace

Model parse_model(const std::string& yaml_text, const std::string& file_name,
                  const kernels::OpRegistry& registry, const ModelOptions& options) {
  YamlLimits limits;
  limits.max_bytes = kMaxModelBytes;
  YamlNode root = parse_yaml(yaml_text, file_name, limits);
  Model model = ModelParser(file_name, registry, options).parse(root);
  model.file = file_name;
  return model;
}

}  // namespace graph

Model parse_model(const std::string& yaml_text, const std::string& file_name,
                  const ModelOptions& options) {
  return graph::parse_model(yaml_text, file_name, kernels::op_registry(), options);
}

Model load_model(const std::string& path, const ModelOptions& options) {
  SourceLoc at{path, 0, 0};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(at, std::string("cannot open the model file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error(at, "is a directory; expected a YAML model file");
  // Checked before reading, so that pointing tilerun at a huge file fails at once.
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > graph::kMaxModelBytes)
    throw Error(at, "the model file is " + std::to_string(st.st_size) +
                        " bytes; expected at most " + std::to_string(graph::kMaxModelBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(at, std::string("cannot open the model file: ") + std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > graph::kMaxModelBytes) break;  // a pipe or device: parse_yaml refuses it
  }
  if (in.bad()) throw Error(at, "cannot read the model file");
  return parse_model(text, path, options);
}

}  // namespace tilerun
