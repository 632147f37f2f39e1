// over 600 lines: bincount, counting_sort and argsort are one family around the seven kernels of
// the sort (argsort is the sort with one output kept), with their references and test cases.
// MoE dispatch without atomics: bincount (how many ids name each bin) and counting_sort (a
// stable sort of small integer keys: each id's position in bin-major order, ties in index order,
// and the inverse permutation). Deterministic and exact: integers only, every output element
// written by exactly one thread (the inverse through position, a permutation: its stores proved
// unique), so the result is the same on every device.
//
// counting_sort's kernels, over the ids flattened to N, in chunks of C ids (G = ceil(N / C); C =
// 256, or up to 2048 for many bins, chunk_for):
//   1. chunk_counts: cnt[c, e] = how many ids of chunk c are e (the chunk sorted in a block, then
//      two binary searches a bin, O(log C));
//   2. segment_sums: seg[s, e] = the e's of the kSegment chunks of segment s (a thread per (s, e));
//   3. bin_totals: total[e] = the e's of all segments (a thread per e, O(G / kSegment));
//   4. bin_offsets: offsets[e] = sum over e' < e of the totals (a block per e);
//   5. chunk_starts: start[c, e] = offsets[e] + the e's of the chunks before c (a thread per
//      (segment, e): the segments before, then its own chunks in order);
//   6. positions: position[i] = start[chunk(i), ids[i]] + the ids[i]'s before i in its chunk
//      (a thread per element, O(log C));
//   7. order (the inverse permutation): order[position[i]] = i, a thread per element, the store
//      through position proved unique from position being a permutation (by construction);
//      row[q] = order[q] / (ids' last axis): the token of a [T, k] route.
// Cost at MoE's 4096 tokens × 6 routes into 64 experts (N = 24576, G = 96, S = 2): about 40
// integer steps per id in kernel 6; kernel 1 sorts each chunk (36 compare-exchange stages) and
// takes 2 × 9 search steps a (chunk, bin).
//
// Both take an index contract on ids (in [0, bins)): checked at run time by check_index, or
// established by construction (the router's topk); either way the kernels read a status (they
// do nothing on a bad id) and the positions kernel's table read is proved from the contract.
// position, order and row are in range by construction (OpSchema::index_outputs), so gathers
// through them (embedding of the tokens by row, of the expert outputs by position) run no check;
// position and order are permutations of [0, N) (distinct), so scatter takes them. argsort is
// counting_sort with order its only output.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 128;
// Ids a chunk (a power of two: chunk_counts sorts a chunk in one block): kChunk, or up to
// kMaxChunk for many bins (chunk_for: the [G, E] count matrices shrink with the chunks).
constexpr int64_t kChunk = 256;
constexpr int64_t kMaxChunk = 2048;
constexpr int kChunkThreads = 512;      // chunk_counts' block for chunks above kChunk
constexpr int64_t kBinsPerStep = 1024;  // chunk_counts' bins a step of its block
constexpr int64_t kSegment = 64;        // chunks a segment (chunk_starts' two-level scan)
constexpr int kOffsetThreads = 256;     // bin_offsets' block

// ---- Inference -----------------------------------------------------------------------------

void expect_ids(const TensorType& ids) {
  if (ids.dtype != DType::I32 || ids.shape.empty())
    throw ShapeError("input 'ids' is " + to_string(ids) + ", expected i32 ids of rank >= 1");
}

std::vector<TensorType> infer_bincount(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_ids(in[0]);
  return {TensorType{DType::I32, {attr_int(attrs, "bins")}}};
}

// ids [.., L] (N in all) -> position [.., L], order [N], row [N], offsets [bins].
std::vector<TensorType> infer_counting_sort(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_ids(in[0]);
  const int64_t n = numel(in[0]);
  return {TensorType{DType::I32, in[0].shape}, TensorType{DType::I32, {n}},
          TensorType{DType::I32, {n}}, TensorType{DType::I32, {attr_int(attrs, "bins")}}};
}

