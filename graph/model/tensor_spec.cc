#include "graph/model/tensor_spec.h"

#include <cmath>
#include <sstream>

#include "graph/model/numeric_convert.h"

namespace tilerun::graph {

namespace {

const std::vector<std::string> kInitNames = {"zeros", "ones", "normal", "uniform", "constant"};

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;  // DType values are dense from F32 to E8M0
  for (int i = 0; i <= static_cast<int>(DType::E8M0); ++i)
    names.emplace_back(dtype_name(static_cast<DType>(i)));
  return names;
}

const int64_t* find_dim(const DimList& dims, const YamlNode& item) {
  if (!item.is_scalar()) return nullptr;
  for (const auto& [name, size] : dims)
    if (name == item.text) return &size;
  return nullptr;
}

}  // namespace

DimList read_dims(const YamlNode& node) {
  expect_kind(node, YamlNode::Kind::Mapping, "'dims'");
  DimList dims;
  for (const YamlEntry& e : node.entries) {
    check_identifier_key(e, "a dim");
    std::optional<int64_t> v = as_int(e.value);
    if (!v)
      throw Error(e.value.loc, "expected a positive integer for dim '" + e.key + "', found " +
                                   describe(e.value));
    if (*v <= 0)
      throw Error(e.value.loc,
                  "dim '" + e.key + "' is " + std::to_string(*v) + "; expected a positive integer");
    dims.emplace_back(e.key, *v);
  }
  return dims;
}

DType read_dtype(const YamlNode& node, const std::string& what) {
  std::string name = read_string(node, what);
  if (std::optional<DType> t = parse_dtype(name)) return *t;
  throw Error(node.loc, "unknown dtype " + quote(name) + " for " + what +
                            did_you_mean(name, dtype_names()) +
                            " (known dtypes: " + join(dtype_names()) + ")");
}

std::vector<int64_t> read_shape(const YamlNode& node, const std::string& tensor,
                                const DimList& dims, std::vector<std::string>& written) {
  std::string what = "the shape of '" + tensor + "'";
  expect_kind(node, YamlNode::Kind::Sequence, what);
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (const YamlNode& item : node.items) {
    int64_t size = 0;
    if (std::optional<int64_t> literal = as_int(item)) {
      if (*literal <= 0)
        throw Error(item.loc, "size " + item.text + " in " + what +
                                  " is not positive; expected a positive integer or a dim name");
      size = *literal;
    } else if (const int64_t* named = find_dim(dims, item)) {
      size = *named;
    } else if (item.is_scalar() && is_identifier(item.text)) {
      std::vector<std::string> names;
      for (const auto& [name, _] : dims) names.push_back(name);
      throw Error(item.loc, "unknown dim " + quote(item.text) + " in " + what +
                                did_you_mean(item.text, names) +
                                (names.empty() ? " (no dims are declared)"
                                               : " (declared dims: " + join(names) + ")"));
    } else {
      throw Error(item.loc, "expected a dim name or a positive integer in " + what + ", found " +
                                describe(item));
    }
    if (__builtin_mul_overflow(numel, size, &numel) || numel > kMaxNumel)
      throw Error(item.loc, "the element count of '" + tensor +
                                "' overflows int64 at this dim; expected at most 2^57 - 1 "
                                "elements");
    shape.push_back(size);
    written.push_back(item.text);
  }
  return shape;
}

