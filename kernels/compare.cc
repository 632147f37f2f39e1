// Boolean masks: comparisons (lt, le, gt, ge, eq, ne) of floats, i32 or bools giving bool,
// the logical ops over bools (logical_and, logical_or, logical_xor, logical_not), where(mask, a,
// b) and where's backward op where_grad, all over broadcast operands (kernels/broadcast.h), one
// broadcast map kernel each (each operand read in its own dtype); and any / all along one axis
// (x seen as [P, K, R], a thread per (p, r) folding its K bools in order: exact). A bool is one
// byte, 0 or 1 as written; a nonzero byte reads as true. Comparisons follow IEEE: any comparison
// with NaN is false except `ne`, and -0 equals +0; false < true. Masks carry no gradient (bool is
// not differentiable); `cast` turns one into 0/1 floats where arithmetic needs it.
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "kernels/broadcast.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/shape_attrs.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

const std::vector<DType> kCompareTypes = {DType::F32, DType::BF16, DType::F16, DType::I32,
                                          DType::Bool};

void expect_bool(const TensorType& t, const std::string& slot) {
  if (t.dtype != DType::Bool)
    throw ShapeError("input '" + slot + "' is " + to_string(t) +
                     ", expected bool (a comparison's mask; cast converts with to: bool)");
}

// Operands of one dtype among `allowed` (named in the message); the output bool.
std::vector<TensorType> infer_bool_map(const std::vector<TensorType>& in,
                                       const std::vector<std::string>& slots,
                                       const std::vector<DType>& allowed,
                                       const std::string& names) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::find(allowed.begin(), allowed.end(), in[i].dtype) == allowed.end())
      throw ShapeError("input '" + slots[i] + "' is " + to_string(in[i]) + ", expected " + names);
    if (in[i].dtype != in[0].dtype)
      throw ShapeError("input '" + slots[i] + "' is " + to_string(in[i]) + ", expected dtype " +
                       std::string(dtype_name(in[0].dtype)) + " like '" + slots[0] + "'");
  }
  return {{DType::Bool, broadcast_shape(in, slots)}};
}

std::vector<TensorType> infer_compare(const std::vector<TensorType>& in, const Attrs&) {
  return infer_bool_map(in, {"a", "b"}, kCompareTypes, "f32, bf16, f16, i32 or bool");
}
// where(mask, a, b): a bool mask, a and b floats of one dtype (the output's).
std::vector<TensorType> infer_where(const std::vector<TensorType>& in, const Attrs&) {
  expect_bool(in[0], "mask");
  std::vector<TensorType> out = infer_broadcast({in[1], in[2]}, {"a", "b"});
  out[0].shape = broadcast_shape(in, {"mask", "a", "b"});
  return out;
}
std::vector<TensorType> infer_where_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_bool(in[0], "mask");
  std::vector<TensorType> out = infer_broadcast({in[1]}, {"dy"});
  out[0].shape = broadcast_shape(in, {"mask", "dy"});
  return out;
}

// A comparison's gradient is zero everywhere it exists: "zeros" for every input that needs one
// (no kernel, no contribution to the input's gradient).
std::vector<GradOp> grad_compare(const std::vector<TensorType>&, const Attrs&,
                                 const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  for (int i = 0; i < 2; ++i)
    if (needs[i]) ops.push_back({"zeros", {x_name(i)}, {dx_name(i)}, {}});
  return ops;
}

// d where(m, a, b) = dy where m is true (to a), dy where it is false (to b); none to the mask.
std::vector<GradOp> grad_where(const std::vector<TensorType>& in, const Attrs&,
                               const std::vector<bool>& needs) {
  std::vector<int64_t> out = broadcast_shape(in, {"mask", "a", "b"});
  std::vector<GradOp> ops;
  if (needs[0]) ops.push_back({"zeros", {"x0"}, {"dx0"}, {}});
  for (int i = 1; i < 3; ++i) {
    if (!needs[i]) continue;
    std::string t = "d" + std::to_string(i);
    ops.push_back({"where_grad", {"x0", "dy0"}, {t}, {{"branch", i == 1}}});
    ops.push_back(sum_to_shape(t, dx_name(i), in[i].shape, out));
  }
  return ops;
}

