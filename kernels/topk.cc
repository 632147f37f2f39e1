// topk over the last axis: the k largest values of each row, descending, and their i32 indices;
// exact (a total order, so the result does not depend on any fold order). Order: a NaN is larger
// than every number (as torch.topk) and NaNs tie with each other; +0 = -0; ties go to the lowest
// index. The indices lie in [0, N) by construction (each is a position the kernel wrote from its
// loop, never a value it read), which the op declares (OpSchema::index_outputs), so an op
// indexing with them needs no run-time check. Gradient: take_along_axis_grad (the values are x
// taken along the indices) puts dy back at the chosen positions, owner-computes.
//
// Kernels. topk: one block per row. Each element becomes one i64 sort key, (ordered value bits)
// << 32 | (2^32 - 1 - index): distinct, so a plain descending sort of the keys is the order
// above, ties included, whatever the sort's stability. The row's keys sit in shared memory,
// padded to a power of two M >= N with keys below every real one, and are sorted by a bitonic
// network unrolled at build time (M is a constant of the kernel, one kernel per M): each stage a
// parallel compare-exchange over M/2 pairs whose addresses are affine in the loop coordinates,
// so their uniqueness is proved without Z3 (no data-dependent store). The first k keys give the
// indices; the values are read back from x. Cost per row: log2(M)·(log2(M)+1)/2 stages of M/2
// compare-exchanges and one barrier each; at the indexer's N = 1024 (M = 1024, 256 threads) that
// is 55 stages of 2 exchanges per thread, barrier-bound, and 8 KiB of shared memory (M = 16384
// takes 128 KiB, the largest row the kernel accepts). A radix select before the sort would cut
// the work for k << N; the full sort is kept because it is simple and exact.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
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

constexpr int kSortThreads = 256;
constexpr int64_t kMaxRow = 16384;  // the longest row: its keys fill 128 KiB of shared memory

// ---- Inference -----------------------------------------------------------------------------

int64_t row_length(const TensorType& x) {
  if (x.shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  return x.shape.back();
}

// x [.., N] -> values [.., k] (x's dtype), indices i32 [.., k].
std::vector<TensorType> infer_topk(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  const int64_t n = row_length(in[0]), k = attr_int(attrs, "k");
  if (k > n)
    throw ShapeError("attribute 'k' = " + std::to_string(k) + " exceeds the last axis of input " +
                     "'x' " + to_string(in[0]));
  if (n > kMaxRow)
    throw ShapeError("input 'x' " + to_string(in[0]) + " has rows of " + std::to_string(n) +
                     " elements, expected at most " + std::to_string(kMaxRow) +
                     " (one row's sort keys must fit in shared memory)");
  std::vector<int64_t> shape = in[0].shape;
  shape.back() = k;
  return {TensorType{in[0].dtype, shape}, TensorType{DType::I32, shape}};
}

// ---- References ----------------------------------------------------------------------------

// Whether a comes before b in topk's order (a NaN above every number, ties to the lower index).
bool ref_before(double a, int64_t ia, double b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

std::vector<RefTensor> ref_topk(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor& x = in[0];
  const auto [rows, n] = rows_cols(x.shape);
  const int64_t k = attr_int(attrs, "k");
  std::vector<int64_t> shape = x.shape;
  shape.back() = k;
  RefTensor values = ref_zeros(shape), indices = ref_zeros(shape);
  std::vector<int64_t> order(n);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data.data() + r * n;
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return ref_before(row[a], a, row[b], b); });
    for (int64_t j = 0; j < k; ++j) {
      values.data[r * k + j] = row[order[j]];
      indices.data[r * k + j] = static_cast<double>(order[j]);
    }
  }
  return {values, indices};
}

// ---- Gradient rule -------------------------------------------------------------------------

// The values are x taken along the indices: their gradient is take_along_axis's (dy back to the
// chosen positions); the indices carry none.
std::vector<GradOp> grad_topk(const std::vector<TensorType>&, const Attrs&,
                              const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"take_along_axis_grad", {"x0", "y1", "dy0"}, {"dx0"}, {}}};
}

// ---- Kernels -------------------------------------------------------------------------------

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

// The sort key of element `index` with value v: the value's bits made monotone as a signed
// i32 (negative floats have their magnitude bits flipped; +0 and -0 both 0; every NaN the
// largest), times 2^32, plus 2^32 - 1 - index so that the lower index is the larger key.
cc::Val sort_key(const cc::Val& v, const cc::Val& index) {
  cc::Val bits = cc::bitcast(cc::Type::I32, cc::select(v == 0.0f, cc::Val(0.0f), v));
  cc::Val ordered =
      bits ^ (cc::shr(bits, cc::to_i32(cc::Val(31))) & cc::to_i32(cc::Val(0x7FFFFFFF)));
  cc::Val monotone = cc::select(v != v, cc::to_i32(cc::Val(0x7FFFFFFF)), ordered);
  return cc::to_i64(monotone) * int64_t{4294967296} + (4294967295 - index);
}

