// gather_sum: each output row the sum of J table rows named by i32 ids [.., J], plus an optional
// addend: a MoE combine (each token's routes gathered back from expert-major order and summed in
// rank order, then the shared expert's output added) in one kernel instead of gather_rows, a
// reduce_sum over the routes and an add. Its backward op gather_sum_grad is gather_rows_grad's
// owner-computes gather through the ids' inverse, reading dy's row of the id's output row
// directly, so the [.., J, D] gradient of the gathered rows is never written either.
//
// Bits: the sum starts from the first row's value and adds the others in j order in f32, then
// rounds once to the dtype: reduce_sum's lane order over an axis of J <= 128 (kernels/
// reduce_kernel.h: a lane per element, folded in lane order), so the op is bit for bit
// gather_rows, reduce_sum over the J axis and add (Session.GatherSumIsGatherReduceAddBitForBit).
// The addend is added to the sum rounded to the dtype, as the add would read it.
//
// Kernels: one block per (output row, column tile). The row's J ids are read once into shared
// memory (an id outside [0, V) is -1 and makes the row NaN, as embedding's gather does), then each
// thread adds its columns' table rows; with D a multiple of 8 a thread takes 8 adjacent columns,
// 16 bytes of bf16 a load. Checked ids (an index contract: every V4-mini id comes from
// counting_sort) are proved in range, and blocks skip their work when the status reports a bad
// id. The backward is gather_rows_grad's kernel (gather_kernels.h) with each inverse entry's dy
// row divided by J.
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/gather_kernels.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/round_to.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;  // a block's threads across a column tile
// The most ids a row sums and the most inverse entries a table row has: their i32s sit in
// shared memory. 128 is also where reduce_sum's lane order stops being plain j order.
constexpr int64_t kMaxIds = 128;
constexpr int64_t kMaxInverse = 1024;

// ---- Inference -----------------------------------------------------------------------------

int64_t ids_width(const TensorType& ids) {
  if (ids.dtype != DType::I32 || ids.shape.empty() || ids.shape.back() < 1 ||
      ids.shape.back() > kMaxIds)
    throw ShapeError("input 'ids' is " + to_string(ids) +
                     ", expected i32 [.., J] with 1 <= J <= " + std::to_string(kMaxIds));
  return ids.shape.back();
}

// J', each table row's count of inverse entries.
int64_t inverse_width(const std::vector<TensorType>& in) {
  const int64_t v = in[0].shape[0], count = numel(in[2]);
  if (in[2].dtype != DType::I32 || count % v != 0 || count / v < 1 || count / v > kMaxInverse)
    throw ShapeError("input 'inverse' is " + to_string(in[2]) + ", expected i32 with J' per row " +
                     "of the table's " + std::to_string(v) +
                     " rows, 1 <= J' <= " + std::to_string(kMaxInverse));
  return count / v;
}

// The output type: ids [.., J] → [.., D].
TensorType gathered(const std::vector<TensorType>& in) {
  expect_float(in[0], "table");
  expect_rank(in[0], 2, "table");
  if (in[0].shape[0] < 1) throw ShapeError("input 'table' is " + to_string(in[0]) + ", empty");
  ids_width(in[1]);
  inverse_width(in);
  std::vector<int64_t> shape(in[1].shape.begin(), in[1].shape.end() - 1);
  shape.push_back(in[0].shape[1]);
  return {in[0].dtype, shape};
}

// (table, ids, inverse, addend?) -> y.
std::vector<TensorType> infer_gather_sum(const std::vector<TensorType>& in, const Attrs&) {
  TensorType y = gathered(in);
  if (in.size() > 3) expect_same(in[3], "addend", y, "the summed rows");
  return {y};
}

// (table, ids, inverse, dy) -> dtable.
std::vector<TensorType> infer_gather_sum_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_same(in[3], "dy", gathered(in), "the summed rows");
  return {in[0]};
}

// ---- References ----------------------------------------------------------------------------

int64_t id_of(double v) { return static_cast<int64_t>(std::llround(v)); }

// y[r] = sum over j of table[ids[r, j]] (NaN for a row with an id outside [0, V)), + addend.
std::vector<RefTensor> ref_gather_sum(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &table = in[0], &ids = in[1];
  const int64_t v = table.shape[0], d = table.shape[1], j = ids.shape.back();
  const int64_t rows = ids.numel() / j;
  std::vector<int64_t> shape(ids.shape.begin(), ids.shape.end() - 1);
  shape.push_back(d);
  RefTensor y = ref_zeros(shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < j; ++p) {
      const int64_t id = id_of(ids.data[r * j + p]);
      for (int64_t c = 0; c < d; ++c)
        y.data[r * d + c] += id >= 0 && id < v ? table.data[id * d + c] : kNaN();
    }
  // The addend is y's shape; an i32 [2] after the inverse is the ids' check status, which a
  // graph appends (a model's gather_sum without an addend): not an addend.
  if (in.size() > 3 && in[3].shape == y.shape)
    for (int64_t i = 0; i < y.numel(); ++i) y.data[i] += in[3].data[i];
  return {y};
}