std::vector<RefTensor> ref_where(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return v[0] != 0 ? v[1] : v[2]; });
}

std::vector<RefTensor> ref_where_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  bool branch = attr_bool(attrs, "branch");
  return ref_broadcast(in,
                       [branch](const double* v) { return (v[0] != 0) == branch ? v[1] : 0.0; });
}

// A condition as a bool output's value (an i32 0/1, stored as one byte).
cc::Val mask_of(const cc::Val& cond) {
  return cc::select(cond, cc::to_i32(cc::Val(1)), cc::to_i32(cc::Val(0)));
}

// A bool operand (an i32 0 or 1 once loaded) as a condition.
cc::Val is_true(const cc::Val& mask) { return mask != cc::to_i32(cc::Val(0)); }

const MapOp kWhere{"where", 3, {}, [](cc::Scope&, const auto& v, const auto&) {
                     return cc::select(is_true(v[0]), v[1], v[2]);
                   }};
const MapOp kWhereGradTrue{"where_grad_true", 2, {}, [](cc::Scope&, const auto& v, const auto&) {
                             return cc::select(is_true(v[0]), v[1], cc::Val(0.0f));
                           }};
const MapOp kWhereGradFalse{"where_grad_false", 2, {}, [](cc::Scope&, const auto& v, const auto&) {
                              return cc::select(is_true(v[0]), cc::Val(0.0f), v[1]);
                            }};

ExpandFn expand_where_grad(std::shared_ptr<KernelCache> cache) {
  ExpandFn on_true = expand_broadcast_map(cache, kWhereGradTrue);
  ExpandFn on_false = expand_broadcast_map(cache, kWhereGradFalse);
  return [on_true, on_false](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                             const Attrs& attrs) {
    return attr_bool(attrs, "branch") ? on_true(in, out, attrs) : on_false(in, out, attrs);
  };
}

struct Comparison {
  const char* name;
  const char* symbol;
  bool (*ref)(double, double);
  cc::Val (*kernel)(const cc::Val&, const cc::Val&);
  std::vector<double> example;  // over kExampleA, kExampleB
};

// a, b pairs: less, equal, greater, -0 against +0, NaN against 1, 1 against NaN, inf, -inf.
const std::vector<double> kExampleA = {1, 2, 3, -0.0, kNaN(), 1, kInf(), -kInf()};
const std::vector<double> kExampleB = {2, 2, 2, 0.0, 1, kNaN(), kInf(), 0};

const std::vector<Comparison> kComparisons = {
    {"lt",
     "<",
     [](double a, double b) { return a < b; },
     [](const cc::Val& a, const cc::Val& b) { return a < b; },
     {1, 0, 0, 0, 0, 0, 0, 1}},
    {"le",
     "<=",
     [](double a, double b) { return a <= b; },
     [](const cc::Val& a, const cc::Val& b) { return a <= b; },
     {1, 1, 0, 1, 0, 0, 1, 1}},
    {"gt",
     ">",
     [](double a, double b) { return a > b; },
     [](const cc::Val& a, const cc::Val& b) { return a > b; },
     {0, 0, 1, 0, 0, 0, 0, 0}},
    {"ge",
     ">=",
     [](double a, double b) { return a >= b; },
     [](const cc::Val& a, const cc::Val& b) { return a >= b; },
     {0, 1, 1, 1, 0, 0, 1, 0}},
    {"eq",
     "==",
     [](double a, double b) { return a == b; },
     [](const cc::Val& a, const cc::Val& b) { return a == b; },
     {0, 1, 0, 1, 0, 0, 1, 0}},
    {"ne",
     "!=",
     [](double a, double b) { return a != b; },
     [](const cc::Val& a, const cc::Val& b) { return a != b; },
     {1, 0, 1, 0, 1, 1, 0, 1}},
};

std::vector<OpTestCase> broadcast_cases(int arity) {
  std::vector<OpTestCase> cases;
  for (std::vector<std::vector<int64_t>> shapes :
       {std::vector<std::vector<int64_t>>{{33, 130}, {33, 130}, {33, 130}},
        {{7, 1, 5}, {1, 3, 1}, {3, 5}},
        {{1}, {3, 1, 7}, {7}},
        {{5, 7}, {}, {5, 1}}}) {
    shapes.resize(arity);
    // where's condition a bool (drawn as integers in [0, 2)), so that both branches are taken.
    cases.push_back({.shapes = shapes, .int_lo = 0, .int_hi = 2});
  }
  return cases;
}

