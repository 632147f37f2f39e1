// Attribute helpers of the shape ops (views.cc, layout.cc): integer lists, axes counted from
// either end, shapes as text. Each check throws ShapeError naming the attribute, the input and
// what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace tilerun::kernels {

inline std::vector<int64_t> attr_ints(const Attrs& attrs, const std::string& name) {
  return std::get<std::vector<int64_t>>(attrs.at(name));
}

inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// `axis` of a rank-`rank` tensor, negative counting from the end (-1 the last), as 0..rank-1.
inline int64_t normalize_axis(int64_t axis, size_t rank, const std::string& attr,
                              const TensorType& t, const std::string& slot) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw ShapeError("attribute '" + attr + "' is " + std::to_string(axis) +
                     ", expected an axis of input '" + slot + "' " + to_string(t) + " in [" +
                     std::to_string(-r) + ", " + std::to_string(r) + ")");
  return axis < 0 ? axis + r : axis;
}

// The product of shape[from, to).
inline int64_t product(const std::vector<int64_t>& shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Input 'x' seen as [outer, extent, inner] around the axis its op's attribute "axis" names (the
// lines of cumsum, any and all; index_select's slices).
struct AxisLines {
  int64_t axis = 0, outer = 1, extent = 1, inner = 1;
};

inline AxisLines axis_lines(const TensorType& x, const Attrs& attrs) {
  if (x.shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  const int64_t a = normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", x, "x");
  return {a, product(x.shape, 0, a), x.shape[a], product(x.shape, a + 1, x.shape.size())};
}

// Views must start 16-byte aligned: kernels assume it of every buffer (vector accesses).
inline bool aligned_view(DType dtype, int64_t element_offset) {
  return dtype_bytes(dtype, element_offset) % 16 == 0;
}

// "x0", "x1", ...: the slot names of an op with a variable number of inputs or outputs.
inline std::vector<std::string> numbered(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// An integer attribute with an optional default.
inline AttrSpec int_attr(std::string name, std::optional<int64_t> def, std::string doc,
                         bool positive = false) {
  return {.name = std::move(name),
          .kind = AttrKind::Int,
          .default_value = def ? std::optional<AttrValue>(*def) : std::nullopt,
          .doc = std::move(doc),
          .positive = positive};
}

}  // namespace tilerun::kernels
