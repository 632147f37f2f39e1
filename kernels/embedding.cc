// over 600 lines: embedding and gather_rows are one family (the same gather, two owner-computes
// gradients), with their references and the test cases that pin each kernel variant.
// embedding (rows of a table picked by i32 ids) and its backward op embedding_grad. Kernels:
// the gather is one block per tile of tokens × columns, each thread 4 vectors of 16 bytes (or 4
// elements when D is not a multiple of a vector; build_embedding); an id outside [0, V) gives a
// NaN row, never a read outside the table. The gradient is
// owner-computes: one block per (table row, column tile), each thread one column, adding the dy
// rows of the tokens that name the row in token order, so the sum's order is fixed by the ids
// alone and nothing is atomic. Up to kMaxSortedIds ids, one block first sorts them by (id,
// token) (bitonic_sort), and each table row finds its run of tokens by binary search: O(N log² N
// + V·D·log N + N·D) instead of scanning every id for every row, O(V·D·N); the same sums in the
// same order, so the same bits.
//
// gather_rows is embedding with the ids' inverse at hand (MoE dispatch and combine: the ids are
// counting_sort's row, position or order, and their inverse its position or order): forward the
// same gather, backward owner-computes without sorting or scanning, each table row summing the
// dy rows its J inverse entries name, in j order: O(V·J·D) whatever the number of ids (the
// scan above is O(V·N·D), the sort limited to kMaxSortedIds). Every entry is verified (it must
// name an id equal to the row), so a wrong inverse gives a NaN row, never a silent wrong sum.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
#include "kernels/expand_util.h"
#include "kernels/gather_kernels.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/row_tile.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;  // columns per block
constexpr int kSortThreads = 256;
// The most ids the gradient sorts in one block (their keys fill 128 KiB of shared memory);
// beyond, it scans every id for every table row.
constexpr int64_t kMaxSortedIds = 16384;

// ---- Inference -----------------------------------------------------------------------------

// (table [V, D], ids i32 [..]) -> [.., D].
std::vector<TensorType> infer_embedding(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "table");
  expect_rank(in[0], 2, "table");
  if (in[1].dtype != DType::I32)
    throw ShapeError("input 'ids' is " + to_string(in[1]) + ", expected i32 ids");
  std::vector<int64_t> shape = in[1].shape;
  shape.push_back(in[0].shape[1]);
  return {TensorType{in[0].dtype, shape}};
}

// (table, ids, dy) -> dtable.
std::vector<TensorType> infer_embedding_grad(const std::vector<TensorType>& in,
                                             const Attrs& attrs) {
  TensorType y = infer_embedding(in, attrs)[0];
  expect_same(in[2], "dy", y, "the embedding's output");
  return {in[0]};
}

// ---- References ----------------------------------------------------------------------------

int64_t id_of(double v) { return static_cast<int64_t>(std::llround(v)); }

std::vector<RefTensor> ref_embedding(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &table = in[0], &ids = in[1];
  const int64_t v = table.shape[0], d = table.shape[1];
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(d);
  RefTensor y = ref_zeros(shape);
  for (int64_t n = 0; n < ids.numel(); ++n) {
    const int64_t id = id_of(ids.data[n]);
    for (int64_t j = 0; j < d; ++j)
      y.data[n * d + j] = id >= 0 && id < v ? table.data[id * d + j] : kNaN();
  }
  return {y};
}

// dtable[v] = sum of dy[n] over the tokens n with ids[n] == v (ids outside [0, V) add nothing).
std::vector<RefTensor> ref_embedding_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &table = in[0], &ids = in[1], &dy = in[2];
  const int64_t v = table.shape[0], d = table.shape[1];
  RefTensor dt = ref_zeros(table.shape);
  for (int64_t n = 0; n < ids.numel(); ++n) {
    const int64_t id = id_of(ids.data[n]);
    if (id < 0 || id >= v) continue;
    for (int64_t j = 0; j < d; ++j) dt.data[id * d + j] += dy.data[n * d + j];
  }
  return {dt};
}

