// check_index: the run-time half of an index contract (OpSchema::index_contracts). graph/ runs it
// on an op's index input before the op; its status says whether every index lies in
// [0, bound) (and, for a sorted contract, is not below the element before it) and, when not, the
// first element that fails and its value. The session reads the
// status after forward() and fails the step with an error naming the tensor, the element and the
// value; the op's kernels read the status too and do nothing when it reports a bad index, so an
// index outside the contract is never used as an address.
//
// index_established is the other half: the constant status [-1, 0] that graph/ hands an op whose
// indices come from a producer declaring their range (OpSchema::index_outputs), so its kernels
// assume the contract the same way.
//
// Kernels: the first bad element is a min over the elements (the lowest index, whatever the order
// of the fold): a block-wide min per chunk of kChunk elements into an i64 scratch, then one
// block's min over the chunks, the value read once after (one block over every element took
// 152 us for 2^19 indices on the H200).
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;

std::vector<TensorType> infer_check_index(const std::vector<TensorType>& in, const Attrs&) {
  if (in[0].dtype != DType::I32)
    throw ShapeError("input 'ids' is " + to_string(in[0]) + ", expected i32 indices");
  return {TensorType{DType::I32, {2}}};
}

std::vector<RefTensor> ref_check_index(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const int64_t bound = attr_int(attrs, "bound");
  const bool sorted = attr_bool(attrs, "sorted");
  RefTensor status{.shape = {2}, .data = {-1, 0}};
  for (int64_t e = 0; e < in[0].numel(); ++e) {
    const double v = in[0].data[e];
    if (v < 0 || v >= static_cast<double>(bound) || (sorted && e > 0 && v < in[0].data[e - 1])) {
      status.data = {static_cast<double>(e), v};
      break;
    }
  }
  return {status};
}

// first[c] = the lowest bad element of chunk c, or N. Parameters ids, first; N; bound, sorted
// (nonzero: an element below the one before it is bad too).
cc::Kernel build_check_index_chunks() {
  cc::KernelBuilder kb("check_index_chunks");
  cc::Dim n = kb.dim("N");
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf first = kb.output("first", DType::I64, {cc::ceildiv(n, cc::Val(kChunk))});
  cc::Val bound = kb.scalar_i64("bound");
  cc::Val sorted = kb.scalar_i64("sorted");
  kb.body({cc::ceildiv(n, cc::Val(kChunk))}, kThreads, [&](cc::Scope& s) {
    cc::Idx c = s.block_idx(0);
    cc::Idx e0 = s.let(c * kChunk, "e0");
    cc::Val m = s.reduce_min(cc::min(n - e0, cc::Val(kChunk)), [&](cc::Idx i) {
      cc::Idx at = e0 + i;
      cc::Val v = cc::to_i64(ids(at));
      // The element before (itself for the first: never below it).
      cc::Val before = cc::to_i64(ids(cc::max(at - 1, cc::Val(int64_t{0}))));
      cc::Val bad = v < 0 || v >= bound || (sorted != 0 && v < before);
      return cc::select(bad, at, n);
    });
    s.parallel(1, [&](cc::Idx) { first(c) = m; });
  });
  return kb.build();
}

// The status from the chunks' firsts. Parameters ids, first, status; N.
cc::Kernel build_check_index() {
  cc::KernelBuilder kb("check_index");
  cc::Dim n = kb.dim("N");
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf firsts = kb.input("first", DType::I64, {cc::ceildiv(n, cc::Val(kChunk))});
  cc::Buf status = kb.output("status", DType::I32, {2});
  kb.body({1}, kThreads, [&](cc::Scope& s) {
    cc::Val first =
        s.reduce_min(cc::ceildiv(n, cc::Val(kChunk)), [&](cc::Idx c) { return firsts(c); });
    s.parallel(1, [&](cc::Idx i) {
      s.if_then_else(
          first < n,
          [&] {
            status(i) = cc::to_i32(first);
            // Clamped only so that the analysis sees the address in bounds: first < n here.
            status(i + 1) = ids(cc::max(cc::min(first, n - 1), cc::Val(int64_t{0})));
          },
          [&] {
            status(i) = cc::to_i32(cc::Val(-1));
            status(i + 1) = cc::to_i32(cc::Val(0));
          });
    });
  });
  return kb.build();
}

ExpandFn expand_check_index(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    const int64_t n = numel(in[0]);
    KernelCall chunks{.kernel = cache->get("check_index_chunks", build_check_index_chunks),
                      .buffers = {input_slot(0), scratch_slot(0)},
                      .dims = {n},
                      .scalars = {static_cast<double>(attr_int(attrs, "bound")),
                                  attr_bool(attrs, "sorted") ? 1.0 : 0.0}};
    KernelCall call{.kernel = cache->get("check_index", build_check_index),
                    .buffers = {input_slot(0), scratch_slot(0), output_slot(0)},
                    .dims = {n}};
    return OpExpansion{.scratch = {{DType::I64, {(n + kChunk - 1) / kChunk}}},
                       .calls = {chunks, call}};
  };
}