// dtable[v] = sum over the entries e of dy[inverse[v, e] / J], in e order; NaN for a row with an
// entry outside [0, N·J) or naming an id other than v.
std::vector<RefTensor> ref_gather_sum_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &table = in[0], &ids = in[1], &inv = in[2], &dy = in[3];
  const int64_t v = table.shape[0], d = table.shape[1], n = ids.numel(), j = ids.shape.back();
  const int64_t e = inv.numel() / v;
  RefTensor dt = ref_zeros(table.shape);
  for (int64_t row = 0; row < v; ++row) {
    bool ok = true;
    for (int64_t p = 0; p < e; ++p) {
      const int64_t q = id_of(inv.data[row * e + p]);
      if (q < 0 || q >= n || id_of(ids.data[q]) != row) {
        ok = false;
        continue;
      }
      for (int64_t c = 0; c < d; ++c) dt.data[row * d + c] += dy.data[(q / j) * d + c];
    }
    if (!ok)
      for (int64_t c = 0; c < d; ++c) dt.data[row * d + c] = kNaN();
  }
  return {dt};
}

// ---- Gradient rule -------------------------------------------------------------------------

std::vector<GradOp> grad_gather_sum(const std::vector<TensorType>&, const Attrs&,
                                    const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  if (needs[0]) ops.push_back({"gather_sum_grad", {"x0", "x1", "x2", "dy0"}, {"dx0"}, {}});
  if (needs.size() > 3 && needs[3]) ops.push_back({"alias", {"dy0"}, {"dx3"}, {}});
  return ops;
}

// ---- Kernels -------------------------------------------------------------------------------

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

// Runs `body(i, col)` for each of the block's `cols` columns from `base`, each thread `width`
// adjacent ones (annotated so that its accesses move as vectors); `guarded` for a ragged last
// tile. Each call its own parallel with no inner loop or guard in it.
void columns(cc::Scope& s, int width, int64_t cols, const cc::Idx& base, const cc::Val& d,
             bool guarded, const std::function<void(const cc::Idx&, const cc::Idx&)>& body) {
  s.annotate_layout(width);
  s.parallel(cols, [&](cc::Idx i) {
    cc::Idx col = base + i;
    if (guarded)
      s.if_then(col < d, [&] { body(i, col); });
    else
      body(i, col);
  });
}

// Forward: y[row] = sum of table[ids[row, p]] over p (+ addend), a block per (row, column tile).
cc::Kernel build_gather_sum(DType dtype, int64_t j_n, bool vec, bool checked, bool addend) {
  const int width = vec ? 8 : 1;
  const int64_t cols = kThreads * width;
  cc::KernelBuilder kb("gather_sum_j" + std::to_string(j_n) + (vec ? "_vec" : "") +
                       (checked ? "_checked" : "") + (addend ? "_add" : "") + suffix(dtype));
  cc::Dim n = kb.dim("N"), v = kb.dim("V"), d = kb.dim("D", {.divisible_by = width});
  cc::Buf table = kb.input("table", dtype, {v, d});
  cc::Buf ids = checked ? kb.index_input("ids", {n, cc::Val(j_n)}, v)
                        : kb.input("ids", DType::I32, {n, cc::Val(j_n)});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf add = addend ? kb.input("addend", dtype, {n, d}) : cc::Buf{};
  cc::Buf y = kb.output("y", dtype, {n, d});
  kb.body({n, cc::ceildiv(d, cols)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.let(s.block_idx(1) * cols, "base");
    cc::Buf qs = s.alloc_shared("qs", DType::I32, {j_n});  // the row's ids, or -1
    s.parallel(j_n, [&](cc::Idx p) {
      cc::Val q = s.let(cc::to_i64(ids(row, p)), "q");
      qs(p) = cc::select(q >= 0 && q < v, ids(row, p), cc::literal(cc::Type::I32, -1));
    });
    s.barrier();
    cc::Val bad = s.reduce_max(cc::Val(j_n), [&](cc::Idx p) {
      return cc::select(cc::to_i64(qs(p)) < 0, cc::Val(1.0f), cc::Val(0.0f));
    });
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {cols});
    // Every id checked by now: the clamp changes no q, it proves the loads in bounds.
    auto id = [&](const cc::Val& p) {
      return s.let(cc::max(cc::min(cc::to_i64(qs(p)), v - 1), cc::Val(0)), "id");
    };
    auto tile = [&](bool guarded) {
      auto each = [&](const std::function<void(const cc::Idx&, const cc::Idx&)>& body) {
        columns(s, width, cols, base, d, guarded, body);
      };
      s.if_then_else(
          bad > 0.0f,
          [&] {
            each([&](const cc::Idx&, const cc::Idx& col) {
              y(row, col) = std::numeric_limits<float>::quiet_NaN();
            });
          },
          [&] {
            cc::Val first = id(cc::Val(0));
            each([&](const cc::Idx& i, const cc::Idx& col) { acc(i) = table(first, col); });
            s.serial(cc::Val(j_n - 1), [&](cc::Idx p) {
              cc::Val q = id(p + 1);
              each([&](const cc::Idx& i, const cc::Idx& col) { acc(i) = acc(i) + table(q, col); });
            });
            each([&](const cc::Idx& i, const cc::Idx& col) {
              if (addend)
                y(row, col) = rounded(dtype, acc(i), "sum") + add(row, col);
              else
                y(row, col) = acc(i);
            });
          });
    };
    auto tiles = [&] {
      s.if_then_else(
          base + cols <= d, [&] { tile(false); }, [&] { tile(true); });
    };
    if (checked)
      s.if_then(status(0) < 0, tiles);  // a bad id anywhere: the step fails, nothing is read
    else
      tiles();
  });
  return kb.build();
}

