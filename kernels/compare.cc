// Comparisons producing masks (lt, le, gt, ge, eq, ne), where(mask, a, b), and where's backward
// op where_grad, all over broadcast operands (kernels/broadcast.h), one broadcast map kernel
// each. There are no boolean tensors yet: a mask is 1 (true) or 0 (false) in the operands' float
// dtype, and `where` takes any nonzero value (NaN included) as true. Comparisons follow IEEE: any
// comparison with NaN is false except `ne`, and -0 equals +0.
#include <cmath>

#include "kernels/broadcast.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<TensorType> infer_compare(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, {"a", "b"});
}
std::vector<TensorType> infer_where(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, {"mask", "a", "b"});
}
std::vector<TensorType> infer_where_grad(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, {"mask", "dy"});
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

cc::Val mask_of(const cc::Val& cond) { return cc::select(cond, cc::Val(1.0f), cc::Val(0.0f)); }

const MapOp kWhere{"where", 3, {}, [](cc::Scope&, const auto& v, const auto&) {
                     return cc::select(v[0] != 0.0f, v[1], v[2]);
                   }};
const MapOp kWhereGradTrue{"where_grad_true", 2, {}, [](cc::Scope&, const auto& v, const auto&) {
                             return cc::select(v[0] != 0.0f, v[1], cc::Val(0.0f));
                           }};
const MapOp kWhereGradFalse{"where_grad_false", 2, {}, [](cc::Scope&, const auto& v, const auto&) {
                              return cc::select(v[0] != 0.0f, cc::Val(0.0f), v[1]);
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
    // where's condition a 0/1 mask, so that both branches are taken.
    cases.push_back(
        {.shapes = shapes, .masks = arity == 3 ? std::vector<int>{0} : std::vector<int>{}});
  }
  return cases;
}

// The cases plus one of 0/1 operands, where ties are common.
std::vector<OpTestCase> with_ties(std::vector<OpTestCase> cases) {
  cases.push_back({.shapes = {{7, 33}, {33}}, .masks = {0, 1}});
  return cases;
}

}  // namespace

void register_compare(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const int64_t n = static_cast<int64_t>(kExampleA.size());
  for (const Comparison& c : kComparisons) {
    auto ref = c.ref;
    auto kernel = c.kernel;
    registry.add(
        {.name = c.name,
         .doc = std::string("mask = 1 where a ") + c.symbol +
                " b, else 0, in the operands' dtype (IEEE: NaN compares unequal to everything; "
                "NumPy broadcasting; zero gradient)",
         .inputs = {"a", "b"},
         .outputs = {"mask"},
         .infer = infer_compare,
         .reference =
             [ref](const std::vector<RefTensor>& in, const Attrs&) {
               return ref_broadcast(in,
                                    [ref](const double* v) { return ref(v[0], v[1]) ? 1.0 : 0.0; });
             },
         .gradient = grad_compare,
         .expand =
             expand_broadcast_map(cache, MapOp{c.name,
                                               2,
                                               {},
                                               [kernel](cc::Scope&, const auto& v, const auto&) {
                                                 return mask_of(kernel(v[0], v[1]));
                                               }}),
         .tests = {.kernel = with_ties(broadcast_cases(2)),
                   .gradient = {{.shapes = {{4, 3}, {3}}}},
                   .examples = {{.inputs = {{{n}, kExampleA}, {{n}, kExampleB}},
                                 .outputs = {{{n}, c.example}}}}}});
  }
  const double nan = kNaN();
  registry.add(
      {.name = "where",
       .doc = "out = a where mask is nonzero (NaN counts as true), else b: masks are 0/1 in the "
              "float dtype until boolean tensors exist; NumPy broadcasting over all three; "
              "gradient to a and b only",
       .inputs = {"mask", "a", "b"},
       .outputs = {"out"},
       .infer = infer_where,
       .reference = ref_where,
       .gradient = grad_where,
       .expand = expand_broadcast_map(cache, kWhere),
       .tests = {.kernel = broadcast_cases(3),
                 .gradient = {{.shapes = {{4, 3}, {4, 3}, {4, 3}}, .masks = {0}},
                              {.shapes = {{4, 1}, {3}, {4, 3}}, .masks = {0}}},
                 .examples = {
                     {.inputs = {{{5}, {1, 0, -0.0, nan, -2}}, {{5}, {1, 2, 3, 4, 5}}, {{1}, {-1}}},
                      .outputs = {{{5}, {1, -1, -1, 4, 5}}}}}}});
  registry.add(
      {.name = "where_grad",
       .doc = "out = dy where (mask != 0) == branch, else 0 (the backward op of where, "
              "minimum and maximum; broadcasting)",
       .inputs = {"mask", "dy"},
       .outputs = {"out"},
       .attrs = {{.name = "branch",
                  .kind = AttrKind::Bool,
                  .doc = "true: dy where the mask is nonzero; false: where it is zero"}},
       .infer = infer_where_grad,
       .reference = ref_where_grad,
       .expand = expand_where_grad(cache),
       .tests = {
           .kernel = {{.shapes = {{33, 130}, {33, 130}}, .attrs = {{"branch", true}}, .masks = {0}},
                      {.shapes = {{7, 1}, {7, 5}}, .attrs = {{"branch", false}}, .masks = {0}}},
           .examples = {{.inputs = {{{3}, {1, 0, nan}}, {{3}, {5, 6, 7}}},
                         .attrs = {{"branch", true}},
                         .outputs = {{{3}, {5, 0, 7}}}},
                        {.inputs = {{{3}, {1, 0, nan}}, {{3}, {5, 6, 7}}},
                         .attrs = {{"branch", false}},
                         .outputs = {{{3}, {0, 6, 0}}}}}}});
}

}  // namespace tilerun::kernels
