// sum_to: the sum of x over the axes along which `shape` is broadcast to x's shape (NumPy rules)
// — the gradient of a broadcast operand. Strict and batch-invariant: one thread owns each output
// element and adds its inputs one by one in increasing index order, starting from -0 (the
// identity of +, so a sum of -0s stays -0); the order depends on the shape only, no atomics.
// The kernel runs over x's coalesced axes (neighbours both kept or both summed are merged), so
// one kernel serves every shape of one kept/summed pattern.
#include "kernels/broadcast.h"
#include "kernels/expand_util.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 256;

std::vector<int64_t> target_shape(const Attrs& attrs) {
  return std::get<std::vector<int64_t>>(attrs.at("shape"));
}

// x's axes as coalesced runs: extents, and whether each run is summed (else kept).
struct Runs {
  std::vector<int64_t> extents;
  std::vector<bool> summed;
};

Runs coalesce(const std::vector<int64_t>& x, const std::vector<int64_t>& target) {
  std::vector<int64_t> t(x.size() - target.size(), 1);
  t.insert(t.end(), target.begin(), target.end());
  Runs r;
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1) continue;
    bool summed = t[d] == 1;
    if (!r.extents.empty() && r.summed.back() == summed) {
      r.extents.back() *= x[d];
    } else {
      r.extents.push_back(x[d]);
      r.summed.push_back(summed);
    }
  }
  if (r.extents.empty()) r.extents = {1}, r.summed = {false};
  return r;
}

std::string pattern(const Runs& r) {
  std::string s;
  for (bool b : r.summed) s += b ? 's' : 'k';
  return s;
}

std::vector<TensorType> infer_sum_to(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  std::vector<int64_t> shape = target_shape(attrs);
  for (int64_t d : shape)
    if (d < 1)
      throw ShapeError("attribute 'shape' has extent " + std::to_string(d) + ", expected >= 1");
  if (!broadcasts_to(shape, in[0].shape))
    throw ShapeError("attribute 'shape' " + to_string(TensorType{in[0].dtype, shape}) +
                     " does not broadcast to input 'x' " + to_string(in[0]) +
                     " (expected x's trailing extents or 1, NumPy rules)");
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_sum_to(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor& x = in[0];
  std::vector<int64_t> target = target_shape(attrs);
  RefTensor out = ref_zeros(target);
  for (double& v : out.data) v = -0.0;
  const size_t rank = x.shape.size();
  std::vector<int64_t> t(rank - target.size(), 1);
  t.insert(t.end(), target.begin(), target.end());
  // Each x element adds into the output element at its coordinates with summed axes at 0; x is
  // walked in index order, so each output's terms come in increasing index order.
  std::vector<int64_t> coord(rank, 0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t o = 0;
    for (size_t d = 0; d < rank; ++d) o = o * t[d] + (t[d] == 1 ? 0 : coord[d]);
    out.data[o] += x.data[e];
    for (size_t d = rank; d-- > 0;) {
      if (++coord[d] < x.shape[d]) break;
      coord[d] = 0;
    }
  }
  return {out};
}

// out[o] = sum over the summed coordinates j (in index order) of x[kept(o), summed(j)].
// Parameters: x, out; D0..D(r-1).
cc::Kernel build_sum_to(const Runs& r, DType dtype) {
  cc::KernelBuilder kb("sum_to_" + pattern(r) + "_" + std::string(dtype_name(dtype)));
  const size_t rank = r.extents.size();
  std::vector<cc::Dim> dims;
  for (size_t d = 0; d < rank; ++d) dims.push_back(kb.dim("D" + std::to_string(d)));
  cc::Buf x = kb.input("x", dtype, std::vector<cc::Val>(dims.begin(), dims.end()));
  cc::Val kept = cc::Val(1), summed = cc::Val(1);
  for (size_t d = 0; d < rank; ++d) {
    if (r.summed[d])
      summed = summed * dims[d];
    else
      kept = kept * dims[d];
  }
  cc::Buf out = kb.output("out", dtype, {kept});
  // The coordinates of flat index `flat` over the axes of one class (last fastest), into coord.
  auto split = [&](cc::Scope& s, const cc::Val& flat, bool cls, std::vector<cc::Val>& coord) {
    cc::Val stride = cc::Val(1);
    for (size_t d = rank; d-- > 0;) {
      if (r.summed[d] != cls) continue;
      coord[d] = s.let((flat / stride) % dims[d], "c" + std::to_string(d));
      stride = stride * dims[d];
    }
  };
  kb.body({cc::ceildiv(kept, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx o = s.block_idx(0) * kThreads + i;
      s.if_then(o < kept, [&] {
        std::vector<cc::Val> coord(rank);
        split(s, o, false, coord);
        acc(i) = -0.0f;
        s.serial(summed, [&](cc::Idx j) {
          split(s, j, true, coord);
          acc(i) = acc(i) + x.at(coord);
        });
        out(o) = acc(i);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_sum_to(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
        DType dtype = out[0].dtype;
        Runs r = coalesce(in[0].shape, out[0].shape);
        KernelCall call{.kernel = cache->get(kernel_key("sum_to_" + pattern(r), dtype),
                                             [&] { return build_sum_to(r, dtype); }),
                        .buffers = {input_slot(0), output_slot(0)},
                        .dims = r.extents};
        return OpExpansion{.calls = {call}};
      };
}

}  // namespace

void register_sum_to(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "sum_to",
       .doc = "out = x summed over the axes along which the attribute shape broadcasts to x's "
              "shape (the "
              "gradient of a broadcast operand); each element summed in index order, no atomics",
       .inputs = {"x"},
       .outputs = {"out"},
       .attrs = {{.name = "shape",
                  .kind = AttrKind::IntList,
                  .doc = "the output shape; broadcasts to x's shape (NumPy rules)"}},
       .infer = infer_sum_to,
       .reference = ref_sum_to,
       .expand = expand_sum_to(cache),
       // Leading, trailing, middle and alternating summed axes, a scalar result, odd sizes.
       .tests = {.kernel = {{{{33, 130}}, {{"shape", std::vector<int64_t>{130}}}},
                            {{{33, 130}}, {{"shape", std::vector<int64_t>{33, 1}}}},
                            {{{5, 7, 3}}, {{"shape", std::vector<int64_t>{5, 1, 3}}}},
                            {{{2, 3, 5, 7}}, {{"shape", std::vector<int64_t>{3, 1, 7}}}},
                            {{{1025}}, {{"shape", std::vector<int64_t>{}}}},
                            {{{3, 1, 7}}, {{"shape", std::vector<int64_t>{1, 1, 7}}}},
                            {{{9, 4}}, {{"shape", std::vector<int64_t>{9, 4}}}}},
                 .examples = {{.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                               .attrs = {{"shape", std::vector<int64_t>{3}}},
                               .outputs = {{{3}, {5, 7, 9}}}},
                              {.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}},
                               .attrs = {{"shape", std::vector<int64_t>{2, 1}}},
                               .outputs = {{{2, 1}, {6, 15}}}},
                              // -0 + -0 stays -0; inf + -inf is NaN.
                              {.inputs = {{{2, 2}, {-0.0, kInf(), -0.0, -kInf()}}},
                               .attrs = {{"shape", std::vector<int64_t>{1, 2}}},
                               .outputs = {{{1, 2}, {-0.0, kNaN()}}}}}}});
}

}  // namespace tilerun::kernels
