// index_select(x, index; axis): the slices of x along one axis named by a 1-D i32 index,
// y[.., k, ..] = x[.., index[k], ..] (torch.index_select). The index carries a contract (in
// [0, N), N = x's extent along the axis): checked at run time by check_index unless its producer
// establishes it (topk, a counting sort), and the kernel, handed the check's status, reads
// nothing when an index is bad; unchecked (the kernel suites), an index outside [0, N) gives NaN,
// never a read outside x.
//
// Kernel: x seen as [P, N, R] (the axes before, along and after the selected one), y [P, K, R];
// one thread an element of y, in y's order, so both the index and x's rows are read along R
// coalesced.
//
// Gradient: dx[.., n, ..] = the sum of dy[.., k, ..] over the k with index[k] = n, in k order:
// embedding_grad (owner-computes over the sorted index, no atomics) of dy seen as [K, P·R]
// rows, so dy and the result go through a transpose of their first two axes when P > 1 (views
// when P = 1, as for axis 0).
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

constexpr int kThreads = 256;

std::vector<TensorType> infer_index_select(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const AxisLines a = axis_lines(in[0], attrs);
  if (in[1].dtype != DType::I32 || in[1].shape.size() != 1)
    throw ShapeError("input 'index' is " + to_string(in[1]) + ", expected a 1-D i32 index");
  std::vector<int64_t> shape = in[0].shape;
  shape[a.axis] = in[1].shape[0];
  return {{in[0].dtype, shape}};
}

std::vector<RefTensor> ref_index_select(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const AxisLines a = axis_lines({DType::F32, in[0].shape}, attrs);
  const int64_t k = in[1].numel();
  std::vector<int64_t> shape = in[0].shape;
  shape[a.axis] = k;
  RefTensor y = ref_zeros(shape);
  for (int64_t p = 0; p < a.outer; ++p)
    for (int64_t j = 0; j < k; ++j) {
      const double id = in[1].data[j];
      for (int64_t r = 0; r < a.inner; ++r)
        y.data[(p * k + j) * a.inner + r] =
            id >= 0 && id < static_cast<double>(a.extent)
                ? in[0].data[(p * a.extent + static_cast<int64_t>(id)) * a.inner + r]
                : kNaN();
    }
  return {y};
}

// The gradient as embedding_grad over rows of P·R: dy [.., K, ..] to [K, P·R] (a transpose of
// [P, K, R]'s first two axes unless P = 1), the rows' sums, and back to x's shape. x enters
// embedding_grad only for its shape [N, P·R] (a view).
std::vector<GradOp> grad_index_select(const std::vector<TensorType>& in, const Attrs& attrs,
                                      const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  const AxisLines a = axis_lines(in[0], attrs);
  const int64_t k = in[1].shape[0], p = a.outer, n = a.extent, r = a.inner;
  using Ints = std::vector<int64_t>;
  std::vector<GradOp> ops = {{"reshape", {"x0"}, {"x0.rows"}, {{"shape", Ints{n, p * r}}}}};
  if (p == 1) {
    ops.push_back({"reshape", {"dy0"}, {"dy0.rows"}, {{"shape", Ints{k, r}}}});
    ops.push_back({"embedding_grad", {"x0.rows", "x1", "dy0.rows"}, {"dx0.rows"}, {}});
    ops.push_back({"reshape", {"dx0.rows"}, {"dx0"}, {{"shape", in[0].shape}}});
    return ops;
  }
  const Attrs swap = {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}};
  ops.push_back({"reshape", {"dy0"}, {"dy0.pkr"}, {{"shape", Ints{p, k, r}}}});
  ops.push_back({"transpose", {"dy0.pkr"}, {"dy0.kpr"}, swap});
  ops.push_back({"reshape", {"dy0.kpr"}, {"dy0.rows"}, {{"shape", Ints{k, p * r}}}});
  ops.push_back({"embedding_grad", {"x0.rows", "x1", "dy0.rows"}, {"dx0.rows"}, {}});
  ops.push_back({"reshape", {"dx0.rows"}, {"dx0.npr"}, {{"shape", Ints{n, p, r}}}});
  ops.push_back({"transpose", {"dx0.npr"}, {"dx0.pnr"}, swap});
  ops.push_back({"reshape", {"dx0.pnr"}, {"dx0"}, {{"shape", in[0].shape}}});
  return ops;
}