// ---- Gradient rule -------------------------------------------------------------------------

// The ids are integers: only the table has a gradient (autodiff asks only for float inputs).
std::vector<GradOp> grad_embedding(const std::vector<TensorType>&, const Attrs&,
                                   const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"embedding_grad", {"x0", "x1", "dy0"}, {"dx0"}, {}}};
}

// ---- Kernels -------------------------------------------------------------------------------

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

// `checked`: the ids come with their contract (an index input, ids < V) and the status of the
// check_index that established it; blocks do nothing when the status reports a bad id, and the
// analysis proves the in-range guard from the contract and removes it.
// `vec`: D is a multiple of the vector width, so each thread's `width` adjacent columns move as
// one 16-byte load and store (the analysis proves them aligned: id·D and token·D are). A block
// whose tile lies wholly inside y copies without guards (a guard keeps accesses scalar); the
// ragged edges take the guarded copy. Checked ids are proved in [0, V) from their contract, so
// the in-range test is removed too. With one 4-byte element a thread and 8 rows a block, the KV
// gather of kv f32 [1024, 128] by idx [4096, 128] took 924 us on the H200, and 908 with this
// tile (torch 320, floor 56): codegen still serialises each thread's vectors (bench/RESULTS.md,
// twenty-second session). With 1 row a block, each block moved 256 bytes (bf16, 128 columns), and
// the million rows of V4's indexer target ([T, W + KI] rows at T = 4096) were bound by block
// launches (5.0 ms for 1.07 GB, 22x the byte floor).
static_assert(kThreads == kRowTileThreads, "the block row_tile.h sizes the tile for");

cc::Kernel build_embedding(DType dtype, bool checked, int64_t cols, bool vec) {
  const int width = vec ? vector_width(dtype) : 1;
  const int64_t rows = row_tile_rows(cols, width);
  cc::KernelBuilder kb(std::string(checked ? "embedding_checked_" : "embedding_") +
                       std::to_string(cols) + (vec ? "_vec" : "") + suffix(dtype));
  cc::Dim n = kb.dim("N"), v = kb.dim("V"), d = kb.dim("D", {.divisible_by = width});
  cc::Buf table = kb.input("table", dtype, {v, d});
  cc::Buf ids = checked ? kb.index_input("ids", {n}, v) : kb.input("ids", DType::I32, {n});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf y = kb.output("y", dtype, {n, d});
  kb.body({cc::ceildiv(n, rows), cc::ceildiv(d, cols)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row0 = s.let(s.block_idx(0) * rows, "row0");
    cc::Idx col0 = s.let(s.block_idx(1) * cols, "col0");
    auto copy = [&](bool guarded) {
      s.annotate_layout(width);
      s.parallel(rows, cols, [&](cc::Idx r, cc::Idx i) {
        cc::Idx token = row0 + r, col = col0 + i;
        auto gather = [&] {
          cc::Val id = s.let(cc::to_i64(ids(token)), "id");
          cc::Val in_range = s.let(id >= 0 && id < v, "in_range");
          s.if_then_else(
              in_range, [&] { y(token, col) = table(id, col); },
              [&] { y(token, col) = cc::Val(std::numeric_limits<float>::quiet_NaN()); });
        };
        if (guarded)
          s.if_then(token < n && col < d, gather);
        else
          gather();
      });
    };
    auto tiles = [&] {
      s.if_then_else(
          row0 + rows <= n && col0 + cols <= d, [&] { copy(false); }, [&] { copy(true); });
    };
    if (checked)
      s.if_then(status(0) < 0, tiles);  // a bad id anywhere: the step fails, nothing is read
    else
      tiles();
  });
  return kb.build();
}

