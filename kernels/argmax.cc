// argmax and argmin over one axis: the i32 index of the largest (smallest) element, ties to the
// lowest index, a NaN winning over every number (the first NaN's index, as NumPy), +0 and -0
// equal. Not differentiable: the index has no gradient, and the op passes none to its input.
//
// Kernels: x seen as [P, K, R] (outer, reduced extent, inner). When the axis is the last one
// (R = 1) one block per row folds it with three block reductions: the first NaN's index, the
// extreme value, the lowest index holding it. Otherwise one thread per output scans its K
// elements in order, keeping the first extreme. An index is exact, so the two kernel shapes give
// the same result whatever the order of their folds.
#include <cmath>
#include <limits>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kRowThreads = 128, kColThreads = 128;

// [P, K, R] around `axis`.
struct AxisSplit {
  int64_t outer = 1, extent = 1, inner = 1;
};

AxisSplit split_at(const std::vector<int64_t>& shape, int64_t axis) {
  return {product(shape, 0, axis), shape[axis], product(shape, axis + 1, shape.size())};
}

int64_t axis_of(const TensorType& x, const Attrs& attrs) {
  if (x.shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  return normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis", x, "x");
}

std::vector<TensorType> infer_arg(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const int64_t axis = axis_of(in[0], attrs);
  std::vector<int64_t> shape = in[0].shape;
  if (attr_bool(attrs, "keepdims"))
    shape[axis] = 1;
  else
    shape.erase(shape.begin() + axis);
  return {TensorType{DType::I32, shape}};
}

// Whether `v` replaces the running extreme `best`: strictly better (ties keep the lower index),
// or the first NaN.
bool ref_better(double v, double best, bool is_max) {
  if (std::isnan(best)) return false;
  if (std::isnan(v)) return true;
  return is_max ? v > best : v < best;
}

std::vector<RefTensor> ref_arg(const std::vector<RefTensor>& in, const Attrs& attrs, bool is_max) {
  const RefTensor& x = in[0];
  const int64_t axis = normalize_axis(attr_int(attrs, "axis"), x.shape.size(), "axis",
                                      TensorType{DType::F32, x.shape}, "x");
  const AxisSplit v = split_at(x.shape, axis);
  std::vector<int64_t> shape = x.shape;
  if (attr_bool(attrs, "keepdims"))
    shape[axis] = 1;
  else
    shape.erase(shape.begin() + axis);
  RefTensor y = ref_zeros(shape);
  for (int64_t p = 0; p < v.outer; ++p)
    for (int64_t r = 0; r < v.inner; ++r) {
      auto at = [&](int64_t k) { return x.data[(p * v.extent + k) * v.inner + r]; };
      int64_t best = 0;
      for (int64_t k = 1; k < v.extent; ++k)
        if (ref_better(at(k), at(best), is_max)) best = k;
      y.data[p * v.inner + r] = static_cast<double>(best);
    }
  return {y};
}

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

cc::Val is_nan(const cc::Val& v) { return v != v; }

// One block per row of [P, K] (the reduced axis last).
cc::Kernel build_arg_rows(DType dtype, bool is_max) {
  cc::KernelBuilder kb(std::string(is_max ? "argmax" : "argmin") + "_rows" + suffix(dtype));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Buf x = kb.input("x", dtype, {p, k});
  cc::Buf y = kb.output("y", DType::I32, {p});
  kb.body({p}, kRowThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val first_nan =
        s.reduce_min(k, [&](cc::Idx j) { return cc::select(is_nan(x(row, j)), j, k); });
    cc::Val extreme = is_max ? s.reduce_max(k, [&](cc::Idx j) { return x(row, j); })
                             : s.reduce_min(k, [&](cc::Idx j) { return x(row, j); });
    cc::Val first =
        s.reduce_min(k, [&](cc::Idx j) { return cc::select(x(row, j) == extreme, j, k); });
    s.parallel(1, [&](cc::Idx i) {
      y(row + i) = cc::to_i32(cc::select(first_nan < k, first_nan, first));
    });
  });
  return kb.build();
}

