#include "kernels/op_registry.h"

#include <mutex>
#include <sstream>

#include "compiler/base/check.h"

namespace tilerun::kernels {

// One registration function per family (kernels/families.def).
#define TILERUN_OP_FAMILY(name) void register_##name(OpRegistry& registry);
#include "kernels/families.def"
#undef TILERUN_OP_FAMILY

std::string to_string(const TensorType& t) {
  std::ostringstream os;
  os << dtype_name(t.dtype) << "[";
  for (size_t i = 0; i < t.shape.size(); ++i) os << (i ? "," : "") << t.shape[i];
  os << "]";
  return os.str();
}

int64_t RefTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string_view attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int:
      return "integer";
    case AttrKind::Float:
      return "number";
    case AttrKind::Bool:
      return "boolean";
    case AttrKind::String:
      return "string";
    case AttrKind::IntList:
      return "list of integers";
    case AttrKind::FloatList:
      return "list of numbers";
    case AttrKind::StringList:
      return "list of strings";
  }
  return "?";
}

const AttrSpec* OpSchema::find_attr(std::string_view attr) const {
  for (const AttrSpec& a : attrs)
    if (a.name == attr) return &a;
  return nullptr;
}

void OpRegistry::add(OpSchema schema) {
  TR_CHECK(!schema.name.empty(), "op without a name");
  TR_CHECK(schema.infer, "op " + schema.name + " has no inference function");
  std::string name = schema.name;
  bool inserted = ops_.emplace(name, std::move(schema)).second;
  TR_CHECK(inserted, "op registered twice: " + name);
}

const OpSchema* OpRegistry::find(std::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : &it->second;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : ops_) out.push_back(name);
  return out;
}

const OpRegistry& op_registry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
#define TILERUN_OP_FAMILY(name) register_##name(r);
#include "kernels/families.def"
#undef TILERUN_OP_FAMILY
    return r;
  }();
  return registry;
}

namespace {
template <typename T>
const T& get_attr(const Attrs& attrs, const std::string& name) {
  auto it = attrs.find(name);
  TR_CHECK(it != attrs.end(), "attribute missing after defaults: " + name);
  const T* v = std::get_if<T>(&it->second);
  TR_CHECK(v != nullptr, "attribute has the wrong kind: " + name);
  return *v;
}
}  // namespace

int64_t attr_int(const Attrs& attrs, const std::string& name) {
  return get_attr<int64_t>(attrs, name);
}
double attr_float(const Attrs& attrs, const std::string& name) {
  auto it = attrs.find(name);
  if (it != attrs.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return get_attr<double>(attrs, name);
}
bool attr_bool(const Attrs& attrs, const std::string& name) { return get_attr<bool>(attrs, name); }
const std::string& attr_string(const Attrs& attrs, const std::string& name) {
  return get_attr<std::string>(attrs, name);
}

}  // namespace tilerun::kernels
