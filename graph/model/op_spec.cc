#include "graph/model/op_spec.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tilerun::graph {

namespace {

using kernels::AttrKind;
using kernels::AttrSpec;
using kernels::OpSchema;

// The name list of a scalar-or-sequence value: `in: x` and `in: [x, y]` both work, since most
// ops have one output and writing `out: [y]` each time is noise.
std::vector<const YamlNode*> name_list(const YamlNode& node, const std::string& what) {
  std::vector<const YamlNode*> out;
  if (node.is_null()) return out;
  if (node.is_scalar()) return {&node};
  if (!node.is_sequence())
    throw Error(node.loc, "expected a tensor name or a sequence of names for " + what + ", found " +
                              describe(node));
  for (const YamlNode& item : node.items) {
    if (!item.is_scalar())
      throw Error(item.loc, "expected a tensor name in " + what + ", found " + describe(item));
    out.push_back(&item);
  }
  return out;
}

std::string slot_list(const std::vector<std::string>& slots, int optional) {
  std::vector<std::string> shown = slots;
  for (size_t i = slots.size() - optional; i < slots.size(); ++i) shown[i] = "[" + slots[i] + "]";
  return join(shown);
}

class AttrReader {
 public:
  AttrReader(const AttrSpec& spec, const std::string& op,
             const std::map<std::string, int64_t>& dims)
      : spec_(spec), op_(op), dims_(dims) {}

  AttrValue read(const YamlNode& node) const {
    switch (spec_.kind) {
      case AttrKind::Int:
        return read_int_value(node);
      case AttrKind::Float:
        return read_float_value(node);
      case AttrKind::Bool:
        if (std::optional<bool> b = as_bool(node)) return *b;
        wrong(node);
      case AttrKind::String:
        if (!node.is_scalar()) wrong(node);
        return node.text;
      case AttrKind::IntList:
        return read_list<int64_t>(node, [&](const YamlNode& n) { return read_int_value(n); });
      case AttrKind::FloatList:
        return read_list<double>(node, [&](const YamlNode& n) { return read_float_value(n); });
      case AttrKind::StringList:
        return read_list<std::string>(node, [&](const YamlNode& n) {
          if (!n.is_scalar()) wrong(n);
          return n.text;
        });
    }
    wrong(node);
  }

 private:
  [[noreturn]] void wrong(const YamlNode& node) const {
    std::string expected(kernels::attr_kind_name(spec_.kind));
    if (spec_.kind != AttrKind::Bool && spec_.kind != AttrKind::String &&
        spec_.kind != AttrKind::StringList)
      expected += " (a dim name is also accepted)";
    throw Error(node.loc, "attribute '" + spec_.name + "' of op '" + op_ + "' expects " +
                              article(spec_.kind) + expected + ", found " + describe(node));
  }

  static std::string article(AttrKind k) { return k == AttrKind::Int ? "an " : "a "; }

  int64_t read_int_value(const YamlNode& node) const {
    std::optional<int64_t> i = as_int(node);
    // Sizes such as a block or top-k often equal a dim; naming it keeps the file consistent.
    if (!i && node.is_scalar() && node.plain) {
      auto it = dims_.find(node.text);
      if (it != dims_.end()) i = it->second;
    }
    if (!i) wrong(node);
    check_sign(node, static_cast<double>(*i));
    return *i;
  }

  // Every kernel takes its scalars as f32: a NaN, an infinity or a value that rounds to one
  // would only show up as NaN outputs, so it is refused here, at its position.
  double read_float_value(const YamlNode& node) const {
    std::optional<double> d = as_float(node);
    // A position or an offset built in-graph often equals a dim (iota's start: T).
    if (!d && node.is_scalar() && node.plain) {
      auto it = dims_.find(node.text);
      if (it != dims_.end()) d = static_cast<double>(it->second);
    }
    if (!d) wrong(node);
    if (!std::isfinite(*d) || std::abs(*d) > std::numeric_limits<float>::max())
      throw Error(node.loc, "attribute '" + spec_.name + "' of op '" + op_ + "' is " +
                                describe(node) + "; expected a finite number within f32 range");
    check_sign(node, *d);
    return *d;
  }

  void check_sign(const YamlNode& node, double v) const {
    if (spec_.positive && !(v > 0))
      throw Error(node.loc, "attribute '" + spec_.name + "' of op '" + op_ + "' is " +
                                describe(node) + "; expected a positive number (" + spec_.doc +
                                ")");
  }

  template <typename T, typename F>
  std::vector<T> read_list(const YamlNode& node, F element) const {
    if (!node.is_sequence()) wrong(node);
    std::vector<T> out;
    for (const YamlNode& item : node.items) out.push_back(element(item));
    return out;
  }

  const AttrSpec& spec_;
  const std::string& op_;
  const std::map<std::string, int64_t>& dims_;
};

// The op's attributes: checked against its schema, defaults filled in.
void read_attrs(OpSpec& spec, const YamlNode& node,
                const std::map<std::string, const YamlNode*>& given, const std::string& type,
                const std::string& where, const std::map<std::string, int64_t>& dims);

}  // namespace