cc::Kernel build_embedding_grad(DType dtype) {
  cc::KernelBuilder kb("embedding_grad" + suffix(dtype));
  cc::Dim n = kb.dim("N"), v = kb.dim("V"), d = kb.dim("D");
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf dy = kb.input("dy", dtype, {n, d});
  cc::Buf dt = kb.output("dtable", dtype, {v, d});
  kb.body({v, cc::ceildiv(d, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.block_idx(1) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx col = base + i;
      s.if_then(col < d, [&] {
        acc(i) = 0.0f;
        s.serial(n, [&](cc::Idx t) {
          s.if_then(cc::to_i64(ids(t)) == row, [&] { acc(i) = acc(i) + dy(t, col); });
        });
        dt(row, col) = acc(i);
      });
    });
  });
  return kb.build();
}

// The ids sorted by (id, token) in one block (bitonic_sort over m >= N keys id·2^32 + token):
// sorted_ids[q] and token[q] for q in [0, N).
cc::Kernel build_sort_ids(int64_t m) {
  cc::KernelBuilder kb("embedding_sort_ids_" + std::to_string(m));
  cc::Dim n = kb.dim("N", {.min = 1, .max = m});
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf sorted = kb.output("sorted_ids", DType::I32, {n});
  cc::Buf token = kb.output("token", DType::I32, {n});
  kb.body({1}, kSortThreads, [&](cc::Scope& s) {
    cc::Buf keys = s.alloc_shared("keys", DType::I64, {m});
    s.parallel(m, [&](cc::Idx i) {
      s.if_then_else(
          i < n, [&] { keys(i) = cc::to_i64(ids(i)) * int64_t{4294967296} + i; },
          [&] { keys(i) = cc::Val(std::numeric_limits<int64_t>::max()); });  // sorts last
    });
    bitonic_sort(s, keys, m, /*descending=*/false);
    s.parallel(n, [&](cc::Idx q) {
      cc::Val key = s.let(keys(q), "key");
      sorted(q) = cc::to_i32(cc::shr(key, cc::Val(int64_t{32})));
      token(q) = cc::to_i32(key & 4294967295);
    });
  });
  return kb.build();
}

// Owner-computes over the sorted ids: the block of table row v finds the run of ids equal to v
// by two binary searches (`steps` = log2(m) + 1 halvings cover N <= m) and adds those tokens' dy
// rows in token order, the order of build_embedding_grad's scan, so the sums are the same bits.
cc::Kernel build_embedding_grad_sorted(DType dtype, int64_t m) {
  const int steps = search_steps(m);
  cc::KernelBuilder kb("embedding_grad_sorted_" + std::to_string(m) + suffix(dtype));
  cc::Dim n = kb.dim("N", {.min = 1, .max = m}), v = kb.dim("V"), d = kb.dim("D");
  cc::Buf sorted = kb.input("sorted_ids", DType::I32, {n});
  cc::Buf token = kb.input("token", DType::I32, {n});
  cc::Buf dy = kb.input("dy", dtype, {n, d});
  cc::Buf dt = kb.output("dtable", dtype, {v, d});
  kb.body({v, cc::ceildiv(d, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.block_idx(1) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kThreads});
    cc::Buf lo = s.alloc_fragment("lo", DType::I64, {kThreads});
    cc::Buf hi = s.alloc_fragment("hi", DType::I64, {kThreads});
    cc::Buf first = s.alloc_fragment("first", DType::I64, {kThreads});
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx col = base + i;
      s.if_then(col < d, [&] {
        // The first q with sorted_ids[q] >= target, in lo.
        auto lower_bound = [&](const cc::Val& target) {
          sorted_lower_bound(
              s, lo, hi, i, n, steps, [&](const cc::Val& q) { return cc::to_i64(sorted(q)); },
              target);
        };
        lower_bound(row);
        first(i) = lo(i);
        lower_bound(row + 1);
        cc::Val begin = s.let(first(i), "begin");
        acc(i) = 0.0f;
        s.serial(lo(i) - begin,
                 [&](cc::Idx q) { acc(i) = acc(i) + dy(cc::to_i64(token(begin + q)), col); });
        dt(row, col) = acc(i);
      });
    });
  });
  return kb.build();
}

