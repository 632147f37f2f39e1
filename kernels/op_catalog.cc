#include "kernels/op_catalog.h"

#include <charconv>
#include <sstream>

#include "tilerun/ops.h"

namespace tilerun::kernels {

namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// The shortest text that reads back as the same double.
std::string number_text(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

struct ValueText {
  std::string operator()(int64_t v) const { return std::to_string(v); }
  std::string operator()(double v) const { return number_text(v); }
  std::string operator()(bool v) const { return v ? "true" : "false"; }
  std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
  template <typename T>
  std::string operator()(const std::vector<T>& v) const {
    std::vector<std::string> items;
    for (const T& x : v) items.push_back((*this)(x));
    return "[" + join(items, ", ") + "]";
  }
};

}  // namespace

std::string attr_value_text(const AttrValue& value) { return std::visit(ValueText{}, value); }

std::vector<OpCatalogRow> op_catalog(const OpRegistry& registry) {
  std::vector<OpCatalogRow> rows;
  for (const std::string& name : registry.names()) {
    const OpSchema& s = *registry.find(name);
    std::vector<std::string> inputs = s.inputs, attrs, dtypes;
    for (size_t i = inputs.size() - s.optional_inputs; i < inputs.size(); ++i) inputs[i] += "?";
    std::vector<std::string> outputs = s.outputs;
    for (size_t i = outputs.size() - s.optional_outputs; i < outputs.size(); ++i) outputs[i] += "?";
    for (const AttrSpec& a : s.attrs)
      attrs.push_back(a.name + ": " + std::string(attr_kind_name(a.kind)) +
                      (a.default_value ? " = " + attr_value_text(*a.default_value) : ""));
    for (DType d : s.dtypes) dtypes.push_back(std::string(dtype_name(d)));
    // Slots of a fixed dtype follow a ';': "f32, bf16, f16; targets: i32, loss: f32".
    std::vector<std::string> fixed;
    for (const auto& [i, d] : s.input_dtypes)
      fixed.push_back(s.inputs[i] + ": " + std::string(dtype_name(d)));
    for (const auto& [i, d] : s.output_dtypes)
      fixed.push_back(s.outputs[i] + ": " + std::string(dtype_name(d)));
    for (const auto& [i, attr] : s.output_dtype_attrs)
      fixed.push_back(s.outputs[i] + ": the dtype " + attr + " names");
    rows.push_back({.op = name,
                    .inputs = inputs.empty() ? "none" : join(inputs, ", "),
                    .outputs = join(outputs, ", "),
                    .attrs = attrs.empty() ? "none" : join(attrs, "; "),
                    .dtypes = join(dtypes, ", ") + (fixed.empty() ? "" : "; " + join(fixed, ", ")),
                    .doc = s.doc});
  }
  return rows;
}

}  // namespace tilerun::kernels

namespace tilerun {

std::string op_catalog_text() {
  const kernels::OpRegistry& registry = kernels::op_registry();
  std::vector<kernels::OpCatalogRow> rows = kernels::op_catalog(registry);
  std::ostringstream os;
  os << rows.size() << " ops (the model format: docs/model-format.md)\n";
  for (const kernels::OpCatalogRow& r : rows) {
    os << "\n" << r.op << ": " << r.doc << "\n";
    os << "  inputs:     " << r.inputs << "\n";
    os << "  outputs:    " << r.outputs << "\n";
    os << "  attributes:";
    const kernels::OpSchema& s = *registry.find(r.op);
    if (s.attrs.empty()) os << " none\n";
    for (size_t i = 0; i < s.attrs.size(); ++i) {
      const kernels::AttrSpec& a = s.attrs[i];
      os << (i ? "              " : " ") << a.name << ": " << kernels::attr_kind_name(a.kind)
         << (a.default_value ? " = " + kernels::attr_value_text(*a.default_value) : " (required)")
         << (a.doc.empty() ? "" : " (" + a.doc + ")") << "\n";
    }
    os << "  dtypes:     " << r.dtypes << "\n";
  }
  return os.str();
}

}  // namespace tilerun
