// topk over the last axis: the k largest values of each row, descending, and their i32 indices;
// exact (a total order, so the result does not depend on any fold order). Order: a NaN is larger
// than every number (as torch.topk) and NaNs tie with each other; +0 = -0; ties go to the lowest
// index. The indices lie in [0, N) by construction (each is a position the kernel wrote from its
// loop, never a value it read), which the op declares (OpSchema::index_outputs), so an op
// indexing with them needs no run-time check. Gradient: take_along_axis_grad (the values are x
// taken along the indices) puts dy back at the chosen positions, owner-computes.
//
// Kernels: one block per row, by the row's length. Each element gets one i64 sort key,
// (monotone value bits) << 32 | (2^32 - 1 - index): distinct, so a plain descending sort of the
// keys is the order above, ties included, whatever the sort's stability. (bf16 rows in
// topk_sort take a 32-bit key, the value's high 16 bits << 16 | (2^16 - 1 - index): sort_key16.)
//
// topk_sort (rows up to 16384): the row's keys sit in shared memory, padded to a power of two
// M >= N with keys below every real one, and a bitonic network unrolled at build time (M a
// constant of the kernel) sorts them; the first k give the indices, the values are read back
// from x. At the indexer's N = 1024 that is 55 barrier-bound stages of 1024 keys.
//
// topk_select (longer rows, k at most 16384): radix select, so only the k kept keys sit in
// shared memory. Each value becomes an unsigned 32-bit key (the monotone bits). 8 passes of a
// 4-bit digit, most significant first, find the k-th largest key tau: each pass, every thread
// counts its keys that agree with tau's digits decided so far, one counter per value of the
// next digit, block_sums adds the 16 counters up (integers: exact whatever the order), and the
// largest digit whose keys reach the ranks still to place is tau's (the digits above it are
// kept whole). Then g = k - r keys are above tau and the r with the lowest indices among those
// equal to tau complete the k. Compaction: a second sweep ranks both kinds in index order
// (ballot, popcount of the lanes below, the warps before, the chunks before) and writes each
// chosen key at its rank; a bitonic network over the k keys (padded to a power of two) sorts
// them. The row is read 9 times and never written; 512 threads a row (so two rows may share an SM).
// Measured on the H200 (bench/RESULTS.md): 256 rows of 65536, k = 128, 649 µs (torch.topk 273;
// 32 one-bit passes took 990): one block a row is still latency-bound, splitting a row over
// blocks is the next step. A ballot-counting select was slower than the full sort on the rows
// that fit (4096 rows of 1024, k = 128: 317 µs against 177), so the select serves only the
// rows the full sort cannot.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
#include "kernels/block_scan.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"
#include "kernels/shape_attrs.h"
#include "kernels/unary_math.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kSortThreads = 256;
constexpr int64_t kMaxRow = 16384;  // the longest row fully sorted: its keys fill 128 KiB
constexpr int64_t kMaxK = 16384;    // the most kept: their sort keys fill 128 KiB of shared memory
constexpr int kSelectThreads = 512;
constexpr int kDigitBits = 4;  // the radix select's digit: 8 passes over the row
constexpr int kDigits = 1 << kDigitBits;
constexpr int kWarp = 32;

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
  if (k > kMaxK)
    throw ShapeError("attribute 'k' = " + std::to_string(k) + " exceeds " + std::to_string(kMaxK) +
                     " (the kept elements' sort keys must fit in " + "shared memory)");
  std::vector<int64_t> shape = in[0].shape;
  shape.back() = k;
  return {TensorType{in[0].dtype, shape}, TensorType{DType::I32, shape}};
}

// ---- References ----------------------------------------------------------------------------

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
              [&](int64_t a, int64_t b) { return ref_topk_before(row[a], a, row[b], b); });
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

// The radix select's key: monotone_bits as an unsigned 32-bit value in an i64.
cc::Val unsigned_key(const cc::Val& v) {
  return cc::to_i64(monotone_bits(v)) + int64_t{2147483648};
}

// For bf16 rows up to 2^16 (topk_sort): the key in 32 bits, monotone_bits' high half (a bf16's
// low 16 bits are zero, so its order is whole there) times 2^16 plus 2^16 - 1 - index, the same
// order as sort_key. Half the shared bytes and 32-bit compares: the sort was bound by its shared
// traffic (92% on the H200, 140 us for 4096 rows of 1024).
cc::Val sort_key16(const cc::Val& v, const cc::Val& index) {
  cc::Val high = cc::shr(monotone_bits(v), cc::to_i32(cc::Val(16)));
  return high * cc::to_i32(cc::Val(65536)) + cc::to_i32(65535 - index);
}
bool narrow_keys(DType dtype, int64_t m) { return dtype == DType::BF16 && m <= 65536; }