// ---- References ----------------------------------------------------------------------------

int64_t id_of(double v) { return static_cast<int64_t>(std::llround(v)); }

std::vector<RefTensor> ref_bincount(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const int64_t bins = attr_int(attrs, "bins");
  RefTensor counts = ref_zeros({bins});
  for (double v : in[0].data)
    if (int64_t e = id_of(v); e >= 0 && e < bins) counts.data[e] += 1;
  return {counts};
}

std::vector<RefTensor> ref_counting_sort(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor& ids = in[0];
  const int64_t bins = attr_int(attrs, "bins"), n = ids.numel(), last = ids.shape.back();
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return id_of(ids.data[a]) < id_of(ids.data[b]); });
  RefTensor position = ref_zeros(ids.shape), ord = ref_zeros({n}), row = ref_zeros({n});
  for (int64_t q = 0; q < n; ++q) {
    position.data[order[q]] = static_cast<double>(q);
    ord.data[q] = static_cast<double>(order[q]);
    row.data[q] = static_cast<double>(order[q] / last);
  }
  RefTensor offsets = ref_zeros({bins});
  for (double v : ids.data)
    for (int64_t e = id_of(v) + 1; e < bins; ++e) offsets.data[e] += 1;
  return {position, ord, row, offsets};
}

// ---- Kernels -------------------------------------------------------------------------------

// `checked`: the kernel reads the ids' check status and does nothing when it reports a bad id.
cc::Val status_ok(cc::Scope& s, const cc::Buf& status, bool checked) {
  return checked ? s.let(status(0) < 0, "checked") : cc::boolean(true);
}

cc::Kernel build_bincount(bool checked) {
  cc::KernelBuilder kb(checked ? "bincount_checked" : "bincount");
  cc::Dim n = kb.dim("N"), e = kb.dim("E");
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf counts = kb.output("counts", DType::I32, {e});
  kb.body({e}, 256, [&](cc::Scope& s) {
    cc::Idx bin = s.block_idx(0);
    cc::Val ok = status_ok(s, status, checked);
    cc::Val c = s.reduce_sum(n, [&](cc::Idx i) {
      return cc::select(cc::to_i64(ids(i)) == bin, cc::to_i32(cc::Val(1)), cc::to_i32(cc::Val(0)));
    });
    s.parallel(1, [&](cc::Idx i) { s.if_then(ok, [&] { counts(bin + i) = c; }); });
  });
  return kb.build();
}

// The first position p in [0, chunk) of a sorted chunk with key(p) >= target (chunk if none),
// by halving, in lo(t) (hi(t) its scratch).
cc::Val chunk_lower_bound(cc::Scope& s, int64_t chunk, const cc::Buf& lo, const cc::Buf& hi,
                          const cc::Idx& t, const std::function<cc::Val(const cc::Val&)>& key,
                          const cc::Val& target) {
  sorted_lower_bound(s, lo, hi, t, cc::Val(chunk), search_steps(chunk), key, target);
  return s.let(lo(t), "bound");
}

// The ids a chunk for E bins: kChunk, or for many bins the power of two near E / 2 up to
// kMaxChunk. Every kernel but chunk_counts and positions sees only G, and the sort is the same
// whatever the chunks (a stable order), so the choice changes no output.
int64_t chunk_for(int64_t bins) {
  return std::clamp<int64_t>(bitonic_length(bins) / 2, kChunk, kMaxChunk);
}

// "<base>", or "<base>_c<chunk>" for chunks other than kChunk, then the checked tag.
std::string chunked_name(const std::string& base, int64_t chunk, bool checked) {
  return base + (chunk == kChunk ? "" : "_c" + std::to_string(chunk)) + (checked ? "_checked" : "");
}

// A chunk's sort key of the id at position j: id·2^32 + j, distinct, in (id, position) order.
constexpr int64_t kKeyShift = int64_t{1} << 32;