// Inputs: table, ids, inverse, then the addend if given, then the ids' check status if the
// graph appended one (i32 [2]; an addend is a float tensor).
ExpandFn expand_gather_sum(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const DType dt = in[0].dtype;
    const bool addend = in.size() > 3 && in[3].dtype != DType::I32;
    const size_t declared = addend ? 4 : 3;
    const bool checked = in.size() > declared;
    const int64_t j = ids_width(in[1]), d = in[0].shape[1], rows = numel(in[1]) / j;
    const bool vec = d % 8 == 0;
    const std::string name = "gather_sum_j" + std::to_string(j) + (vec ? "_vec" : "") +
                             (checked ? "_checked" : "") + (addend ? "_add" : "");
    KernelCall call{
        .kernel = cache->get(kernel_key(name, dt),
                             [&] { return build_gather_sum(dt, j, vec, checked, addend); }),
        .buffers = {input_slot(0), input_slot(1)},
        .dims = {rows, in[0].shape[0], d}};
    if (checked) call.buffers.push_back(input_slot(static_cast<int>(declared)));
    if (addend) call.buffers.push_back(input_slot(3));
    call.buffers.push_back(output_slot(0));
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_gather_sum_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    const DType dt = in[0].dtype;
    const int64_t j = ids_width(in[1]), e = inverse_width(in), d = in[0].shape[1];
    const bool vec = d % 8 == 0;
    const std::string name =
        "gather_sum_grad_j" + std::to_string(j) + "_e" + std::to_string(e) + (vec ? "_vec" : "");
    return OpExpansion{
        .calls = {{.kernel = cache->get(
                       kernel_key(name, dt),
                       [&] { return build_gather_rows_grad_checked(dt, e, vec, name, j); }),
                   .buffers = {input_slot(1), input_slot(2), input_slot(3), output_slot(0)},
                   .dims = {numel(in[1]) / j, in[0].shape[0], d}}}};
  };
}

// ids index the table's rows.
const IndexContract kIdsContract{
    .slot = 1,
    .bound = [](const std::vector<TensorType>& in, const Attrs&) { return in[0].shape[0]; },
    .indexes = "the rows of input 'table'"};

// A routing as the MoE combine has it, each table row named `e` times: ids [N, J] the ranks of
// their draws (ties by position) modulo V = N·J / e, and inverse [V, e] each row's positions in
// ids in order (e = 1: ids a permutation and inverse its inverse).
std::function<void(std::vector<RefTensor>&)> routing(int64_t e) {
  return [e](std::vector<RefTensor>& in) {
    RefTensor &ids = in[1], &inv = in[2];
    const int64_t count = ids.numel(), v = count / e;
    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return ids.data[a] < ids.data[b]; });
    for (int64_t r = 0; r < count; ++r) ids.data[order[r]] = static_cast<double>(r % v);
    std::vector<int64_t> filled(v, 0);
    for (int64_t q = 0; q < count; ++q) {
      const int64_t row = static_cast<int64_t>(ids.data[q]);
      inv.data[row * e + filled[row]++] = static_cast<double>(q);
    }
  };
}

