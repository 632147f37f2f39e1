// take_along_axis (elements of each row picked by i32 indices, along the last axis) and its
// backward op take_along_axis_grad, which is also topk's (topk's values are x taken along its
// indices). Rows of a table picked by ids of any shape, kv[S, D] by idx[T, K] -> [T, K, D], are
// `embedding` (its ids may have any rank), not this op.
//
// Kernels: the gather is one thread per output element; an index outside [0, N) gives NaN,
// never a read outside the row. The indices carry a contract (in [0, N)): checked at run time by
// check_index, or established by construction when they come from an op that declares their
// range (topk); either way the graph hands the op a status, which the checked kernel reads (it
// does nothing on a bad index), and its in-range test is proved from the contract and removed.
// The gradient is owner-computes: one thread per x element (row, j) sums the dy of the indices
// naming j in index order, no atomics, the same bits on every device. Up to kMaxSortedRow
// indices per row, one block per row first sorts the row's indices (bitonic_sort) and each
// element finds its run by binary search (topk's backward at the indexer's N = 1024, K = 128: about
// 20 steps per element instead of 128); beyond, each element scans the row, O(N·K) per row.
#include <cmath>
#include <limits>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;
// The longest index row the gradient sorts in shared memory (32 KiB of keys); beyond, every
// element searches the whole row.
constexpr int64_t kMaxSortedRow = 4096;

// ---- Inference -----------------------------------------------------------------------------

// x [.., N] and indices i32 [.., K] with the same leading dims: the shape [.., K].
std::vector<int64_t> picked_shape(const std::vector<TensorType>& in) {
  expect_float(in[0], "x");
  if (in[0].shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  if (in[1].dtype != DType::I32 || in[1].shape.size() != in[0].shape.size() ||
      !std::equal(in[0].shape.begin(), in[0].shape.end() - 1, in[1].shape.begin()))
    throw ShapeError("input 'indices' is " + to_string(in[1]) + ", expected i32 indices of " +
                     "x's leading dims " + to_string(in[0]) + " with any last axis");
  return in[1].shape;
}

std::vector<TensorType> infer_take(const std::vector<TensorType>& in, const Attrs&) {
  return {TensorType{in[0].dtype, picked_shape(in)}};
}

// (x, indices, dy [.., K]) -> dx.
std::vector<TensorType> infer_take_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_same(in[2], "dy", TensorType{in[0].dtype, picked_shape(in)}, "the picked elements");
  return {in[0]};
}

// ---- References ----------------------------------------------------------------------------

int64_t index_of(double v) { return static_cast<int64_t>(std::llround(v)); }

std::vector<RefTensor> ref_take(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &x = in[0], &idx = in[1];
  const int64_t n = rows_cols(x.shape).second;
  const auto [rows, k] = rows_cols(idx.shape);
  RefTensor y = ref_zeros(idx.shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < k; ++p) {
      const int64_t j = index_of(idx.data[r * k + p]);
      y.data[r * k + p] = j >= 0 && j < n ? x.data[r * n + j] : kNaN();
    }
  return {y};
}

// dx[.., indices[.., p]] += dy[.., p], p in order; an index outside [0, N) adds nothing.
std::vector<RefTensor> ref_take_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &x = in[0], &idx = in[1], &dy = in[2];
  const int64_t n = rows_cols(x.shape).second;
  const auto [rows, k] = rows_cols(idx.shape);
  RefTensor dx = ref_zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < k; ++p) {
      const int64_t j = index_of(idx.data[r * k + p]);
      if (j >= 0 && j < n) dx.data[r * n + j] += dy.data[r * k + p];
    }
  return {dx};
}

std::vector<GradOp> grad_take(const std::vector<TensorType>&, const Attrs&,
                              const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"take_along_axis_grad", {"x0", "x1", "dy0"}, {"dx0"}, {}}};
}

// ---- Kernels -------------------------------------------------------------------------------

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