// 1. cnt[c, e] and sorted[c, :]: a block per chunk sorts the chunk's keys (id·2^32 + position;
// bitonic_sort in shared memory, distinct keys so one order) and writes them, then each bin's
// count is the width of its run, the difference of two lower bounds (one binary search a bin and
// step, O(log kChunk)), kBinsPerStep bins a step. positions and order find an id's rank in its
// chunk in the sorted keys the same way. (A thread per (chunk, bin) scanning the chunk, O(N·E)
// compares in all, took 1.18 ms for sparse attention's 5,120 key bins at T = 4096 on the H200.)
cc::Kernel build_chunk_counts(bool checked, int64_t chunk_ids) {
  const int threads = chunk_ids == kChunk ? kThreads : kChunkThreads;
  cc::KernelBuilder kb(chunked_name("sort_chunk_counts", chunk_ids, checked));
  cc::Dim n = kb.dim("N"), g = kb.dim("G"), e = kb.dim("E");
  cc::Buf ids = kb.input("ids", DType::I32, {n});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf cnt = kb.output("cnt", DType::I32, {g, e});
  cc::Buf sorted = kb.output("sorted", DType::I64, {g, cc::Val(chunk_ids)});
  kb.body({g}, threads, [&](cc::Scope& s) {
    cc::Idx chunk = s.block_idx(0);
    cc::Val ok = status_ok(s, status, checked);
    cc::Buf keys = s.alloc_shared("keys", DType::I64, {chunk_ids});
    s.parallel(chunk_ids, [&](cc::Idx j) {
      cc::Idx i = s.let(chunk * chunk_ids + j, "i");
      s.if_then_else(
          i < n, [&] { keys(j) = cc::to_i64(ids(i)) * kKeyShift + j; },
          [&] { keys(j) = cc::Val(std::numeric_limits<int64_t>::max()); });  // sorts last
    });
    bitonic_sort(s, keys, chunk_ids, /*descending=*/false);
    s.parallel(chunk_ids, [&](cc::Idx j) { s.if_then(ok, [&] { sorted(chunk, j) = keys(j); }); });
    // A step's kBinsPerStep + 1 lower bounds, one search each, then each bin's count the
    // difference of its bound and the next (two searches a bin before: at 5,120 bins and 4,096
    // chunks, sparse attention's T = 4096, the searches were the kernel's 329 us).
    cc::Buf lo = s.alloc_fragment("lo", DType::I64, {kBinsPerStep + 1});
    cc::Buf hi = s.alloc_fragment("hi", DType::I64, {kBinsPerStep + 1});
    cc::Buf bound = s.alloc_shared("bound", DType::I64, {kBinsPerStep + 1});
    s.serial(cc::ceildiv(e, kBinsPerStep), [&](cc::Idx step) {
      s.parallel(kBinsPerStep + 1, [&](cc::Idx t) {
        cc::Idx bin = step * kBinsPerStep + t;
        s.if_then(bin <= e, [&] {
          auto key = [&](const cc::Val& p) { return keys(p); };
          bound(t) = chunk_lower_bound(s, chunk_ids, lo, hi, t, key, bin * kKeyShift);
        });
      });
      s.barrier();
      s.parallel(kBinsPerStep, [&](cc::Idx t) {
        cc::Idx bin = step * kBinsPerStep + t;
        s.if_then(bin < e && ok, [&] { cnt(chunk, bin) = cc::to_i32(bound(t + 1) - bound(t)); });
      });
      s.barrier();  // the next step overwrites the bounds
    });
  });
  return kb.build();
}

// 2. seg[s, e] = the e's of segment s's kSegment chunks, a thread per (segment, bin) (O(kSegment)).
// body(c) for each chunk c of `segment` (kSegment of them, those before G), in chunk order.
void for_each_chunk_of(cc::Scope& s, const cc::Idx& segment, const cc::Val& chunks,
                       const std::function<void(const cc::Idx&)>& body) {
  s.serial(kSegment, [&](cc::Idx j) {
    cc::Idx c = s.let(segment * kSegment + j, "c");
    s.if_then(c < chunks, [&] { body(c); });
  });
}