Initializer read_init(const YamlNode& node, const std::string& tensor) {
  std::string what = "the init of '" + tensor + "'";
  std::string expected =
      "expected zeros, ones, normal, uniform, {normal: {mean: M, std: S}}, "
      "{uniform: {low: L, high: H}} or {constant: V}";
  auto finite = [&](const YamlNode& n, const std::string& name) {
    double v = read_float(n, name + " in " + what);
    if (!std::isfinite(v))
      throw Error(n.loc,
                  name + " in " + what + " is " + describe(n) + "; expected a finite number");
    return v;
  };
  Initializer init;
  std::string kind;
  const YamlNode* params = nullptr;
  if (node.is_scalar()) {
    kind = node.text;
  } else if (node.is_mapping() && node.entries.size() == 1) {
    kind = node.entries[0].key;
    params = &node.entries[0].value;
  } else {
    throw Error(node.loc, "unexpected " + describe(node) + " for " + what + "; " + expected);
  }
  if (kind == "zeros" && !params) {
    init.kind = Initializer::Kind::Zeros;
  } else if (kind == "ones" && !params) {
    init.kind = Initializer::Kind::Ones;
  } else if (kind == "normal") {
    init = {Initializer::Kind::Normal, 0.0, 1.0};
    if (params && !params->is_null()) {
      MapReader r(*params, "the normal initializer of '" + tensor + "'", {"mean", "std"});
      if (const YamlNode* n = r.find("mean")) init.a = finite(*n, "mean");
      if (const YamlNode* n = r.find("std")) init.b = finite(*n, "std");
      if (init.b < 0)
        throw Error(r.find("std")->loc, "std in " + what + " is negative; expected std >= 0");
    }
  } else if (kind == "uniform") {
    init = {Initializer::Kind::Uniform, 0.0, 1.0};
    if (params && !params->is_null()) {
      MapReader r(*params, "the uniform initializer of '" + tensor + "'", {"low", "high"});
      if (const YamlNode* n = r.find("low")) init.a = finite(*n, "low");
      if (const YamlNode* n = r.find("high")) init.b = finite(*n, "high");
      if (!(init.a < init.b))
        throw Error(params->loc, "low in " + what + " is not below high; expected low < high");
    }
  } else if (kind == "constant" && params) {
    init = {Initializer::Kind::Constant, finite(*params, "the value"), 0.0};
  } else {
    const SourceLoc& at = node.is_mapping() ? node.entries[0].key_loc : node.loc;
    throw Error(at, "unknown initializer " + quote(kind) + " for '" + tensor + "'" +
                        did_you_mean(kind, kInitNames) + "; " + expected);
  }
  return init;
}

namespace {

// The finite values `dtype` holds, [lo, hi]; IEEE types also take what rounds to their largest
// finite value.
bool dtype_holds(DType dtype, double v) {
  switch (dtype) {
    case DType::F32:
      return std::isfinite(f32_bits_to_double(round_to_f32_bits(v)));
    case DType::BF16:
      return std::isfinite(bf16_to_double(round_to_bf16(v)));
    case DType::F16:
      return std::isfinite(f16_to_double(round_to_f16(v)));
    case DType::F8E4M3:
      return std::abs(v) <= 448;
    case DType::F8E5M2:
      return std::isfinite(f8e5m2_to_double(round_to_f8e5m2(v)));
    case DType::FP4E2M1:
      return std::abs(v) <= 6;
    case DType::E8M0:
      return std::abs(v) <= 0x1p127;
    case DType::I32:
      return v >= -0x1p31 && v <= 0x1p31 - 1;
    case DType::I64:
      return v >= -0x1p63 && v < 0x1p63;
    case DType::U8:
      return v >= 0 && v <= 255;
    case DType::Bool:  // any number: rounded, nonzero is true
      return true;
  }
  return false;
}

}  // namespace

void check_init_range(const YamlNode& node, const Initializer& init, DType dtype,
                      const std::string& tensor) {
  auto refuse = [&](const std::string& what, double v) {
    std::ostringstream value;
    value << v;
    throw Error(node.loc, what + " " + value.str() + " in the init of '" + tensor +
                              "' is beyond the range of " + std::string(dtype_name(dtype)) +
                              "; expected a value the dtype can hold");
  };
  switch (init.kind) {
    case Initializer::Kind::Zeros:
    case Initializer::Kind::Ones:
      return;
    case Initializer::Kind::Constant:
      if (!dtype_holds(dtype, init.a)) refuse("the constant", init.a);
      return;
    case Initializer::Kind::Uniform:
      if (!dtype_holds(dtype, init.a)) refuse("low", init.a);
      if (!dtype_holds(dtype, init.b)) refuse("high", init.b);
      return;
    case Initializer::Kind::Normal:
      if (!dtype_holds(dtype, init.a)) refuse("mean", init.a);
      if (!dtype_holds(dtype, init.b)) refuse("std", init.b);
      return;
  }
}

}  // namespace tilerun::graph