// The cases plus one of 0/1 operands, where ties are common.
std::vector<OpTestCase> with_ties(std::vector<OpTestCase> cases) {
  cases.push_back({.shapes = {{7, 33}, {33}}, .masks = {0, 1}});
  return cases;
}

// any / all along `axis`: x bool [.., K, ..] -> bool, the axis dropped (kept as 1 with keepdims).
std::vector<TensorType> infer_any_all(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_bool(in[0], "x");
  const AxisLines l = axis_lines(in[0], attrs);
  std::vector<int64_t> shape = in[0].shape;
  if (attr_bool(attrs, "keepdims"))
    shape[l.axis] = 1;
  else
    shape.erase(shape.begin() + l.axis);
  return {{DType::Bool, shape}};
}

std::vector<RefTensor> ref_any_all(const std::vector<RefTensor>& in, const Attrs& attrs, bool all) {
  const AxisLines l = axis_lines({DType::Bool, in[0].shape}, attrs);
  std::vector<int64_t> shape = infer_any_all({{DType::Bool, in[0].shape}}, attrs)[0].shape;
  RefTensor y = ref_zeros(shape);
  for (int64_t p = 0; p < l.outer; ++p)
    for (int64_t r = 0; r < l.inner; ++r) {
      bool acc = all;
      for (int64_t k = 0; k < l.extent; ++k) {
        const bool v = in[0].data[(p * l.extent + k) * l.inner + r] != 0;
        acc = all ? acc && v : acc || v;
      }
      y.data[p * l.inner + r] = acc ? 1 : 0;
    }
  return {y};
}

constexpr int kLineThreads = 128;