cc::Kernel build_segment_sums() {
  cc::KernelBuilder kb("sort_segment_sums");
  cc::Dim g = kb.dim("G"), sg = kb.dim("S"), e = kb.dim("E");
  cc::Buf cnt = kb.input("cnt", DType::I32, {g, e});
  cc::Buf seg = kb.output("seg", DType::I32, {sg, e});
  kb.body({sg, cc::ceildiv(e, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx segment = s.block_idx(0), base = s.block_idx(1) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::I32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx bin = base + t;
      s.if_then(bin < e, [&] {
        acc(t) = cc::to_i32(cc::Val(0));
        for_each_chunk_of(s, segment, g, [&](const cc::Idx& c) { acc(t) = acc(t) + cnt(c, bin); });
        seg(segment, bin) = acc(t);
      });
    });
  });
  return kb.build();
}

// 3. total[e] = the e's of every segment, a thread per bin (O(S)).
cc::Kernel build_bin_totals() {
  cc::KernelBuilder kb("sort_bin_totals");
  cc::Dim sg = kb.dim("S"), e = kb.dim("E");
  cc::Buf seg = kb.input("seg", DType::I32, {sg, e});
  cc::Buf total = kb.output("total", DType::I32, {e});
  kb.body({cc::ceildiv(e, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::I32, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx bin = base + t;
      s.if_then(bin < e, [&] {
        acc(t) = cc::to_i32(cc::Val(0));
        s.serial(sg, [&](cc::Idx c) { acc(t) = acc(t) + seg(c, bin); });
        total(bin) = acc(t);
      });
    });
  });
  return kb.build();
}

// 4. offsets[e] = the totals of the bins before e (exclusive), a block per bin summing them
// (integers: exact in any order). One thread per bin walking every earlier bin, O(E) latency-bound
// steps a thread, was most of the 1.70 ms chunk_starts took at 5,120 bins on the H200.
cc::Kernel build_bin_offsets() {
  cc::KernelBuilder kb("sort_bin_offsets");
  cc::Dim e = kb.dim("E");
  cc::Buf total = kb.input("total", DType::I32, {e});
  cc::Buf offsets = kb.output("offsets", DType::I32, {e});
  kb.body({e}, kOffsetThreads, [&](cc::Scope& s) {
    cc::Idx bin = s.block_idx(0);
    cc::Val before = s.reduce_sum(bin, [&](cc::Idx b) { return total(b); });
    s.parallel(1, [&](cc::Idx i) { offsets(bin + i) = before; });
  });
  return kb.build();
}