// A case: table [n·j / e, d], ids [n, j] and inverse [n·j] a routing naming each row e times,
// then `extra` shapes (addend, dy) of [n, d].
OpTestCase routed_case(int64_t n, int64_t j, int64_t d, int extra, int64_t e = 1) {
  OpTestCase c{.shapes = {{n * j / e, d}, {n, j}, {n * j}}, .int_hi = 1000, .derive = routing(e)};
  for (int i = 0; i < extra; ++i) c.shapes.push_back({n, d});
  return c;
}

}  // namespace

void register_gather_sum(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  // Table rows 0..5; token 0 sums rows 4 and 1, token 1 rows 0 and 3, token 2 rows 2 and 5.
  const RefTensor table{.shape = {6, 1}, .data = {1, 2, 4, 8, 16, 32}};
  const RefTensor ids{.shape = {3, 2}, .data = {4, 1, 0, 3, 2, 5}};
  const RefTensor inverse{.shape = {6}, .data = {2, 1, 4, 3, 0, 5}};
  registry.add(
      {.name = "gather_sum",
       .doc = "y[.., :] = sum over j of table[ids[.., j], :] in j order (f32, rounded once: "
              "gather_rows then reduce_sum over the J <= 128 axis, bit for bit), plus an optional "
              "addend; inverse i32 (V·J' elements: the positions in ids of the ids naming each "
              "row, counting_sort's order) for gather_sum_grad; an id outside [0, V) makes its "
              "row NaN",
       .inputs = {"table", "ids", "inverse", "addend"},
       .optional_inputs = 1,
       .addend_input = 3,
       .outputs = {"y"},
       .input_dtypes = {{1, DType::I32}, {2, DType::I32}},
       .infer = infer_gather_sum,
       .reference = ref_gather_sum,
       .gradient = grad_gather_sum,
       .expand = expand_gather_sum(cache),
       .index_contracts = {kIdsContract},
       .tests = {.kernel = {routed_case(37, 6, 1024, 0),
                            routed_case(9, 6, 1000, 1),
                            routed_case(5, 3, 13, 1),
                            routed_case(1, 1, 1, 0),
                            // Ids drawn at random, some rows named twice, some never.
                            {.shapes = {{50, 133}, {2, 7, 4}, {50}}, .int_lo = 0, .int_hi = 50}},
                 .gradient = {routed_case(3, 2, 4, 0), routed_case(2, 3, 3, 1)},
                 .examples = {{.inputs = {table, ids, inverse}, .outputs = {{{3, 1}, {18, 9, 36}}}},
                              {.inputs = {table, ids, inverse, {{3, 1}, {0.5, 0.25, -36}}},
                               .outputs = {{{3, 1}, {18.5, 9.25, 0}}}},
                              // An id of 6 (or -1) makes its row NaN.
                              {.inputs = {table, {{2, 1}, {6, 1}}, {{6}, {0, 0, 0, 0, 0, 0}}},
                               .outputs = {{{2, 1}, {kNaN(), 2}}}}}}});
  registry.add(
      {.name = "gather_sum_grad",
       .doc = "dtable[v, :] = sum over e of dy[inverse[v, e] / J, :] in e order, NaN for a row "
              "with an entry outside [0, N·J) or naming an id other than v (the backward op of "
              "gather_sum)",
       .inputs = {"table", "ids", "inverse", "dy"},
       .outputs = {"dtable"},
       .input_dtypes = {{1, DType::I32}, {2, DType::I32}},
       .infer = infer_gather_sum_grad,
       .reference = ref_gather_sum_grad,
       .expand = expand_gather_sum_grad(cache),
       .tests = {
           .kernel = {routed_case(37, 6, 1024, 1), routed_case(5, 3, 13, 1),
                      routed_case(1, 1, 1, 1),
                      // Each table row named by 3 ids (a wrong inverse: the examples).
                      routed_case(6, 4, 40, 1, 3)},
           // Table row 1's entry names position 0, whose id is 4: a NaN row.
           .examples = {{.inputs = {table, ids, inverse, {{3, 1}, {1, 2, 3}}},
                         .outputs = {{{6, 1}, {2, 1, 3, 2, 1, 3}}}},
                        {.inputs = {table, ids, {{6}, {2, 0, 4, 3, 0, 5}}, {{3, 1}, {1, 2, 3}}},
                         .outputs = {{{6, 1}, {2, kNaN(), 3, 2, 1, 3}}}}}}});
}

}  // namespace tilerun::kernels