// Both kernels' end: sorts keys[0, m) descending and writes the first k as row `row`'s
// indices, the values read back from x at them (keys of sort_key, or of sort_key16 when i32).
// The read of x is clamped into [0, n): a no-op (the first k keys are real elements'), but the
// index comes from shared memory, which the analysis cannot bound, and a disproved load keeps a
// guard and a counterexample in the proof report.
void sort_and_write(cc::Scope& s, const cc::Buf& keys, int64_t m, const cc::Val& k,
                    const cc::Val& n, const cc::Idx& row, const cc::Buf& x, const cc::Buf& values,
                    const cc::Buf& indices) {
  bitonic_sort(s, keys, m, /*descending=*/true);
  const bool narrow = keys.dtype() == DType::I32;
  s.parallel(k, [&](cc::Idx r) {
    cc::Val index = narrow
                        ? s.let(65535 - cc::to_i64(keys(r) & cc::to_i32(cc::Val(65535))), "index")
                        : s.let(sort_key_index(keys(r)), "index");
    indices(row, r) = cc::to_i32(index);
    values(row, r) = x(row, cc::min(cc::max(index, cc::Val(int64_t{0})), n - 1));
  });
}

// A condition as an i32 0/1 flag, a ballot's source.
cc::Val as_flag(const cc::Val& cond) {
  return cc::select(cond, cc::to_i32(cc::Val(1)), cc::to_i32(cc::Val(0)));
}

// Rows up to kMaxRow: the full sort (topk_sort). Each element's sort key sits in shared memory,
// padded to a power of two M >= N with keys below every real one, and a bitonic network unrolled
// at build time (M a constant of the kernel) sorts them descending; the first k give the indices.
cc::Kernel build_topk_sort(DType dtype, int64_t m) {
  cc::KernelBuilder kb("topk_" + std::to_string(m) + suffix(dtype));
  cc::Dim p = kb.dim("P"), n = kb.dim("N", {.min = 1, .max = m}),
          k = kb.dim("K", {.min = 1, .max = m});
  cc::Buf x = kb.input("x", dtype, {p, n});
  cc::Buf values = kb.output("values", dtype, {p, k});
  cc::Buf indices = kb.output("indices", DType::I32, {p, k});
  kb.body({p}, kSortThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    const bool narrow = narrow_keys(dtype, m);
    cc::Buf keys = s.alloc_shared("keys", narrow ? DType::I32 : DType::I64, {m});
    s.parallel(m, [&](cc::Idx i) {
      s.if_then_else(
          i < n, [&] { keys(i) = narrow ? sort_key16(x(row, i), i) : sort_key(x(row, i), i); },
          [&] { keys(i) = narrow ? cc::to_i32(cc::Val(int64_t{INT32_MIN + 1})) : padding_key(); });
    });
    sort_and_write(s, keys, m, k, n, row, x, values, indices);
  });
  return kb.build();
}