int64_t ids_count(const TensorType& ids) { return numel(ids); }

// ---- gather_rows ---------------------------------------------------------------------------

// (table [V, D], ids i32 [..] (N), inverse i32 [..] (V·J)): J, each row's count of inverse entries.
int64_t inverse_width(const std::vector<TensorType>& in) {
  const int64_t v = in[0].shape.empty() ? 0 : in[0].shape[0], count = numel(in[2]);
  if (in[2].dtype != DType::I32 || v == 0 || count % v != 0)
    throw ShapeError("input 'inverse' is " + to_string(in[2]) +
                     ", expected i32 with a multiple of " + "the table's " + std::to_string(v) +
                     " rows of elements (J per row)");
  return count / v;
}

std::vector<TensorType> infer_gather_rows(const std::vector<TensorType>& in, const Attrs& attrs) {
  std::vector<TensorType> y = infer_embedding(in, attrs);
  inverse_width(in);
  return y;
}

// (table, ids, inverse, dy) -> dtable.
std::vector<TensorType> infer_gather_rows_grad(const std::vector<TensorType>& in,
                                               const Attrs& attrs) {
  TensorType y = infer_gather_rows(in, attrs)[0];
  expect_same(in[3], "dy", y, "the gathered rows");
  return {in[0]};
}

// dtable[v] = sum over j of dy[inverse[v, j]], in j order; NaN where an entry names no id equal
// to v (or lies outside [0, N)).
std::vector<RefTensor> ref_gather_rows_grad(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &table = in[0], &ids = in[1], &inv = in[2], &dy = in[3];
  const int64_t v = table.shape[0], d = table.shape[1], n = ids.numel(), j = inv.numel() / v;
  RefTensor dt = ref_zeros(table.shape);
  for (int64_t row = 0; row < v; ++row) {
    bool ok = true;
    for (int64_t p = 0; p < j; ++p) {
      const int64_t q = id_of(inv.data[row * j + p]);
      if (q < 0 || q >= n || id_of(ids.data[q]) != row) {
        ok = false;
        continue;
      }
      for (int64_t c = 0; c < d; ++c) dt.data[row * d + c] += dy.data[q * d + c];
    }
    if (!ok)
      for (int64_t c = 0; c < d; ++c) dt.data[row * d + c] = kNaN();
  }
  return {dt};
}

std::vector<GradOp> grad_gather_rows(const std::vector<TensorType>&, const Attrs&,
                                     const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"gather_rows_grad", {"x0", "x1", "x2", "dy0"}, {"dx0"}, {}}};
}

// The entries' shared i32s of build_gather_rows_grad_checked (gather_kernels.h); wider: the scan
// below.
constexpr int64_t kMaxInverseWidth = 1024;

}  // namespace

// Before this kernel, each thread walked inverse -> ids -> dy one entry at a time, three
// dependent loads per entry: 60 us for the MoE dispatch's gradient at T = 1024 (25 MB, a 5 us
// floor).