// `checked`: the index comes with its contract (an index input, < N) and the status of the
// check_index that established it (embedding.cc's scheme): nothing is read after a bad index.
cc::Kernel build_index_select(DType dtype, bool checked) {
  cc::KernelBuilder kb(std::string(checked ? "index_select_checked_" : "index_select_") +
                       std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), n = kb.dim("N"), k = kb.dim("K"), r = kb.dim("R");
  cc::Buf x = kb.input("x", dtype, {p, n, r});
  cc::Buf index = checked ? kb.index_input("index", {k}, n) : kb.input("index", DType::I32, {k});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf y = kb.output("y", dtype, {p, k, r});
  cc::Val total = p * k * r;
  kb.body({cc::ceildiv(total, cc::Val(int64_t{kThreads}))}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Val ok = checked ? s.let(status(0) < 0, "checked") : cc::boolean(true);
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Val e = s.let(base + i, "e");
      s.if_then(e < total, [&] {
        cc::Val col = s.let(e % r, "col"), slot = s.let(e / r % k, "slot");
        cc::Val outer = s.let(e / r / k, "outer");
        auto gather = [&] {
          cc::Val id = s.let(cc::to_i64(index(slot)), "id");
          s.if_then_else(
              id >= 0 && id < n, [&] { y(outer, slot, col) = x(outer, id, col); },
              [&] { y(outer, slot, col) = cc::Val(std::numeric_limits<float>::quiet_NaN()); });
        };
        if (checked)
          s.if_then(ok, gather);
        else
          gather();
      });
    });
  });
  return kb.build();
}

ExpandFn expand_index_select(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const DType dt = in[0].dtype;
    const bool checked = in.size() > 2;  // the graph appended the index's check status
    const AxisLines a = axis_lines(in[0], attrs);
    const std::string name = checked ? "index_select_checked" : "index_select";
    KernelCall call{
        .kernel = cache->get(kernel_key(name, dt), [&] { return build_index_select(dt, checked); }),
        .buffers = {input_slot(0), input_slot(1), output_slot(0)},
        .dims = {a.outer, a.extent, in[1].shape[0], a.inner},
        .scalars = {}};
    if (checked) call.buffers.insert(call.buffers.begin() + 2, input_slot(2));
    return OpExpansion{.scratch = {}, .calls = {call}};
  };
}

// The index selects along x's axis.
const IndexContract kIndexContract{
    .slot = 1,
    .bound = [](const std::vector<TensorType>& in,
                const Attrs& attrs) { return axis_lines(in[0], attrs).extent; },
    .indexes = "input 'x' along its axis"};

// A case of x `shape`, an index of `k` ids drawn from [0, the axis's extent), `axis`.
OpTestCase index_case(std::vector<int64_t> shape, int64_t k, int64_t axis) {
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
  const int64_t extent = shape[a];
  return {
      .shapes = {std::move(shape), {k}}, .attrs = {{"axis", axis}}, .int_lo = 0, .int_hi = extent};
}

}  // namespace

void register_index_select(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "index_select",
       .doc = "y[.., k, ..] = x[.., index[k], ..] along axis: the slices named by a 1-D i32 "
              "index [K] (checked at run time: one outside [0, N) fails the step, naming it); "
              "gradient: each dy slice added back to the slice it came from, in k order "
              "(embedding_grad, no atomics)",
       .inputs = {"x", "index"},
       .outputs = {"y"},
       .attrs = {int_attr("axis", 0, "the axis selected along; negative counts from the end")},
       .input_dtypes = {{1, DType::I32}},
       .infer = infer_index_select,
       .reference = ref_index_select,
       .gradient = grad_index_select,
       .expand = expand_index_select(cache),
       .index_contracts = {kIndexContract},
       .tests = {.kernel = {index_case({9, 3}, 4, 0), index_case({4, 5, 6}, 7, 1),
                            index_case({2, 3, 130}, 300, -1), index_case({8}, 3, 0),
                            index_case({3, 1, 5}, 2, 1)},
                 // Repeated ids: a slice named twice gets both dy slices.
                 .gradient = {index_case({3, 4, 2}, 5, 1), index_case({5, 3}, 6, 0),
                              index_case({2, 4}, 3, -1)},
                 // Columns 2, 0, 2 of [2, 3]; an index of 3 gives NaN (unchecked).
                 .examples = {{.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}, {{3}, {2, 0, 2}}},
                               .attrs = {{"axis", int64_t{1}}},
                               .outputs = {{{2, 3}, {3, 1, 3, 6, 4, 6}}}},
                              {.inputs = {{{2, 2}, {1, 2, 3, 4}}, {{2}, {1, 3}}},
                               .outputs = {{{2, 2}, {3, 4, kNaN(), kNaN()}}}}}}});
}

}  // namespace tilerun::kernels
