// scatter, the permutation form: y[index[n], :] = x[n, :] for the rows of x [N, D], with index a
// permutation of [0, N) (argsort's order, counting_sort's position or order). Every row of y is
// written exactly once, by one thread per element, so nothing is atomic and the result is the same
// bits on every device. The write goes through a loaded index: the kernel declares index a
// permutation input (values in [0, N), distinct), and the index analysis proves the store unique
// from that contract (two threads of different rows load different values) and in bounds, so it
// keeps no guard on the target row. The contract has no run-time check: the graph takes index only
// from a producer that declares its outputs distinct, and refuses any other when the model is
// built (IndexContract::distinct). Gradient: dx[n, :] = dy[index[n], :], the gather embedding
// does (its indices in range by the same producer).
//
// Kernel: a block covers R rows × C columns, C = D rounded up to a power of two (at most a 16-byte
// vector per thread across the 128 threads) and R such that each thread moves 4 vectors, so
// narrow rows still fill the block and wide ones move as 16-byte accesses (when D is a multiple
// of a vector; else one element at a time). The first version, one element a thread and one row a
// block, took 157 us on the H200 to move a 24576 x 512 f32 (torch's index_copy_ 45 us, floor 21).
#include <algorithm>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/row_tile.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;

// ---- Inference -----------------------------------------------------------------------------

std::vector<TensorType> infer_scatter(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  expect_rank(in[0], 2, "x");
  if (in[1].dtype != DType::I32 || in[1].shape != std::vector<int64_t>{in[0].shape[0]})
    throw ShapeError("input 'index' is " + to_string(in[1]) + ", expected i32 [" +
                     std::to_string(in[0].shape[0]) + "] (one target row per row of x " +
                     to_string(in[0]) + ")");
  return {in[0]};
}

// ---- Reference -----------------------------------------------------------------------------

std::vector<RefTensor> ref_scatter(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &x = in[0], &index = in[1];
  const int64_t n = x.shape[0], d = x.shape[1];
  RefTensor y = ref_zeros(x.shape);
  for (int64_t r = 0; r < n; ++r) {
    const auto to = static_cast<int64_t>(index.data[r]);
    for (int64_t c = 0; c < d; ++c) y.data[to * d + c] = x.data[r * d + c];
  }
  return {y};
}

std::vector<GradOp> grad_scatter(const std::vector<TensorType>&, const Attrs&,
                                 const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"embedding", {"dy0", "x1"}, {"dx0"}, {}}};
}

// ---- Kernel --------------------------------------------------------------------------------

static_assert(kThreads == kRowTileThreads, "the block row_tile.h sizes the tile for");

// `vec`: D is a multiple of the vector width, so a thread's `width` adjacent columns move as one
// 16-byte load and store (the analysis proves them aligned, the target row included: to·D is).
// A block whose tile lies wholly inside x runs the unguarded copy (the guards would keep its
// accesses scalar); the ragged edges take the guarded one.
cc::Kernel build_scatter(DType dtype, int64_t cols, bool vec) {
  const int width = vec ? vector_width(dtype) : 1;
  const int64_t rows = row_tile_rows(cols, width);
  cc::KernelBuilder kb("scatter_rows_" + std::to_string(cols) + (vec ? "_vec_" : "_") +
                       std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N"), d = kb.dim("D", {.divisible_by = width});
  cc::Buf x = kb.input("x", dtype, {n, d});
  cc::Buf index = kb.permutation_input("index", {n}, n);
  cc::Buf y = kb.output("y", dtype, {n, d});
  kb.body({cc::ceildiv(n, rows), cc::ceildiv(d, cols)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row0 = s.let(s.block_idx(0) * rows, "row0");
    cc::Idx col0 = s.let(s.block_idx(1) * cols, "col0");
    auto copy = [&](bool guarded) {
      s.annotate_layout(width);
      s.parallel(rows, cols, [&](cc::Idx i, cc::Idx j) {
        cc::Idx row = row0 + i, col = col0 + j;
        auto move = [&] {
          cc::Val to = s.let(cc::to_i64(index(row)), "to");
          y(to, col) = x(row, col);
        };
        if (guarded)
          s.if_then(row < n && col < d, move);
        else
          move();
      });
    };
    s.if_then_else(
        row0 + rows <= n && col0 + cols <= d, [&] { copy(false); }, [&] { copy(true); });
  });
  return kb.build();
}

ExpandFn expand_scatter(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const DType dt = in[0].dtype;
    const int64_t d = in[0].shape[1];
    const bool vec = d % vector_width(dt) == 0;
    const int64_t cols = row_tile_cols(d, vec ? vector_width(dt) : 1);
    // The graph appends index_established's status after the inputs: the contract holds by
    // construction, so the kernel has nothing to read from it.
    const std::string name = "scatter_rows_" + std::to_string(cols) + (vec ? "_vec" : "");
    KernelCall call{
        .kernel = cache->get(kernel_key(name, dt), [&] { return build_scatter(dt, cols, vec); }),
        .buffers = {input_slot(0), input_slot(1), output_slot(0)},
        .dims = {in[0].shape[0], d}};
    return OpExpansion{.calls = {call}};
  };
}

// x [n, d] and a random permutation of [0, n) as index (drawn keys, argsorted), dy [n, d] for
// the gradient.
OpTestCase scatter_case(int64_t n, int64_t d) {
  return {.shapes = {{n, d}, {n}},
          .int_lo = 0,
          .int_hi = std::max<int64_t>(n, 2),
          .permutations = {1},
          .derive = [](std::vector<RefTensor>& in) {
            std::vector<int64_t> order(in[1].numel());
            for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
            std::stable_sort(order.begin(), order.end(),
                             [&](int64_t a, int64_t b) { return in[1].data[a] < in[1].data[b]; });
            for (size_t k = 0; k < order.size(); ++k) in[1].data[k] = static_cast<double>(order[k]);
          }};
}

// The target rows: each row of x is written once, so index must be a permutation.
const IndexContract kRowsContract{
    .slot = 1,
    .bound = [](const std::vector<TensorType>& in,
                const Attrs&) { return in[0].shape.empty() ? 0 : in[0].shape[0]; },
    .indexes = "the rows of the output (as many as input 'x' has)",
    .distinct = true};

}  // namespace

void register_scatter(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "scatter",
       .doc = "y[index[n], :] = x[n, :]: the rows of x [N, D] moved to the places an i32 "
              "permutation index [N] names (the permutation form: index must come from argsort "
              "or counting_sort's position or order, which write distinct values by "
              "construction; any other is refused); gradient dx = embedding(dy, index)",
       .inputs = {"x", "index"},
       .outputs = {"y"},
       .input_dtypes = {{1, DType::I32}},
       .infer = infer_scatter,
       .reference = ref_scatter,
       .gradient = grad_scatter,
       .expand = expand_scatter(cache),
       .index_contracts = {kRowsContract},
       .tests = {.kernel = {scatter_case(1, 1), scatter_case(7, 3), scatter_case(300, 33),
                            scatter_case(129, 200), scatter_case(1000, 1), scatter_case(37, 64),
                            scatter_case(9, 1032)},
                 .gradient = {scatter_case(5, 3), scatter_case(4, 1)},
                 .examples = {{.inputs = {{{3, 2}, {1, 2, 3, 4, 5, 6}}, {{3}, {2, 0, 1}}},
                               .outputs = {{{3, 2}, {3, 4, 5, 6, 1, 2}}}}}}});
}

}  // namespace tilerun::kernels