// 5. start[c, e] = offsets[e] + the e's of the chunks before c: a thread per (segment, bin) adds
// the segments before its own (O(S)), then runs over its segment's chunks (O(kSegment)).
cc::Kernel build_chunk_starts() {
  cc::KernelBuilder kb("sort_chunk_starts");
  cc::Dim g = kb.dim("G"), sg = kb.dim("S"), e = kb.dim("E");
  cc::Buf cnt = kb.input("cnt", DType::I32, {g, e});
  cc::Buf seg = kb.input("seg", DType::I32, {sg, e});
  cc::Buf offsets = kb.input("offsets", DType::I32, {e});
  cc::Buf start = kb.output("start", DType::I32, {g, e});
  kb.body({sg, cc::ceildiv(e, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx segment = s.block_idx(0), base = s.block_idx(1) * kThreads;
    cc::Buf acc = s.alloc_fragment("acc", DType::I32, {kThreads});
    // The segment's counts, all loaded before the first store: a load after a store waits for
    // it (start may alias cnt, as far as the hardware knows), and loading each chunk's count
    // after storing the previous chunk's start took a round trip a chunk (14.7 us at T = 1024
    // for the sparse attention backward's 1280 bins). A whole segment runs without guards.
    std::vector<cc::Buf> held;
    for (int64_t j = 0; j < kSegment; ++j)
      held.push_back(s.alloc_fragment("held" + std::to_string(j), DType::I32, {kThreads}));
    auto scan = [&](bool guarded) {
      auto each = [&](int64_t j, const std::function<void(const cc::Idx&)>& body) {
        cc::Idx c = s.let(segment * kSegment + j, "c");
        if (guarded)
          s.if_then(c < g, [&] { body(c); });
        else
          body(c);
      };
      s.parallel(kThreads, [&](cc::Idx t) {
        cc::Idx bin = base + t;
        s.if_then(bin < e, [&] {
          for (int64_t j = 0; j < kSegment; ++j)
            each(j, [&](const cc::Idx& c) { held[j](t) = cnt(c, bin); });
          acc(t) = offsets(bin);
          s.serial(segment, [&](cc::Idx b) { acc(t) = acc(t) + seg(b, bin); });
          for (int64_t j = 0; j < kSegment; ++j)
            each(j, [&](const cc::Idx& c) {
              start(c, bin) = acc(t);
              acc(t) = acc(t) + held[j](t);
            });
        });
      });
    };
    s.if_then_else((segment + 1) * kSegment <= g, [&] { scan(false); }, [&] { scan(true); });
  });
  return kb.build();
}

// 6. position[i] = start[chunk, id] + the id's earlier positions in the chunk: the rank of i's
// key among the chunk's sorted keys less that of its id's first key (two binary searches).
cc::Kernel build_positions(bool checked, int64_t chunk_ids) {
  cc::KernelBuilder kb(chunked_name("sort_positions", chunk_ids, checked));
  cc::Dim n = kb.dim("N"), g = kb.dim("G"), e = kb.dim("E");
  cc::Buf ids = checked ? kb.index_input("ids", {n}, e) : kb.input("ids", DType::I32, {n});
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf start = kb.input("start", DType::I32, {g, e});
  cc::Buf sorted = kb.input("sorted", DType::I64, {g, cc::Val(chunk_ids)});
  cc::Buf position = kb.output("position", DType::I32, {n});
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Val ok = status_ok(s, status, checked);
    cc::Buf lo = s.alloc_fragment("lo", DType::I64, {kThreads});
    cc::Buf hi = s.alloc_fragment("hi", DType::I64, {kThreads});
    cc::Buf first = s.alloc_fragment("first", DType::I64, {kThreads});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx i = base + t;
      s.if_then(i < n && ok, [&] {
        cc::Val bin = s.let(cc::to_i64(ids(i)), "bin");
        cc::Idx chunk = s.let(i / chunk_ids, "chunk");
        s.if_then(bin >= 0 && bin < e, [&] {
          auto key = [&](const cc::Val& p) { return sorted(chunk, p); };
          first(t) = chunk_lower_bound(s, chunk_ids, lo, hi, t, key, bin * kKeyShift);
          cc::Val at = chunk_lower_bound(s, chunk_ids, lo, hi, t, key,
                                         bin * kKeyShift + (i - chunk * chunk_ids));
          position(i) = start(chunk, bin) + cc::to_i32(at - first(t));
        });
      });
    });
  });
  return kb.build();
}