// index_established: the constant status of contracts established by construction.
std::vector<TensorType> infer_established(const std::vector<TensorType>&, const Attrs&) {
  return {TensorType{DType::I32, {2}}};
}

std::vector<RefTensor> ref_established(const std::vector<RefTensor>&, const Attrs&) {
  return {RefTensor{.shape = {2}, .data = {-1, 0}}};
}

cc::Kernel build_established() {
  cc::KernelBuilder kb("index_established");
  cc::Buf status = kb.output("status", DType::I32, {2});
  kb.body({1}, 32, [&](cc::Scope& s) {
    s.parallel(
        2, [&](cc::Idx i) { status(i) = cc::to_i32(cc::select(i == 0, cc::Val(-1), cc::Val(0))); });
  });
  return kb.build();
}

ExpandFn expand_established(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>&, const std::vector<TensorType>&, const Attrs&) {
    KernelCall call{.kernel = cache->get("index_established", build_established),
                    .buffers = {output_slot(0)}};
    return OpExpansion{.calls = {call}};
  };
}

OpTestCase ids_case(std::vector<int64_t> shape, int64_t bound, int64_t lo, int64_t hi) {
  return {.shapes = {std::move(shape)}, .attrs = {{"bound", bound}}, .int_lo = lo, .int_hi = hi};
}

// A sorted contract's check: running sums of steps in [lo, hi) (sorted unless a step is
// negative), or plain draws when not `running`.
OpTestCase sorted_case(std::vector<int64_t> shape, int64_t bound, int64_t lo, int64_t hi,
                       bool running) {
  OpTestCase c = ids_case(std::move(shape), bound, lo, hi);
  c.attrs["sorted"] = true;
  if (running) c.running_sums = {0};
  return c;
}

}  // namespace

void register_index_check(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "check_index",
       .doc = "status = [-1, 0] when every element of ids lies in [0, bound), else [e, ids[e]] "
              "for the first element e outside it (row-major): the run-time check of an index "
              "contract, added by the graph before an op that indexes with ids",
       .inputs = {"ids"},
       .outputs = {"status"},
       .attrs = {{.name = "bound",
                  .kind = AttrKind::Int,
                  .doc = "the indices' exclusive upper bound",
                  .positive = true},
                 {.name = "sorted",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "an element below the one before it (row-major) fails too: the "
                         "check of a sorted contract (segment starts)"}},
       .dtypes = {DType::I32},  // every slot is fixed: run once
       .input_dtypes = {{0, DType::I32}},
       .output_dtypes = {{0, DType::I32}},
       .infer = infer_check_index,
       .reference = ref_check_index,
       .expand = expand_check_index(cache),
       .tests = {.kernel = {ids_case({1}, 1, 0, 1), ids_case({7, 33}, 20, 0, 20),
                            ids_case({2, 1000}, 50, 0, 51), ids_case({3000}, 5, -1, 5),
                            ids_case({65}, 100, -200, 200),
                            // Several chunks, every index in range but a rare one.
                            ids_case({5, 10000}, 49999, 0, 50000),
                            // Sorted: running sums in range; ones that run past the bound;
                            // steps that go down now and then; plain draws.
                            sorted_case({70}, 1000, 0, 9, true), sorted_case({70}, 100, 0, 9, true),
                            sorted_case({40000}, 1 << 30, -1, 2000, true),
                            sorted_case({64}, 64, 0, 64, false)},
                 // All in range; the first of two bad ones (element 1, value 7) is reported.
                 .examples = {{.inputs = {{{3}, {0, 4, 2}}},
                               .attrs = {{"bound", int64_t{5}}},
                               .outputs = {{{2}, {-1, 0}}}},
                              {.inputs = {{{2, 2}, {0, 7, -1, 3}}},
                               .attrs = {{"bound", int64_t{5}}},
                               .outputs = {{{2}, {1, 7}}}}}}});
  registry.add(
      {.name = "index_established",
       .doc = "status = [-1, 0]: the status of an index contract established by construction "
              "(the indices' producer declares their range), added by the graph so that an op "
              "reads one status whichever way its contract was established",
       .outputs = {"status"},
       .dtypes = {DType::I32},  // every slot is fixed: run once
       .output_dtypes = {{0, DType::I32}},
       .infer = infer_established,
       .reference = ref_established,
       .expand = expand_established(cache),
       .tests = {.kernel = {{}}, .examples = {{.outputs = {{{2}, {-1, 0}}}}}}});
}

}  // namespace tilerun::kernels