// `checked`: the indices come with their contract (an index input, < N) and the status of the
// check_index that established it (see embedding.cc's gather, the same scheme).
cc::Kernel build_take(DType dtype, bool checked) {
  cc::KernelBuilder kb(std::string(checked ? "take_along_axis_checked" : "take_along_axis") +
                       suffix(dtype));
  cc::Dim p = kb.dim("P"), n = kb.dim("N"), k = kb.dim("K");
  cc::Buf x = kb.input("x", dtype, {p, n});
  cc::Buf idx =
      checked ? kb.index_input("indices", {p, k}, n) : kb.input("indices", DType::I32, {p, k});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf y = kb.output("y", dtype, {p, k});
  kb.body({p, cc::ceildiv(k, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.block_idx(1) * kThreads;
    cc::Val ok = checked ? s.let(status(0) < 0, "checked") : cc::boolean(true);
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx col = base + i;
      s.if_then(col < k, [&] {
        auto gather = [&] {
          cc::Val j = s.let(cc::to_i64(idx(row, col)), "j");
          s.if_then_else(
              j >= 0 && j < n, [&] { y(row, col) = x(row, j); },
              [&] { y(row, col) = cc::Val(std::numeric_limits<float>::quiet_NaN()); });
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

cc::Kernel build_take_grad(DType dtype) {
  cc::KernelBuilder kb("take_along_axis_grad" + suffix(dtype));
  cc::Dim p = kb.dim("P"), n = kb.dim("N"), k = kb.dim("K");
  cc::Buf idx = kb.input("indices", DType::I32, {p, k});
  cc::Buf dy = kb.input("dy", dtype, {p, k});
  cc::Buf dx = kb.output("dx", dtype, {p, n});
  kb.body({p, cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.block_idx(1) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx col = base + i;
      s.if_then(col < n, [&] {
        acc(i) = 0.0f;
        s.serial(k, [&](cc::Idx q) {
          s.if_then(cc::to_i64(idx(row, q)) == col, [&] { acc(i) = acc(i) + dy(row, q); });
        });
        dx(row, col) = acc(i);
      });
    });
  });
  return kb.build();
}

// The same sums through the row's indices sorted in shared memory: one block per row sorts its
// K keys index·2^32 + p (bitonic_sort, m >= K) once, then for each tile of columns finds where
// each column's run of keys starts by binary search (one search a column, the next column's
// start its end) and adds the run's dy in p order, the order of build_take_grad's scan, so the
// same bits: O(K log² K) per row and O(log K + run) per element instead of O(K) per element.
cc::Kernel build_take_grad_sorted(DType dtype, int64_t m) {
  const int steps = search_steps(m);
  cc::KernelBuilder kb("take_along_axis_grad_sorted_" + std::to_string(m) + suffix(dtype));
  cc::Dim p = kb.dim("P"), n = kb.dim("N"), k = kb.dim("K", {.min = 1, .max = m});
  cc::Buf idx = kb.input("indices", DType::I32, {p, k});
  cc::Buf dy = kb.input("dy", dtype, {p, k});
  cc::Buf dx = kb.output("dx", dtype, {p, n});
  kb.body({p}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Buf keys = s.alloc_shared("keys", DType::I64, {m});
    s.parallel(m, [&](cc::Idx q) {
      s.if_then_else(
          q < k, [&] { keys(q) = cc::to_i64(idx(row, q)) * int64_t{4294967296} + q; },
          [&] { keys(q) = cc::Val(std::numeric_limits<int64_t>::max()); });  // sorts last
    });
    bitonic_sort(s, keys, m, /*descending=*/false);
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kThreads - 1});
    // Tiles of kThreads - 1 columns: bounds[i] = the first q with (keys[q] >> 32) >= the tile's
    // column i, i in [0, kThreads), one search a thread, and column i's run is [bounds[i],
    // bounds[i + 1]). (Two searches a column, each thread its own pair, made the kernel
    // issue-bound: 95 us for 4096 rows of 1024 on the H200.)
    const int64_t cols = kThreads - 1;
    cc::Buf bounds = s.alloc_shared("bounds", DType::I64, {kThreads});
    cc::Buf lo = s.alloc_fragment("lo", DType::I64, {kThreads});
    cc::Buf hi = s.alloc_fragment("hi", DType::I64, {kThreads});
    s.serial(cc::ceildiv(n, cols), [&](cc::Idx tile) {
      s.parallel(kThreads, [&](cc::Idx i) {
        cc::Idx col = tile * cols + i;
        sorted_lower_bound(
            s, lo, hi, i, k, steps,
            [&](const cc::Val& q) { return cc::shr(keys(q), cc::Val(int64_t{32})); }, col);
        bounds(i) = lo(i);
      });
      s.barrier();
      s.parallel(cols, [&](cc::Idx i) {
        cc::Idx col = tile * cols + i;
        s.if_then(col < n, [&] {
          cc::Val begin = s.let(bounds(i), "begin");
          acc(i) = 0.0f;
          // [begin, bounds[i + 1]) is inside [0, K) by the searches, and a key's low half is
          // its slot q < K: the clamps (no-ops) say so to the analysis, which cannot bound
          // shared values.
          s.serial(bounds(i + 1) - begin, [&](cc::Idx q) {
            cc::Val key =
                s.let(keys(cc::min(cc::max(begin + q, cc::Val(int64_t{0})), k - 1)), "key");
            acc(i) = acc(i) + dy(row, cc::min(key & 4294967295, k - 1));
          });
          dx(row, col) = acc(i);
        });
      });
      s.barrier();  // the next tile's searches overwrite bounds
    });
  });
  return kb.build();
}

// (rows, N, K) of x [.., N] and indices [.., K].
std::vector<int64_t> dims_of(const std::vector<TensorType>& in) {
  const auto [rows, n] = rows_cols(in[0].shape);
  return {rows, n, rows_cols(in[1].shape).second};
}

ExpandFn expand_take(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const DType dt = in[0].dtype;
    const bool checked = in.size() > 2;  // the graph appended the indices' check status
    const std::string name = checked ? "take_along_axis_checked" : "take_along_axis";
    KernelCall call{
        .kernel = cache->get(kernel_key(name, dt), [&] { return build_take(dt, checked); }),
        .buffers = {input_slot(0), input_slot(1), output_slot(0)},
        .dims = dims_of(in)};
    if (checked) call.buffers.insert(call.buffers.begin() + 2, input_slot(2));
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_take_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const DType dt = in[0].dtype;
    const std::vector<int64_t> dims = dims_of(in);
    if (dims[2] <= kMaxSortedRow) {
      const int64_t m = bitonic_length(dims[2]);
      KernelCall call{
          .kernel = cache->get(kernel_key("take_along_axis_grad_sorted_" + std::to_string(m), dt),
                               [&] { return build_take_grad_sorted(dt, m); }),
          .buffers = {input_slot(1), input_slot(2), output_slot(0)},
          .dims = dims};
      return OpExpansion{.calls = {call}};
    }
    KernelCall call{.kernel = cache->get(kernel_key("take_along_axis_grad", dt),
                                         [&] { return build_take_grad(dt); }),
                    .buffers = {input_slot(1), input_slot(2), output_slot(0)},
                    .dims = dims_of(in)};
    return OpExpansion{.calls = {call}};
  };
}

// x [rows.., n] and indices [rows.., k] drawn in [lo, hi) (with dy [rows.., k] for the grad).
OpTestCase take_case(std::vector<int64_t> rows, int64_t n, int64_t k, int64_t lo, int64_t hi,
                     bool with_dy = false) {
  std::vector<int64_t> xs = rows, is = rows;
  xs.push_back(n);
  is.push_back(k);
  OpTestCase c{.shapes = {xs, is}, .int_lo = lo, .int_hi = hi};
  if (with_dy) c.shapes.push_back(is);
  return c;
}

// The indices select elements of x's rows.
const IndexContract kIndicesContract{
    .slot = 1,
    .bound = [](const std::vector<TensorType>& in,
                const Attrs&) { return in[0].shape.empty() ? 0 : in[0].shape.back(); },
    .indexes = "the elements of input 'x' along its last axis"};

}  // namespace