cc::Kernel build_gather_rows_grad_checked(DType dtype, int64_t j_n, bool vec,
                                          const std::string& name, int64_t group) {
  const int width = vec ? 8 : 1;
  const int64_t cols = kThreads * width;
  cc::KernelBuilder kb(name + suffix(dtype));
  cc::Dim n = kb.dim("N"), v = kb.dim("V"), d = kb.dim("D", {.divisible_by = width});
  const cc::Val count = group == 1 ? cc::Val(n) : n * group;  // the ids
  cc::Buf ids = kb.input("ids", DType::I32, {count});
  cc::Buf inv = kb.input("inverse", DType::I32, {v, cc::Val(j_n)});
  cc::Buf dy = kb.input("dy", dtype, {n, d});
  cc::Buf dt = kb.output("dtable", dtype, {v, d});
  kb.body({v, cc::ceildiv(d, cols)}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Idx base = s.let(s.block_idx(1) * cols, "base");
    cc::Buf qs = s.alloc_shared("qs", DType::I32, {j_n});  // entry p's dy row, or -1
    s.parallel(j_n, [&](cc::Idx p) {
      cc::Val q = s.let(cc::to_i64(inv(row, p)), "q");
      qs(p) = cc::literal(cc::Type::I32, -1);
      s.if_then(q >= 0 && q < count, [&] {
        s.if_then(cc::to_i64(ids(q)) == row,
                  [&] { qs(p) = group == 1 ? cc::Val(inv(row, p)) : cc::to_i32(q / group); });
      });
    });
    s.barrier();
    cc::Val bad = s.reduce_max(cc::Val(j_n), [&](cc::Idx p) {
      return cc::select(cc::to_i64(qs(p)) < 0, cc::Val(1.0f), cc::Val(0.0f));
    });
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {cols});
    // Each step its own parallel with no inner loop or guard in it, so that its global accesses
    // can move as vectors; a whole tile (every one but a ragged last) has no column guard.
    auto tile = [&](bool guarded) {
      auto columns = [&](const std::function<void(const cc::Idx&, const cc::Idx&)>& body) {
        s.annotate_layout(width);
        s.parallel(cols, [&](cc::Idx i) {
          cc::Idx col = base + i;
          if (guarded)
            s.if_then(col < d, [&] { body(i, col); });
          else
            body(i, col);
        });
      };
      s.if_then_else(
          bad > 0.0f,
          [&] {
            columns([&](const cc::Idx&, const cc::Idx& col) {
              dt(row, col) = std::numeric_limits<float>::quiet_NaN();
            });
          },
          [&] {
            columns([&](const cc::Idx& i, const cc::Idx&) { acc(i) = 0.0f; });
            s.serial(cc::Val(j_n), [&](cc::Idx p) {
              // Every entry checked by now: the clamp changes no q, it proves the loads in bounds.
              cc::Val q = s.let(cc::max(cc::min(cc::to_i64(qs(p)), n - 1), cc::Val(0)), "q");
              columns([&](const cc::Idx& i, const cc::Idx& col) { acc(i) = acc(i) + dy(q, col); });
            });
            columns([&](const cc::Idx& i, const cc::Idx& col) { dt(row, col) = acc(i); });
          });
    };
    s.if_then_else(
        base + cols <= d, [&] { tile(false); }, [&] { tile(true); });
  });
  return kb.build();
}

namespace {

// The general form, for any J: each thread walks its column's J entries, each checked in turn.
// `flat`: a thread per element of the flat [V, D] table instead of a block per row (narrow rows:
// the route weights' D = 1 left 127 of a block's 128 threads idle, 31 us at T = 4096).
cc::Kernel build_gather_rows_grad(DType dtype, bool flat) {
  cc::KernelBuilder kb(std::string("gather_rows_grad") + (flat ? "_flat" : "") + suffix(dtype));
  cc::Dim n = kb.dim("N"), v = kb.dim("V"), j = kb.dim("J"), d = kb.dim("D");
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf inv = kb.input("inverse", DType::I32, {v, j});
  cc::Buf dy = kb.input("dy", dtype, {n, d});
  cc::Buf dt = kb.output("dtable", dtype, {v, d});
  std::vector<cc::Val> grid = {v, cc::ceildiv(d, kThreads)};
  if (flat) grid = {cc::ceildiv(v * d, kThreads)};
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(flat ? 0 : 1) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kThreads});
    cc::Buf bad = s.alloc_fragment("bad", DType::F32, {kThreads});  // 1: an entry failed
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Val e = s.let(base + i, "e");
      cc::Val row = flat ? s.let(e / d, "row") : cc::Val(s.block_idx(0));
      cc::Val col = flat ? s.let(e % d, "col") : e;
      s.if_then(flat ? e < v * d : col < d, [&] {
        acc(i) = 0.0f;
        bad(i) = 0.0f;
        s.serial(j, [&](cc::Idx p) {
          cc::Val q = s.let(cc::to_i64(inv(row, p)), "q");
          s.if_then_else(
              q >= 0 && q < n,
              [&] {
                s.if_then_else(
                    cc::to_i64(ids(q)) == row, [&] { acc(i) = acc(i) + dy(q, col); },
                    [&] { bad(i) = 1.0f; });
              },
              [&] { bad(i) = 1.0f; });
        });
        dt(row, col) =
            cc::select(bad(i) == 0.0f, acc(i), cc::Val(std::numeric_limits<float>::quiet_NaN()));
      });
    });
  });
  return kb.build();
}