// Rows past kMaxRow: the radix select (topk_select).
cc::Kernel build_topk(DType dtype, int64_t m, int threads) {
  const int warps = threads / kWarp;
  cc::KernelBuilder kb("topk_select_" + std::to_string(m) + "_" + std::to_string(threads) +
                       suffix(dtype));
  cc::Dim p = kb.dim("P"), n = kb.dim("N"), k = kb.dim("K", {.min = 1, .max = m});
  cc::Buf x = kb.input("x", dtype, {p, n});
  cc::Buf values = kb.output("values", dtype, {p, k});
  cc::Buf indices = kb.output("indices", DType::I32, {p, k});
  kb.body({p}, threads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Buf keys = s.alloc_shared("keys", DType::I64, {m});
    // The warps' counts of a compaction chunk, double-buffered by the chunk's parity so that
    // one barrier a chunk suffices: [parity, kind (above tau, equal to tau), warp].
    cc::Buf warp_counts = s.alloc_shared("warp_counts", DType::I64, {2, 2, warps});
    cc::Buf flag = s.alloc_fragment("flag", DType::I32, {threads});
    cc::Buf equal = s.alloc_fragment("equal", DType::I32, {threads});
    cc::Buf flag_mask = s.alloc_fragment("flag_mask", DType::I32, {threads});
    cc::Buf equal_mask = s.alloc_fragment("equal_mask", DType::I32, {threads});
    cc::Buf above_base = s.alloc_fragment("above_base", DType::I64, {threads});
    cc::Buf equal_base = s.alloc_fragment("equal_base", DType::I64, {threads});
    cc::Val chunks = cc::ceildiv(n, cc::Val(int64_t{threads}));
    auto lane_of = [](const cc::Idx& t) { return t % kWarp; };
    // The sum of warp_counts[parity, kind, w] over the warps w before `before` (all of them
    // when before = warps), in warp order.
    auto warps_sum = [&](const cc::Val& parity, int kind, const cc::Val& before) {
      cc::Val sum(int64_t{0});
      for (int w = 0; w < warps; ++w)
        sum = sum + cc::select(cc::Val(int64_t{w}) < before, warp_counts(parity, kind, w),
                               cc::Val(int64_t{0}));
      return sum;
    };
    // tau's bits decided so far, the ranks still to place and whether this pass's digit is
    // found, block-uniform in shared memory: written by thread 0 between passes, read by all.
    cc::Buf state = s.alloc_shared("state", DType::I64, {3});
    std::vector<cc::Buf> counts;
    for (int d = 0; d < kDigits; ++d)
      counts.push_back(s.alloc_fragment("count" + std::to_string(d), DType::I32, {threads}));
    cc::Buf totals = s.alloc_shared("totals", DType::I32, {kDigits});
    s.parallel(threads, [&](cc::Idx t) {
      s.if_then(t == 0, [&] {
        state(0) = cc::Val(int64_t{0});
        state(1) = k;
      });
    });
    s.barrier();
    // Select: pass `step` decides tau's digit at bits [shift, shift + 4). Each thread counts
    // its elements (in order, independent loads in flight) that agree with tau above the digit,
    // one counter a digit value; block_sums adds the counters up (integers: exact in any order).
    s.serial(32 / kDigitBits, [&](cc::Idx step) {
      cc::Val shift = s.let(32 - kDigitBits - kDigitBits * step, "shift");
      // In 32 bits: the keys as i32 bit patterns, the digits above this one kept by `above`
      // (0 in the first pass, where a shift by 32 would be undefined).
      cc::Val above =
          s.let(cc::to_i32(cc::Val(int64_t{0}) - cc::shl(cc::Val(int64_t{1}), shift + kDigitBits)),
                "above");
      cc::Val high = s.let(cc::to_i32(state(0)) & above, "high");
      cc::Val shift32 = s.let(cc::to_i32(shift), "shift32");
      s.parallel(threads, [&](cc::Idx t) {
        for (const cc::Buf& count : counts) count(t) = cc::to_i32(cc::Val(0));
        s.serial(chunks, [&](cc::Idx c) {
          cc::Idx i = s.let(c * threads + t, "i");
          s.if_then(i < n, [&] {
            cc::Val v = s.let(x(row, i), "v");
            cc::Val key = s.let(monotone_bits(v) ^ cc::to_i32(cc::Val(int64_t{INT32_MIN})), "key");
            // The digit, or kDigits (no counter) for a key that disagrees above it.
            cc::Val digit =
                s.let(cc::select((key & above) == high,
                                 cc::shr_logical(key, shift32) & cc::to_i32(cc::Val(kDigits - 1)),
                                 cc::to_i32(cc::Val(kDigits))),
                      "digit");
            for (int d = 0; d < kDigits; ++d)
              counts[d](t) =
                  counts[d](t) + cc::select(digit == cc::to_i32(cc::Val(d)), cc::to_i32(cc::Val(1)),
                                            cc::to_i32(cc::Val(0)));
          });
        });
      });
      block_sums(s, "digits", threads, counts, totals);
      // Thread 0 walks the digits from the largest: tau's is the first whose keys reach the
      // ranks still to place; the keys of the digits above it are all kept.
      s.parallel(threads, [&](cc::Idx t) {
        s.if_then(t == 0, [&] {
          state(2) = cc::Val(int64_t{0});
          for (int d = kDigits - 1; d >= 0; --d) {
            s.if_then(state(2) == 0, [&] {
              cc::Val total = s.let(cc::to_i64(totals(d)), "total");
              s.if_then_else(
                  total >= state(1),
                  [&] {
                    state(0) = state(0) + cc::shl(cc::Val(int64_t{d}), shift);
                    state(2) = cc::Val(int64_t{1});
                  },
                  [&] { state(1) = state(1) - total; });
            });
          }
        });
      });
      s.barrier();
    });
    // Compaction: `left` keys equal to tau (the lowest indices) and k - left above it; both
    // read from `state` where they are used (a let of a shared load may not cross a barrier).
    s.parallel(threads, [&](cc::Idx t) {
      above_base(t) = cc::Val(int64_t{0});
      equal_base(t) = cc::Val(int64_t{0});
    });
    s.serial(chunks, [&](cc::Idx c) {
      cc::Val parity = s.let(c % 2, "parity");
      s.parallel(threads, [&](cc::Idx t) {
        cc::Idx i = s.let(c * threads + t, "i");
        s.if_then_else(
            i < n,
            [&] {
              cc::Val key = s.let(unsigned_key(s.let(x(row, i), "v")), "key");
              cc::Val tau = s.let(state(0), "tau");
              flag(t) = as_flag(key > tau);
              equal(t) = as_flag(key == tau);
            },
            [&] {
              flag(t) = cc::to_i32(cc::Val(0));
              equal(t) = cc::to_i32(cc::Val(0));
            });
      });
      s.ballot(flag_mask, flag);
      s.ballot(equal_mask, equal);
      s.parallel(threads, [&](cc::Idx t) {
        s.if_then(lane_of(t) == 0, [&] {
          warp_counts(parity, 0, t / kWarp) = cc::popcount(flag_mask(t));
          warp_counts(parity, 1, t / kWarp) = cc::popcount(equal_mask(t));
        });
      });
      s.barrier();
      s.parallel(threads, [&](cc::Idx t) {
        cc::Idx i = s.let(c * threads + t, "i");
        cc::Val below = s.let(cc::lane_mask_below(lane_of(t)), "below");
        cc::Val warp = s.let(t / kWarp, "warp");
        cc::Val above_rank = s.let(above_base(t) + warps_sum(parity, 0, warp) +
                                       cc::popcount(cc::to_i64(flag_mask(t)) & below),
                                   "above_rank");
        cc::Val equal_rank = s.let(equal_base(t) + warps_sum(parity, 1, warp) +
                                       cc::popcount(cc::to_i64(equal_mask(t)) & below),
                                   "equal_rank");
        cc::Val left = s.let(state(1), "left");
        cc::Val above = s.let(k - left, "above");
        // The ranks stay below k by construction; the guards keep the stores in the tile
        // without a proof of that.
        s.if_then(flag(t) != 0 && above_rank < k,
                  [&] { keys(above_rank) = sort_key(x(row, i), i); });
        s.if_then(equal(t) != 0 && equal_rank < left && above + equal_rank < k,
                  [&] { keys(above + equal_rank) = sort_key(x(row, i), i); });
        above_base(t) = above_base(t) + warps_sum(parity, 0, cc::Val(int64_t{warps}));
        equal_base(t) = equal_base(t) + warps_sum(parity, 1, cc::Val(int64_t{warps}));
      });
    });
    // Padding sorts last: below every real key (whose high half is at least -inf's,
    // 0x807FFFFF as i32), and spelled without INT64_MIN's literal, which C++ cannot write.
    s.parallel(m, [&](cc::Idx i) { s.if_then(i >= k, [&] { keys(i) = padding_key(); }); });
    sort_and_write(s, keys, m, k, n, row, x, values, indices);
  });
  return kb.build();
}