cc::Kernel build_topk(DType dtype, int64_t m) {
  cc::KernelBuilder kb("topk_" + std::to_string(m) + suffix(dtype));
  cc::Dim p = kb.dim("P"), n = kb.dim("N", {.min = 1, .max = m}),
          k = kb.dim("K", {.min = 1, .max = m});
  cc::Buf x = kb.input("x", dtype, {p, n});
  cc::Buf values = kb.output("values", dtype, {p, k});
  cc::Buf indices = kb.output("indices", DType::I32, {p, k});
  kb.body({p}, kSortThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Buf keys = s.alloc_shared("keys", DType::I64, {m});
    // Padding sorts last: below every real key (whose high half is at least -inf's,
    // 0x807FFFFF as i32), and spelled without INT64_MIN's literal, which C++ cannot write.
    s.parallel(m, [&](cc::Idx i) {
      s.if_then_else(
          i < n, [&] { keys(i) = sort_key(x(row, i), i); },
          [&] { keys(i) = cc::Val(std::numeric_limits<int64_t>::min() + 1); });
    });
    bitonic_sort(s, keys, m, /*descending=*/true);
    s.parallel(k, [&](cc::Idx r) {
      cc::Val index = s.let(4294967295 - (keys(r) & 4294967295), "index");
      indices(row, r) = cc::to_i32(index);
      values(row, r) = x(row, index);
    });
  });
  return kb.build();
}

ExpandFn expand_topk(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
        const DType dt = in[0].dtype;
        const auto [rows, n] = rows_cols(in[0].shape);
        const int64_t m = bitonic_length(n);
        KernelCall call{.kernel = cache->get(kernel_key("topk_" + std::to_string(m), dt),
                                             [&] { return build_topk(dt, m); }),
                        .buffers = {input_slot(0), output_slot(0), output_slot(1)},
                        .dims = {rows, n, out[0].shape.back()}};
        return OpExpansion{.calls = {call}};
      };
}

Attrs k_of(int64_t k) { return {{"k", k}}; }

// Kernel cases: rows from 1 to past a power of two, k from 1 to N, values on a coarse grid so
// that ties are common, and one row as long as the indexer's (N = 1024, k = 128).
std::vector<OpTestCase> topk_cases() {
  auto tied = [](std::vector<int64_t> shape, int64_t k) {
    return OpTestCase{
        .shapes = {std::move(shape)}, .attrs = k_of(k), .lo = -3, .hi = 3, .step = 0.5};
  };
  return {tied({1}, 1),
          tied({7, 33}, 5),
          tied({3, 64}, 64),
          tied({2, 3, 100}, 17),
          {.shapes = {{4, 1024}}, .attrs = k_of(128)},
          tied({2, 1025}, 300),
          {.shapes = {{5, 9}}, .attrs = k_of(9)}};
}

}  // namespace

void register_topk(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "topk",
       .doc = "values, indices = the k largest elements of each row of x (the last axis), "
              "descending, and their i32 indices (a NaN is larger than every number; +0 = -0; "
              "ties: the lowest index); indices lie in [0, N) by construction; gradient: dy "
              "back to the chosen positions",
       .inputs = {"x"},
       .outputs = {"values", "indices"},
       .attrs = {int_attr("k", std::nullopt, "how many elements each row keeps", true)},
       .output_dtypes = {{1, DType::I32}},
       .infer = infer_topk,
       .reference = ref_topk,
       .gradient = grad_topk,
       .expand = expand_topk(cache),
       .index_outputs = {{.slot = 1,
                          .bound = [](const std::vector<TensorType>& in,
                                      const Attrs&) { return row_length(in[0]); }}},
       .tests = {.kernel = topk_cases(),
                 .gradient = {{.shapes = {{2, 6}}, .attrs = k_of(3)},
                              {.shapes = {{3, 2, 5}}, .attrs = k_of(5)}},
                 .examples = {// Ties to the lowest index; -0 = +0 keeps each one's sign.
                              {.inputs = {{{2, 4}, {1, 3, 3, -1, -0.0, 0.0, -2, 0.0}}},
                               .attrs = k_of(3),
                               .outputs = {{{2, 3}, {3, 3, 1, -0.0, 0.0, 0.0}},
                                           {{2, 3}, {1, 2, 0, 0, 1, 3}}}},
                              // NaNs first, in index order; then +inf, numbers, -inf.
                              {.inputs = {{{6}, {1, kNaN(), -kInf(), kNaN(), kInf(), 2}}},
                               .attrs = k_of(6),
                               .outputs = {{{6}, {kNaN(), kNaN(), kInf(), 2, 1, -kInf()}},
                                           {{6}, {1, 3, 4, 5, 0, 2}}}}}}});
}

}  // namespace tilerun::kernels