// The gather of embedding and gather_rows: `declared` inputs (2, or 3 with gather_rows' inverse,
// which the forward does not read), then the ids' check status when the graph appended one.
ExpandFn expand_gather(std::shared_ptr<KernelCache> cache, size_t declared) {
  return [cache, declared](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                           const Attrs&) {
    DType dt = in[0].dtype;
    const bool checked = in.size() > declared;
    const int64_t d = in[0].shape[1];
    const bool vec = d % vector_width(dt) == 0;
    const int64_t cols = row_tile_cols(d, vec ? vector_width(dt) : 1);
    const std::string name = std::string(checked ? "embedding_checked_" : "embedding_") +
                             std::to_string(cols) + (vec ? "_vec" : "");
    KernelCall call{.kernel = cache->get(kernel_key(name, dt),
                                         [&] { return build_embedding(dt, checked, cols, vec); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {ids_count(in[1]), in[0].shape[0], in[0].shape[1]}};
    if (checked)
      call.buffers.insert(call.buffers.begin() + 2, input_slot(static_cast<int>(declared)));
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_embedding_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    DType dt = in[0].dtype;
    const int64_t n = ids_count(in[1]), v = in[0].shape[0], d = in[0].shape[1];
    if (n <= kMaxSortedIds) {
      const int64_t m = bitonic_length(n);
      OpExpansion ex{.scratch = {{DType::I32, {n}}, {DType::I32, {n}}}};
      ex.calls.push_back({.kernel = cache->get("embedding_sort_ids_" + std::to_string(m),
                                               [&] { return build_sort_ids(m); }),
                          .buffers = {input_slot(1), scratch_slot(0), scratch_slot(1)},
                          .dims = {n}});
      ex.calls.push_back(
          {.kernel = cache->get(kernel_key("embedding_grad_sorted_" + std::to_string(m), dt),
                                [&] { return build_embedding_grad_sorted(dt, m); }),
           .buffers = {scratch_slot(0), scratch_slot(1), input_slot(2), output_slot(0)},
           .dims = {n, v, d}});
      return ex;
    }
    KernelCall call{.kernel = cache->get(kernel_key("embedding_grad", dt),
                                         [&] { return build_embedding_grad(dt); }),
                    .buffers = {input_slot(1), input_slot(2), output_slot(0)},
                    .dims = {ids_count(in[1]), in[0].shape[0], in[0].shape[1]}};
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_gather_rows_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    DType dt = in[0].dtype;
    const int64_t j = inverse_width(in), d = in[0].shape[1];
    const std::vector<KernelArg> buffers = {input_slot(1), input_slot(2), input_slot(3),
                                            output_slot(0)};
    const bool narrow = d < 32;  // a thread per element
    if (j >= 1 && j <= kMaxInverseWidth && ids_count(in[1]) >= 1 && !narrow) {
      const bool vec = d % 8 == 0;
      const std::string name = "gather_rows_grad_j" + std::to_string(j) + (vec ? "_vec" : "");
      return OpExpansion{
          .calls = {{.kernel = cache->get(
                         kernel_key(name, dt),
                         [&] { return build_gather_rows_grad_checked(dt, j, vec, name); }),
                     .buffers = buffers,
                     .dims = {ids_count(in[1]), in[0].shape[0], d}}}};
    }
    KernelCall call{
        .kernel = cache->get(kernel_key(narrow ? "gather_rows_grad_flat" : "gather_rows_grad", dt),
                             [&] { return build_gather_rows_grad(dt, narrow); }),
        .buffers = buffers,
        .dims = {ids_count(in[1]), in[0].shape[0], j, d}};
    return OpExpansion{.calls = {call}};
  };
}

// A case: table [v, d] in [-2, 2), ids of `ids_shape` uniform in [lo, hi).
OpTestCase ids_case(int64_t v, int64_t d, std::vector<int64_t> ids_shape, int64_t lo, int64_t hi,
                    bool with_dy = false) {
  OpTestCase c{.shapes = {{v, d}, ids_shape}, .int_lo = lo, .int_hi = hi};
  if (with_dy) {
    ids_shape.push_back(d);
    c.shapes.push_back(ids_shape);
  }
  return c;
}

// ids index the table's rows.
const IndexContract kIdsContract{
    .slot = 1,
    .bound = [](const std::vector<TensorType>& in, const Attrs&) { return in[0].shape[0]; },
    .indexes = "the rows of input 'table'"};

}  // namespace

void register_embedding(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "embedding",
       .doc = "y[.., :] = table[ids[..], :]: the rows of table [V, D] named by i32 ids [..] "
              "(ids are checked at run time: one outside [0, V) fails the step, naming it)",
       .inputs = {"table", "ids"},
       .outputs = {"y"},
       .input_dtypes = {{1, DType::I32}},
       .infer = infer_embedding,
       .reference = ref_embedding,
       .gradient = grad_embedding,
       .expand = expand_gather(cache, 2),
       .index_contracts = {kIdsContract},
       .tests = {.kernel = {ids_case(1, 1, {1}, 0, 1), ids_case(7, 5, {3}, 0, 7),
                            ids_case(50, 133, {2, 65}, 0, 50), ids_case(9, 16, {}, 0, 9)},
                 // Repeated ids: the gradient of a row named twice sums both tokens' dy.
                 .gradient = {ids_case(5, 3, {7}, 0, 5), ids_case(3, 2, {2, 3}, 0, 3)},
                 // Rows 2, 0, 2 of a [3, 2] table; an id of 3 or -1 gives a NaN row (the random
                 // cases keep their ids in range: the suite poisons outputs with NaN).
                 .examples = {{.inputs = {{{3, 2}, {1, 2, 3, 4, 5, 6}}, {{3}, {2, 0, 2}}},
                               .outputs = {{{3, 2}, {5, 6, 1, 2, 5, 6}}}},
                              {.inputs = {{{2, 1}, {1, 2}}, {{2}, {3, -1}}},
                               .outputs = {{{2, 1}, {kNaN(), kNaN()}}}}}}});
  registry.add(
      {.name = "embedding_grad",
       .doc = "dtable[v, :] = sum of dy[n, :] over the tokens n with ids[n] = v, in token order "
              "(the backward op of embedding; ids outside [0, V) add nothing)",
       .inputs = {"table", "ids", "dy"},
       .outputs = {"dtable"},
       .input_dtypes = {{1, DType::I32}},
       .infer = infer_embedding_grad,
       .reference = ref_embedding_grad,
       .expand = expand_embedding_grad(cache),
       .tests = {
           .kernel = {ids_case(1, 1, {1}, 0, 1, true), ids_case(7, 5, {3}, 0, 7, true),
                      ids_case(50, 133, {2, 65}, 0, 50, true), ids_case(4, 3, {11}, -2, 6, true),
                      // Past kMaxSortedIds: the scan over every id for every row.
                      ids_case(3, 2, {kMaxSortedIds + 5}, -1, 4, true),
                      ids_case(9, 16, {}, 0, 9, true)},
           // Row 0 is named by tokens 1 and 2, row 1 by none.
           .examples = {
               {.inputs = {{{2, 2}, {9, 9, 9, 9}}, {{3}, {2, 0, 0}}, {{3, 2}, {1, 2, 3, 4, 5, 6}}},
                .outputs = {{{2, 2}, {8, 10, 0, 0}}}}}}});
  // Each of 3 rows named twice: ids 2 0 1 0 1 2, inverse (row 0: tokens 1, 3; row 1: 2, 4; row
  // 2: 0, 5).
  const RefTensor table{.shape = {3, 2}, .data = {1, 2, 3, 4, 5, 6}};
  const RefTensor ids{.shape = {6}, .data = {2, 0, 1, 0, 1, 2}};
  const RefTensor inverse{.shape = {3, 2}, .data = {1, 3, 2, 4, 0, 5}};
  registry.add(
      {.name = "gather_rows",
       .doc = "y[.., :] = table[ids[..], :] as embedding, with inverse i32 (V·J elements: the J "
              "positions of the ids naming each of the V rows, e.g. counting_sort's position or "
              "order) for a gradient without sorting: gather_rows_grad",
       .inputs = {"table", "ids", "inverse"},
       .outputs = {"y"},
       .input_dtypes = {{1, DType::I32}, {2, DType::I32}},
       .infer = infer_gather_rows,
       .reference =
           [](const std::vector<RefTensor>& in, const Attrs& attrs) {
             return ref_embedding({in[0], in[1]}, attrs);
           },
       .gradient = grad_gather_rows,
       .expand = expand_gather(cache, 3),
       .index_contracts = {kIdsContract},
       .tests = {.kernel = {{.shapes = {{7, 5}, {14}, {7, 2}}, .int_lo = 0, .int_hi = 7},
                            {.shapes = {{50, 133}, {2, 25}, {50}}, .int_lo = 0, .int_hi = 50}},
                 // Finite differences need a true inverse: one row, one id (the gradient over
                 // real routings is tests/kernels/gather_rows_test.cc's).
                 .gradient = {{.shapes = {{1, 4}, {1}, {1}}}},
                 .examples = {{.inputs = {table, ids, inverse},
                               .outputs = {{{6, 2}, {5, 6, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6}}}}}}});
  registry.add(
      {.name = "gather_rows_grad",
       .doc = "dtable[v, :] = sum over j of dy[inverse[v, j], :] in j order, NaN for a row with "
              "an entry outside [0, N) or naming an id other than v (the backward op of "
              "gather_rows)",
       .inputs = {"table", "ids", "inverse", "dy"},
       .outputs = {"dtable"},
       .input_dtypes = {{1, DType::I32}, {2, DType::I32}},
       .infer = infer_gather_rows_grad,
       .reference = ref_gather_rows_grad,
       .expand = expand_gather_rows_grad(cache),
       .tests = {
           // Random inverses are wrong ones (NaN rows: the examples); one table row named by
           // every id is a valid inverse for any ids in [0, 1). Random routings:
           // tests/kernels/gather_rows_test.cc.
           .kernel = {{.shapes = {{1, 5}, {4}, {1, 4}, {4, 5}}},
                      {.shapes = {{1, 133}, {3}, {1, 3}, {3, 133}}}},
           // Row 1's second entry names token 3, whose id is 0: a NaN row.
           .examples = {
               {.inputs = {table, ids, inverse, {{6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}},
                .outputs = {{{3, 2}, {10, 12, 14, 16, 12, 14}}}},
               {.inputs = {table,
                           ids,
                           {{3, 2}, {1, 3, 2, 3, 0, 5}},
                           {{6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}},
                .outputs = {{{3, 2}, {10, 12, kNaN(), kNaN(), 12, 14}}}}}}});
}

}  // namespace tilerun::kernels