// 7. order and row: the inverse of position, a thread per element i: order[position[i]] = i,
// row[position[i]] = i / L. The stores go through a loaded index, so position is declared a
// permutation of [0, N) (true by construction once the ids are good; on a bad id the kernel does
// nothing, as the positions kernel does): the index analysis proves them unique and in bounds from
// that. (Owner-computes before, each q found its element by three binary searches, 64 dependent
// halvings a thread: 20.2 us at V4-mini's T·K = 262144 slots on the H200.)
cc::Kernel build_order(bool checked) {
  cc::KernelBuilder kb(checked ? "sort_order_checked" : "sort_order");
  cc::Dim n = kb.dim("N"), l = kb.dim("L");
  cc::Buf status = checked ? kb.input("status", DType::I32, {2}) : cc::Buf{};
  cc::Buf position = kb.permutation_input("position", {n}, n);
  cc::Buf order = kb.output("order", DType::I32, {n});
  cc::Buf row = kb.output("row", DType::I32, {n});
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * kThreads;
    cc::Val ok = status_ok(s, status, checked);
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx i = base + t;
      s.if_then(i < n && ok, [&] {
        cc::Val to = s.let(cc::to_i64(position(i)), "to");
        order(to) = cc::to_i32(i);
        row(to) = cc::to_i32(i / l);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_bincount(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
        const bool checked = in.size() > 1;
        KernelCall call{.kernel = cache->get(checked ? "bincount_checked" : "bincount",
                                             [&] { return build_bincount(checked); }),
                        .buffers = {input_slot(0), output_slot(0)},
                        .dims = {numel(in[0]), out[0].shape[0]}};
        if (checked) call.buffers.insert(call.buffers.begin() + 1, input_slot(1));
        return OpExpansion{.calls = {call}};
      };
}

ExpandFn expand_counting_sort(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs&) {
    const bool checked = in.size() > 1;  // the graph appended the ids' check status
    const int64_t n = numel(in[0]), e = out[3].shape[0], chunk = chunk_for(e);
    const int64_t g = (n + chunk - 1) / chunk;
    const std::string tag = checked ? "_checked" : "";
    // Scratch 0: cnt [G, E]; 1: start [G, E]; 2: total [E]; 3: seg [S, E]; 4: the chunks'
    // sorted keys [G, chunk].
    const int64_t sg = (g + kSegment - 1) / kSegment;
    OpExpansion ex{.scratch = {{DType::I32, {g, e}},
                               {DType::I32, {g, e}},
                               {DType::I32, {e}},
                               {DType::I32, {sg, e}},
                               {DType::I64, {g, chunk}}}};
    auto with_status = [&](std::vector<KernelArg> b) {
      if (checked) b.insert(b.begin() + 1, input_slot(1));
      return b;
    };
    ex.calls.push_back({.kernel = cache->get(chunked_name("sort_chunk_counts", chunk, checked),
                                             [&] { return build_chunk_counts(checked, chunk); }),
                        .buffers = with_status({input_slot(0), scratch_slot(0), scratch_slot(4)}),
                        .dims = {n, g, e}});
    ex.calls.push_back({.kernel = cache->get("sort_segment_sums", build_segment_sums),
                        .buffers = {scratch_slot(0), scratch_slot(3)},
                        .dims = {g, sg, e}});
    ex.calls.push_back({.kernel = cache->get("sort_bin_totals", build_bin_totals),
                        .buffers = {scratch_slot(3), scratch_slot(2)},
                        .dims = {sg, e}});
    ex.calls.push_back({.kernel = cache->get("sort_bin_offsets", build_bin_offsets),
                        .buffers = {scratch_slot(2), output_slot(3)},
                        .dims = {e}});
    ex.calls.push_back(
        {.kernel = cache->get("sort_chunk_starts", build_chunk_starts),
         .buffers = {scratch_slot(0), scratch_slot(3), output_slot(3), scratch_slot(1)},
         .dims = {g, sg, e}});
    ex.calls.push_back(
        {.kernel = cache->get(chunked_name("sort_positions", chunk, checked),
                              [&] { return build_positions(checked, chunk); }),
         .buffers = with_status({input_slot(0), scratch_slot(1), scratch_slot(4), output_slot(0)}),
         .dims = {n, g, e}});
    // order reads no ids (position holds them): the status, when there is one, comes first.
    std::vector<KernelArg> order_buffers = {output_slot(0), output_slot(1), output_slot(2)};
    if (checked) order_buffers.insert(order_buffers.begin(), input_slot(1));
    ex.calls.push_back(
        {.kernel = cache->get("sort_order" + tag, [&] { return build_order(checked); }),
         .buffers = order_buffers,
         .dims = {n, in[0].shape.back()}});
    return OpExpansion{ex};
  };
}

// argsort is counting_sort keeping only `order`: the same kernels, its other outputs scratch.
ExpandFn expand_argsort(std::shared_ptr<KernelCache> cache) {
  ExpandFn sort = expand_counting_sort(std::move(cache));
  return [sort](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                const Attrs& attrs) {
    const int64_t n = numel(in[0]);
    const std::vector<TensorType> all = {{DType::I32, in[0].shape},
                                         out[0],
                                         {DType::I32, {n}},
                                         {DType::I32, {attr_int(attrs, "bins")}}};
    OpExpansion ex = sort(in, all, attrs);
    const int first = static_cast<int>(ex.scratch.size());
    for (int k : {0, 2, 3}) ex.scratch.push_back({all[k].dtype, all[k].shape});
    for (KernelCall& call : ex.calls)
      for (KernelArg& a : call.buffers)
        if (a.kind == KernelArg::Kind::Output)
          a = a.index == 1 ? output_slot(0)
                           : scratch_slot(first + (a.index == 0 ? 0 : a.index - 1));
    return ex;
  };
}

std::vector<TensorType> infer_argsort(const std::vector<TensorType>& in, const Attrs& attrs) {
  return {infer_counting_sort(in, attrs)[1]};
}

std::vector<RefTensor> ref_argsort(const std::vector<RefTensor>& in, const Attrs& attrs) {
  return {ref_counting_sort(in, attrs)[1]};
}

// The ids index the bins.
const IndexContract kBinsContract{
    .slot = 0,
    .bound = [](const std::vector<TensorType>&,
                const Attrs& attrs) { return attr_int(attrs, "bins"); },
    .indexes = "the bins (attribute 'bins')"};

Attrs bins(int64_t e) { return {{"bins", e}}; }

// ids of `shape` in [0, e): a bin per id at most, some bins empty, chunks ragged.
OpTestCase ids_case(std::vector<int64_t> shape, int64_t e) {
  return {.shapes = {std::move(shape)}, .attrs = bins(e), .int_lo = 0, .int_hi = e};
}

// ids_case({513}, 2100): three bin steps of chunk_counts (the last ragged), a ragged last chunk;
// ids_case({16796}, 70): 66 chunks, so two segments of chunk_starts' scan, the second ragged;
// ids_case({33000}, 70): 129 chunks, two whole segments (the unguarded scan) and a ragged one;
// ids_case({9000}, 1500) and ({70000}, 3000): many bins, so chunks of 1024 and 2048 ids (9 and 35
// of them, the last ragged).
std::vector<OpTestCase> sort_cases() {
  return {ids_case({1}, 1),       ids_case({7}, 3),       ids_case({5, 2}, 40),
          ids_case({300, 6}, 64), ids_case({1000}, 1),    ids_case({257}, 300),
          ids_case({96, 6}, 8),   ids_case({513}, 2100),  ids_case({16796}, 70),
          ids_case({33000}, 70),  ids_case({9000}, 1500), ids_case({70000}, 3000)};
}

// The cases plus one with ids outside [0, bins) (bincount counts them nowhere).
std::vector<OpTestCase> with_outside(std::vector<OpTestCase> cases) {
  cases.push_back({.shapes = {{500}}, .attrs = bins(7), .int_lo = -3, .int_hi = 10});
  return cases;
}

}  // namespace