OpSpec parse_op_spec(const YamlNode& node, size_t index, const std::string& layer,
                     const kernels::OpRegistry& registry,
                     const std::map<std::string, int64_t>& dims) {
  return parse_op_spec(
      node,
      OpSpecForm{.prefix = "op " + std::to_string(index), .suffix = " of layer '" + layer + "'"},
      registry, dims);
}

OpSpec parse_op_spec(const YamlNode& node, const OpSpecForm& form,
                     const kernels::OpRegistry& registry,
                     const std::map<std::string, int64_t>& dims) {
  std::string where = form.prefix + form.suffix;
  expect_kind(node, YamlNode::Kind::Mapping, where);
  OpSpec spec;
  spec.loc = node.loc;
  const std::string& type_key = form.type_key;

  const YamlNode* op_node = nullptr;
  for (const YamlEntry& e : node.entries)
    if (e.key == type_key) op_node = &e.value;
  if (op_node == nullptr)
    throw Error(node.loc, "missing required key '" + type_key + "' in " + where);
  std::string type = read_string(*op_node, "the op type of " + where);
  spec.schema = registry.find(type);
  if (spec.schema == nullptr)
    throw Error(op_node->loc, "unknown op " + quote(type) + did_you_mean(type, registry.names()) +
                                  " (known ops: " + join(registry.names()) + ")");
  const OpSchema& schema = *spec.schema;
  where = form.prefix + " (" + type + ")" + form.suffix;

  const YamlNode* in_node = nullptr;
  const YamlNode* out_node = nullptr;
  std::map<std::string, const YamlNode*> given;  // attributes as written
  std::vector<std::string> own_keys = {type_key, "in"};
  if (form.has_outputs) own_keys.push_back("out");
  own_keys.insert(own_keys.end(), form.extra_keys.begin(), form.extra_keys.end());
  for (const YamlEntry& e : node.entries) {
    if (e.key == type_key ||
        std::find(form.extra_keys.begin(), form.extra_keys.end(), e.key) != form.extra_keys.end())
      continue;
    if (e.key == "in") {
      in_node = &e.value;
    } else if (e.key == "out" && form.has_outputs) {
      out_node = &e.value;
    } else if (schema.find_attr(e.key) != nullptr) {
      given[e.key] = &e.value;
    } else {
      std::vector<std::string> keys = own_keys;
      std::vector<std::string> attrs;
      for (const AttrSpec& a : schema.attrs) keys.push_back(a.name), attrs.push_back(a.name);
      throw Error(e.key_loc, "unknown attribute " + quote(e.key) + " for op '" + type + "'" +
                                 did_you_mean(e.key, keys) + " (allowed keys: " + join(own_keys) +
                                 (attrs.empty() ? "; it has no attributes"
                                                : "; its attributes: " + join(attrs)) +
                                 ")");
    }
  }

  if (in_node != nullptr) spec.inputs = name_list(*in_node, "the inputs of " + where);
  size_t max_in = schema.inputs.size();
  size_t min_in = max_in - schema.optional_inputs;
  if (spec.inputs.size() < min_in || spec.inputs.size() > max_in) {
    std::string count = min_in == max_in ? std::to_string(max_in)
                                         : std::to_string(min_in) + " to " + std::to_string(max_in);
    throw Error(in_node ? in_node->loc : node.loc,
                "op '" + type + "' takes " + count + " input" + (max_in == 1 ? "" : "s") + " (" +
                    slot_list(schema.inputs, schema.optional_inputs) + "), found " +
                    std::to_string(spec.inputs.size()));
  }

  if (!form.has_outputs) {
    read_attrs(spec, node, given, type, where, dims);
    return spec;
  }
  if (out_node == nullptr) throw Error(node.loc, "missing required key 'out' in " + where);
  spec.outputs = name_list(*out_node, "the outputs of " + where);
  size_t max_out = schema.outputs.size();
  size_t min_out = max_out - schema.optional_outputs;
  if (spec.outputs.size() < min_out || spec.outputs.size() > max_out) {
    std::string count = min_out == max_out
                            ? std::to_string(max_out)
                            : std::to_string(min_out) + " to " + std::to_string(max_out);
    throw Error(out_node->loc, "op '" + type + "' produces " + count + " output" +
                                   (max_out == 1 ? "" : "s") + " (" +
                                   slot_list(schema.outputs, schema.optional_outputs) +
                                   "), found " + std::to_string(spec.outputs.size()));
  }
  for (const YamlNode* out : spec.outputs) read_identifier(*out, "an output of " + where);
  read_attrs(spec, node, given, type, where, dims);
  return spec;
}

namespace {

void read_attrs(OpSpec& spec, const YamlNode& node,
                const std::map<std::string, const YamlNode*>& given, const std::string& type,
                const std::string& where, const std::map<std::string, int64_t>& dims) {
  for (const AttrSpec& a : spec.schema->attrs) {
    auto it = given.find(a.name);
    if (it != given.end()) {
      spec.attrs[a.name] = AttrReader(a, type, dims).read(*it->second);
    } else if (a.default_value) {
      spec.attrs[a.name] = *a.default_value;
    } else {
      throw Error(node.loc, "missing required attribute '" + a.name + "' (" +
                                std::string(kernels::attr_kind_name(a.kind)) + ") of " + where);
    }
  }
}

}  // namespace

}  // namespace tilerun::graph