void register_take_along_axis(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "take_along_axis",
       .doc = "y[.., p] = x[.., indices[.., p]]: elements of each row of x [.., N] picked by i32 "
              "indices [.., K] along the last axis (checked at run time unless their producer "
              "establishes [0, N) by construction, as topk does); rows of a table: embedding",
       .inputs = {"x", "indices"},
       .outputs = {"y"},
       .input_dtypes = {{1, DType::I32}},
       .infer = infer_take,
       .reference = ref_take,
       .gradient = grad_take,
       .expand = expand_take(cache),
       .index_contracts = {kIndicesContract},
       .tests = {.kernel = {take_case({}, 1, 1, 0, 1), take_case({3}, 40, 7, 0, 40),
                            take_case({2, 3}, 300, 130, 0, 300), take_case({5}, 9, 20, 0, 9)},
                 // Repeated indices: an element picked twice gets both dy.
                 .gradient = {take_case({2}, 5, 7, 0, 5), take_case({3}, 4, 2, 0, 4)},
                 // An index of 3 or -1 gives NaN (the random cases stay in range: the suite
                 // poisons outputs with NaN).
                 .examples = {
                     {.inputs = {{{2, 3}, {1, 2, 3, 4, 5, 6}}, {{2, 4}, {2, 0, 2, 1, 1, 1, 0, 2}}},
                      .outputs = {{{2, 4}, {3, 1, 3, 2, 5, 5, 4, 6}}}},
                     {.inputs = {{{2}, {1, 2}}, {{2}, {3, -1}}},
                      .outputs = {{{2}, {kNaN(), kNaN()}}}}}}});
  registry.add(
      {.name = "take_along_axis_grad",
       .doc = "dx[.., j] = sum of dy[.., p] over the p with indices[.., p] = j, in p order (the "
              "backward op of take_along_axis and of topk; indices outside [0, N) add nothing)",
       .inputs = {"x", "indices", "dy"},
       .outputs = {"dx"},
       .input_dtypes = {{1, DType::I32}},
       .infer = infer_take_grad,
       .reference = ref_take_grad,
       .expand = expand_take_grad(cache),
       .tests = {
           .kernel = {take_case({}, 1, 1, 0, 1, true), take_case({3}, 40, 7, 0, 40, true),
                      take_case({2}, 300, 130, -3, 310, true),
                      take_case({4}, 1024, 128, 0, 1024, true),
                      // Past kMaxSortedRow: the scan of the whole row per element.
                      take_case({2}, 50, kMaxSortedRow + 3, -2, 52, true)},
           // Position 1 chosen twice (two dy summed), position 2 never.
           .examples = {{.inputs = {{{1, 3}, {9, 9, 9}}, {{1, 3}, {1, 0, 1}}, {{1, 3}, {1, 2, 4}}},
                         .outputs = {{{1, 3}, {2, 5, 0}}}}}}});
}

}  // namespace tilerun::kernels