// One thread per output of [P, K, R]: its K elements in order, the first extreme kept.
cc::Kernel build_arg_cols(DType dtype, bool is_max) {
  cc::KernelBuilder kb(std::string(is_max ? "argmax" : "argmin") + "_cols" + suffix(dtype));
  cc::Dim n = kb.dim("N"), p = kb.dim("P"), k = kb.dim("K"), r = kb.dim("R");
  cc::Buf x = kb.input("x", dtype, {p, k, r});
  cc::Buf y = kb.output("y", DType::I32, {n});
  kb.body({cc::ceildiv(n, kColThreads)}, kColThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kColThreads;
    cc::Buf best = s.alloc_fragment("best", DType::F32, {kColThreads});
    cc::Buf where = s.alloc_fragment("where", DType::I32, {kColThreads});
    s.parallel(kColThreads, [&](cc::Idx t) {
      cc::Idx e = base + t;
      s.if_then(e < n, [&] {
        cc::Val row = s.let(e / r, "row"), col = s.let(e % r, "col");
        best(t) = x(row, 0, col);
        where(t) = cc::to_i32(cc::Val(0));
        s.serial(k - 1, [&](cc::Idx j) {
          cc::Val v = s.let(x(row, j + 1, col), "v");
          cc::Val b = s.let(best(t), "b");
          cc::Val better = !is_nan(b) && (is_nan(v) || (is_max ? v > b : v < b));
          s.if_then(better, [&] {
            best(t) = v;
            where(t) = cc::to_i32(j + 1);
          });
        });
        y(e) = where(t);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_arg(std::shared_ptr<KernelCache> cache, bool is_max) {
  return [cache, is_max](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                         const Attrs& attrs) {
    DType dt = in[0].dtype;
    const AxisSplit v = split_at(in[0].shape, axis_of(in[0], attrs));
    const std::string name = is_max ? "argmax" : "argmin";
    KernelCall call;
    if (v.inner == 1) {
      call = {.kernel = cache->get(kernel_key(name + "_rows", dt),
                                   [&] { return build_arg_rows(dt, is_max); }),
              .buffers = {input_slot(0), output_slot(0)},
              .dims = {v.outer, v.extent}};
    } else {
      call = {.kernel = cache->get(kernel_key(name + "_cols", dt),
                                   [&] { return build_arg_cols(dt, is_max); }),
              .buffers = {input_slot(0), output_slot(0)},
              .dims = {v.outer * v.inner, v.outer, v.extent, v.inner}};
    }
    return OpExpansion{.calls = {call}};
  };
}

const std::vector<AttrSpec> kArgAttrs = {
    int_attr("axis", -1, "the axis searched; negative counts from the end"),
    {.name = "keepdims",
     .kind = AttrKind::Bool,
     .default_value = AttrValue{false},
     .doc = "keep the searched axis as size 1"}};

// Kernel cases: the last axis (row kernel) and inner ones (column kernel), odd sizes, values
// from a few integers so that ties are common.
std::vector<OpTestCase> arg_cases() {
  auto tied = [](std::vector<int64_t> shape, Attrs attrs = {}) {
    return OpTestCase{
        .shapes = {std::move(shape)}, .attrs = std::move(attrs), .lo = -3, .hi = 3, .step = 0.5};
  };
  return {tied({1}),
          tied({7, 33}),
          tied({3, 1000}),
          {.shapes = {{2, 777}}},
          tied({5, 130, 3}, {{"axis", int64_t{1}}}),
          tied({33, 7}, {{"axis", int64_t{0}}, {"keepdims", true}}),
          tied({2, 3, 4}, {{"axis", int64_t{-1}}, {"keepdims", true}}),
          tied({4, 1}, {{"axis", int64_t{1}}})};
}

}  // namespace

void register_argmax(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  for (bool is_max : {true, false}) {
    const std::string name = is_max ? "argmax" : "argmin";
    const std::string most = is_max ? "largest" : "smallest";
    std::vector<OpExample> examples = {
        // Ties go to the lowest index; -0 and +0 are equal.
        {.inputs = {{{2, 4}, {1, 3, 3, -1, -0.0, 0.0, 0.0, -0.0}}},
         .outputs = {{{2}, {is_max ? 1.0 : 3.0, 0.0}}}},
        // The first NaN wins over every number.
        {.inputs = {{{5}, {1, kNaN(), 7, kNaN(), -kInf()}}}, .outputs = {{{}, {1.0}}}},
        // Over axis 0, kept as size 1.
        {.inputs = {{{3, 2}, {1, 6, 5, 2, 5, 2}}},
         .attrs = {{"axis", int64_t{0}}, {"keepdims", true}},
         .outputs = {{{1, 2}, {is_max ? 1.0 : 0.0, is_max ? 0.0 : 1.0}}}}};
    registry.add({.name = name,
                  .doc = "y = the i32 index of the " + most +
                         " element along axis (ties: the lowest index; a NaN wins over every "
                         "number, the first NaN; +0 = -0); no gradient",
                  .inputs = {"x"},
                  .outputs = {"y"},
                  .attrs = kArgAttrs,
                  .output_dtypes = {{0, DType::I32}},
                  .infer = infer_arg,
                  .reference = [is_max](const std::vector<RefTensor>& in,
                                        const Attrs& attrs) { return ref_arg(in, attrs, is_max); },
                  .expand = expand_arg(cache, is_max),
                  .tests = {.kernel = arg_cases(), .examples = examples}});
  }
}

}  // namespace tilerun::kernels