ExpandFn expand_topk(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs&) {
    const DType dt = in[0].dtype;
    const auto [rows, n] = rows_cols(in[0].shape);
    const int64_t k = out[0].shape.back();
    std::shared_ptr<const cc::Kernel> kernel;
    if (n <= kMaxRow) {
      const int64_t m = bitonic_length(n);
      kernel = cache->get(kernel_key("topk_" + std::to_string(m), dt),
                          [&] { return build_topk_sort(dt, m); });
    } else {
      const int64_t m = bitonic_length(k);
      const std::string name =
          "topk_select_" + std::to_string(m) + "_" + std::to_string(kSelectThreads);
      kernel = cache->get(kernel_key(name, dt), [&] { return build_topk(dt, m, kSelectThreads); });
    }
    KernelCall call{.kernel = kernel,
                    .buffers = {input_slot(0), output_slot(0), output_slot(1)},
                    .dims = {rows, n, k}};
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
          {.shapes = {{5, 9}}, .attrs = k_of(9)},
          // Past 2048 (256 threads a row), and rows longer than the full sort's limit; on the
          // coarse grid most of the kept values tie with the k-th, so the lowest indices among
          // them decide.
          tied({3, 2500}, 700),
          tied({1, 20000}, 33),
          {.shapes = {{2, 17000}}, .attrs = k_of(2)}};
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