void register_counting_sort(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const AttrSpec bins_attr = int_attr("bins", std::nullopt, "the number of bins E", true);
  registry.add({.name = "bincount",
                .doc = "counts[e] = how many of the i32 ids [..] equal e, for e in [0, bins) "
                       "(ids are checked at run time unless established in range by their "
                       "producer); no gradient",
                .inputs = {"ids"},
                .outputs = {"counts"},
                .attrs = {bins_attr},
                .dtypes = {DType::I32},  // every slot is fixed: run once
                .input_dtypes = {{0, DType::I32}},
                .output_dtypes = {{0, DType::I32}},
                .infer = infer_bincount,
                .reference = ref_bincount,
                .expand = expand_bincount(cache),
                .index_contracts = {kBinsContract},
                // Ids outside [0, bins) are counted nowhere.
                .tests = {.kernel = with_outside(sort_cases()),
                          .examples = {{.inputs = {{{2, 3}, {2, 0, 2, 2, 4, 0}}},
                                        .attrs = bins(5),
                                        .outputs = {{{5}, {2, 0, 3, 0, 1}}}}}}});
  const auto n_of = [](const std::vector<TensorType>& in, const Attrs&) { return numel(in[0]); };
  registry.add(
      {.name = "counting_sort",
       .doc = "a stable sort of i32 ids [..] (N in all) in [0, bins): position [..] = each id's "
              "place in bin-major order (ties: index order), order [N] = its inverse (the flat "
              "index at each place), row [N] = order / (ids' last axis) (a [T, k] route's "
              "token), offsets [bins] = where each bin starts; position, order and row lie in "
              "range by construction, offsets too and sorted; no gradient",
       .inputs = {"ids"},
       .outputs = {"position", "order", "row", "offsets"},
       .attrs = {bins_attr},
       .dtypes = {DType::I32},  // every slot is fixed: run once
       .input_dtypes = {{0, DType::I32}},
       .output_dtypes = {{0, DType::I32}, {1, DType::I32}, {2, DType::I32}, {3, DType::I32}},
       .infer = infer_counting_sort,
       .reference = ref_counting_sort,
       .expand = expand_counting_sort(cache),
       .index_contracts = {kBinsContract},
       .index_outputs = {{.slot = 0, .bound = n_of, .distinct = true},
                         {.slot = 1, .bound = n_of, .distinct = true},
                         {.slot = 2,
                          .bound = [](const std::vector<TensorType>& in,
                                      const Attrs&) { return numel(in[0]) / in[0].shape.back(); }},
                         // An exclusive scan of counts: starts in [0, N], never decreasing.
                         {.slot = 3,
                          .bound = [](const std::vector<TensorType>& in,
                                      const Attrs&) { return numel(in[0]) + 1; },
                          .sorted = true}},
       .tests = {.kernel = sort_cases(),
                 // Routes of 3 tokens × 2 slots into 4 experts; expert 1 gets none.
                 .examples = {{.inputs = {{{3, 2}, {2, 0, 0, 3, 2, 0}}},
                               .attrs = bins(4),
                               .outputs = {{{3, 2}, {3, 0, 1, 5, 4, 2}},
                                           {{6}, {1, 2, 5, 0, 4, 3}},
                                           {{6}, {0, 1, 2, 0, 2, 1}},
                                           {{4}, {0, 3, 3, 5}}}}}}});
  registry.add(
      {.name = "argsort",
       .doc = "order [N] = the flat indices of the i32 keys [..] (N in all) in [0, bins) sorted "
              "stably (equal keys keep index order): counting_sort's order alone; a "
              "permutation of [0, N) by construction, so scatter takes it; no gradient",
       .inputs = {"keys"},
       .outputs = {"order"},
       .attrs = {bins_attr},
       .dtypes = {DType::I32},
       .input_dtypes = {{0, DType::I32}},
       .output_dtypes = {{0, DType::I32}},
       .infer = infer_argsort,
       .reference = ref_argsort,
       .expand = expand_argsort(cache),
       .index_contracts = {kBinsContract},
       .index_outputs = {{.slot = 0, .bound = n_of, .distinct = true}},
       .tests = {.kernel = {ids_case({1}, 1), ids_case({7}, 3), ids_case({300, 6}, 64),
                            ids_case({513}, 2100), ids_case({16796}, 70)},
                 // Ties keep index order: the two 0s, then the three 2s, then the 3.
                 .examples = {{.inputs = {{{3, 2}, {2, 0, 0, 3, 2, 0}}},
                               .attrs = bins(4),
                               .outputs = {{{6}, {1, 2, 5, 0, 4, 3}}}}}}});
}

}  // namespace tilerun::kernels