cc::Kernel build_any_all(bool all) {
  cc::KernelBuilder kb(all ? "all_bool" : "any_bool");
  cc::Dim n = kb.dim("N"), p = kb.dim("P"), k = kb.dim("K"), r = kb.dim("R");
  cc::Buf x = kb.input("x", DType::Bool, {p, k, r});
  cc::Buf y = kb.output("y", DType::Bool, {p, r});
  kb.body({cc::ceildiv(n, cc::Val(int64_t{kLineThreads}))}, kLineThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kLineThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::I32, {kLineThreads});
    s.parallel(kLineThreads, [&](cc::Idx t) {
      cc::Idx e = base + t;
      s.if_then(e < n, [&] {
        cc::Val line = s.let(e / r, "line"), col = s.let(e % r, "col");
        acc(t) = cc::to_i32(cc::Val(all ? 1 : 0));
        s.serial(k, [&](cc::Idx j) {
          acc(t) = all ? acc(t) & x(line, j, col) : acc(t) | x(line, j, col);
        });
        y(line, col) = acc(t);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_any_all(std::shared_ptr<KernelCache> cache, bool all) {
  return [cache, all](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                      const Attrs& attrs) {
    const AxisLines l = axis_lines(in[0], attrs);
    KernelCall call{
        .kernel = cache->get(all ? "all_bool" : "any_bool", [&] { return build_any_all(all); }),
        .buffers = {input_slot(0), output_slot(0)},
        .dims = {l.outer * l.inner, l.outer, l.extent, l.inner},
        .scalars = {}};
    return OpExpansion{.scratch = {}, .calls = {call}};
  };
}

}  // namespace

void register_compare(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const int64_t n = static_cast<int64_t>(kExampleA.size());
  for (const Comparison& c : kComparisons) {
    auto ref = c.ref;
    auto kernel = c.kernel;
    registry.add({.name = c.name,
                  .doc = std::string("mask (bool) = a ") + c.symbol +
                         " b (IEEE: NaN compares unequal to everything; false < true; NumPy "
                         "broadcasting; no gradient)",
                  .inputs = {"a", "b"},
                  .outputs = {"mask"},
                  .dtypes = kCompareTypes,
                  .output_dtypes = {{0, DType::Bool}},
                  .infer = infer_compare,
                  .reference =
                      [ref](const std::vector<RefTensor>& in, const Attrs&) {
                        return ref_broadcast(
                            in, [ref](const double* v) { return ref(v[0], v[1]) ? 1.0 : 0.0; });
                      },
                  .gradient = grad_compare,
                  .expand = expand_broadcast_map(
                      cache, MapOp{c.name,
                                   2,
                                   {},
                                   [kernel](cc::Scope&, const auto& v, const auto&) {
                                     return mask_of(kernel(v[0], v[1]));
                                   }}),
                  .tests = {.kernel = with_ties(broadcast_cases(2)),
                            .examples = {{.inputs = {{{n}, kExampleA}, {{n}, kExampleB}},
                                          .outputs = {{{n}, c.example}}}}}});
  }
  const double nan = kNaN();
  registry.add(
      {.name = "where",
       .doc = "out = a where mask (bool) is true, else b; NumPy broadcasting over all three; "
              "gradient to a and b only",
       .inputs = {"mask", "a", "b"},
       .outputs = {"out"},
       .input_dtypes = {{0, DType::Bool}},
       .infer = infer_where,
       .reference = ref_where,
       .gradient = grad_where,
       .expand = expand_broadcast_map(cache, kWhere),
       .tests = {
           .kernel = broadcast_cases(3),
           .gradient = {{.shapes = {{4, 3}, {4, 3}, {4, 3}}, .int_lo = 0, .int_hi = 2},
                        {.shapes = {{4, 1}, {3}, {4, 3}}, .int_lo = 0, .int_hi = 2}},
           .examples = {{.inputs = {{{5}, {1, 0, 0, 1, 1}}, {{5}, {1, 2, nan, 4, 5}}, {{1}, {-1}}},
                         .outputs = {{{5}, {1, -1, -1, 4, 5}}}}}}});
  registry.add({.name = "where_grad",
                .doc = "out = dy where mask (bool) == branch, else 0 (the backward op of where, "
                       "minimum and maximum; broadcasting)",
                .inputs = {"mask", "dy"},
                .outputs = {"out"},
                .attrs = {{.name = "branch",
                           .kind = AttrKind::Bool,
                           .doc = "true: dy where the mask is true; false: where it is false"}},
                .input_dtypes = {{0, DType::Bool}},
                .infer = infer_where_grad,
                .reference = ref_where_grad,
                .expand = expand_where_grad(cache),
                .tests = {.kernel = {{.shapes = {{33, 130}, {33, 130}},
                                      .attrs = {{"branch", true}},
                                      .int_lo = 0,
                                      .int_hi = 2},
                                     {.shapes = {{7, 1}, {7, 5}},
                                      .attrs = {{"branch", false}},
                                      .int_lo = 0,
                                      .int_hi = 2}},
                          .examples = {{.inputs = {{{3}, {1, 0, 1}}, {{3}, {5, 6, 7}}},
                                        .attrs = {{"branch", true}},
                                        .outputs = {{{3}, {5, 0, 7}}}},
                                       {.inputs = {{{3}, {1, 0, 1}}, {{3}, {5, 6, 7}}},
                                        .attrs = {{"branch", false}},
                                        .outputs = {{{3}, {0, 6, 0}}}}}}});
  // The logical ops over bools.
  struct Logical {
    const char* name;
    const char* doc;
    int arity;
    double (*ref)(const double*);
    cc::Val (*kernel)(const cc::Val*);  // over 0/1 i32 operands
    std::vector<double> example;        // over a = {0, 0, 1, 1}, b = {0, 1, 0, 1}
  };
  const std::vector<Logical> logicals = {
      {"logical_and",
       "out = a and b",
       2,
       [](const double* v) { return v[0] != 0 && v[1] != 0 ? 1.0 : 0.0; },
       [](const cc::Val* v) { return v[0] & v[1]; },
       {0, 0, 0, 1}},
      {"logical_or",
       "out = a or b",
       2,
       [](const double* v) { return v[0] != 0 || v[1] != 0 ? 1.0 : 0.0; },
       [](const cc::Val* v) { return v[0] | v[1]; },
       {0, 1, 1, 1}},
      {"logical_xor",
       "out = a xor b (true where they differ)",
       2,
       [](const double* v) { return (v[0] != 0) != (v[1] != 0) ? 1.0 : 0.0; },
       [](const cc::Val* v) { return v[0] ^ v[1]; },
       {0, 1, 1, 0}},
      {"logical_not",
       "out = not a",
       1,
       [](const double* v) { return v[0] != 0 ? 0.0 : 1.0; },
       [](const cc::Val* v) { return v[0] ^ cc::to_i32(cc::Val(1)); },
       {1, 1, 0, 0}},
  };
  for (const Logical& l : logicals) {
    auto ref = l.ref;
    auto kernel = l.kernel;
    const std::vector<std::string> slots =
        l.arity == 2 ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{"a"};
    std::vector<OpTestCase> cases;
    for (OpTestCase c : with_ties(broadcast_cases(2))) {
      c.shapes.resize(l.arity);
      c.masks = {};  // bool slots draw integers in [0, 2)
      c.int_lo = 0;
      c.int_hi = 2;
      cases.push_back(c);
    }
    std::map<int, DType> bools;
    for (int i = 0; i < l.arity; ++i) bools[i] = DType::Bool;
    std::vector<RefTensor> example_in = {{{4}, {0, 0, 1, 1}}, {{4}, {0, 1, 0, 1}}};
    example_in.resize(l.arity);
    registry.add({.name = l.name,
                  .doc = std::string(l.doc) + " over bools (NumPy broadcasting; no gradient)",
                  .inputs = slots,
                  .outputs = {"out"},
                  .dtypes = {DType::Bool},
                  .input_dtypes = bools,
                  .output_dtypes = {{0, DType::Bool}},
                  .infer =
                      [slots](const std::vector<TensorType>& in, const Attrs&) {
                        return infer_bool_map(in, slots, {DType::Bool}, "bool");
                      },
                  .reference = [ref](const std::vector<RefTensor>& in,
                                     const Attrs&) { return ref_broadcast(in, ref); },
                  .expand = expand_broadcast_map(
                      cache, MapOp{l.name,
                                   l.arity,
                                   {},
                                   [kernel](cc::Scope&, const auto& v, const auto&) {
                                     return kernel(v.data());
                                   }}),
                  .tests = {.kernel = cases,
                            .examples = {{.inputs = example_in, .outputs = {{{4}, l.example}}}}}});
  }
  // any / all along one axis.
  for (bool all : {false, true}) {
    std::vector<OpTestCase> cases;
    for (auto [shape, axis] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
             {{7, 33}, -1}, {{5, 3, 4}, 1}, {{2, 300}, 0}, {{6}, 0}})
      cases.push_back({.shapes = {shape}, .attrs = {{"axis", axis}}, .int_lo = 0, .int_hi = 2});
    // Lines of 3: all true (or all false) one time in 8, so both answers occur.
    cases.push_back({.shapes = {{40, 3}},
                     .attrs = {{"axis", int64_t{1}}, {"keepdims", true}},
                     .int_lo = 0,
                     .int_hi = 2});
    registry.add({.name = all ? "all" : "any",
                  .doc = std::string(all ? "y = true where every" : "y = true where any") +
                         " element of bool x along axis is true (folded in order; no gradient)",
                  .inputs = {"x"},
                  .outputs = {"y"},
                  .attrs = {int_attr("axis", -1, "the axis folded; negative counts from the end"),
                            {.name = "keepdims",
                             .kind = AttrKind::Bool,
                             .default_value = AttrValue{false},
                             .doc = "keep the axis with extent 1"}},
                  .dtypes = {DType::Bool},
                  .input_dtypes = {{0, DType::Bool}},
                  .output_dtypes = {{0, DType::Bool}},
                  .infer = infer_any_all,
                  .reference = [all](const std::vector<RefTensor>& in,
                                     const Attrs& attrs) { return ref_any_all(in, attrs, all); },
                  .expand = expand_any_all(cache, all),
                  .tests = {.kernel = cases,
                            .examples = {{.inputs = {{{2, 3}, {0, 1, 0, 1, 1, 1}}},
                                          .outputs = {{{2},
                                                       all ? std::vector<double>{0, 1}
                                                           : std::vector<double>{1, 1}}}}}}});
  }
}

}  // namespace tilerun::kernels
