// Kernel B of the tensor-core sparse attention backward, in two balanced passes: dkv[key] is the
// sum of the contribution rows g[o] over the key's entries o of counting_sort's order.
//
// One block per key (the first version) is as slow as the key with the longest run: an early
// compressed entry that nearly every token picks has ~T entries where a window key has at most W,
// and at T = 1024 the kernel took 9–12x its bandwidth floor on those few blocks. Here the order
// is cut into fixed windows of kWindow positions instead, whatever the keys:
//  1. key_windows: one block per window, all columns. Each position learns its key by a binary
//     search of offsets and is checked (the entry in range, idx naming that key); the window's
//     maximal runs of one key are its segments. Each segment's rows are summed, entry r into
//     partial sum r % kLanes, the partials added in lane order, and written to part[its first
//     position] (NaN when an entry was bad); seg_key[p] records which key a segment starting
//     at p belongs to (-1 where none starts). Every block reads kWindow rows.
//  2. key_sums: one block per key: dkv[key] = (with sparse_attention's `window`, the key's band
//     row first, then) the key's window partials, in window order: at
//     position max(begin, w·kWindow) for each window w its run [begin, end) meets. A partial
//     whose seg_key is not the key (offsets that do not describe a sorted order) makes the row
//     NaN.
// The order of every sum is fixed by order and offsets alone, so CPU and GPU give the same bits
// run to run. Stores go to positions and keys the block owns, never to a loaded index.
#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "kernels/bitonic_sort.h"
#include "kernels/sparse_attention_tc.h"

namespace tilerun::kernels::sparse_attention_detail {

namespace cc = tilerun::compiler;

namespace {

constexpr int64_t kWindow = 128;  // order positions per window block
constexpr int64_t kCols = 128;    // threads per block (key_sums: a column each)
constexpr int kLanes = 8;         // partial sums per segment and column
constexpr int kWidth = 4;         // key_windows' columns per thread (16 bytes of f32)
constexpr int kSearchSteps = 32;  // halvings of the offsets search: any S below 2^31

}  // namespace

cc::Kernel build_grad_key_windows_tc(DType dt, const SparseAttentionShape& sh) {
  cc::KernelBuilder kb(kernel_name("sparse_attention_tc_grad_key_windows", dt, sh));
  cc::Dim t = kb.dim("T"), sd = kb.dim("S"), e = kb.dim("E", {.divisible_by = kWidth});
  const cc::Val k(sh.selected());  // idx's slots (the window's are the band kernel's)
  cc::Buf idx = kb.input("idx", DType::I32, {t, k});
  cc::Buf order = kb.input("order", DType::I32, {t * k}),
          offsets = kb.input("offsets", DType::I32, {sd - sh.off});
  cc::Buf g = kb.input("g", DType::F32, {t * k, e});
  cc::Buf part = kb.output("part", DType::F32, {t * k, e});
  cc::Buf seg_key = kb.output("seg_key", DType::I32, {t * k});
  kb.body({cc::ceildiv(t * k, i64(kWindow))}, kCols, [&](cc::Scope& s) {
    cc::Val n = s.let(t * k, "n");
    cc::Val p0 = s.let(s.block_idx(0) * kWindow, "p0");
    cc::Buf key_of = s.alloc_shared("key_of", DType::I32, {kWindow});    // -1: no key
    cc::Buf entry = s.alloc_shared("entry", DType::I32, {kWindow});      // o, or -1: bad
    cc::Buf seg_end = s.alloc_shared("seg_end", DType::I32, {kWindow});  // -1: no start
    cc::Buf seg_bad = s.alloc_shared("seg_bad", DType::I32, {kWindow});  // 1: a bad entry
    cc::Buf lo = s.alloc_fragment("lo", DType::I64, {kWindow});
    cc::Buf hi = s.alloc_fragment("hi", DType::I64, {kWindow});
    // Each position's key: the last whose offset is at most p (the first above p, less one),
    // checked against key_run's [begin, end) of that key, and its entry checked. Keys here are
    // idx's ids (kv's rows less off), as the offsets are.
    const cc::Val keys = sh.off > 0 ? s.let(sd - sh.off, "keys") : cc::Val(sd);
    s.parallel(kWindow, [&](cc::Idx i) {
      cc::Val p = s.let(p0 + i, "p");
      s.if_then_else(
          p < n,
          [&] {
            auto offset_at = [&](const cc::Val& q) {
              return cc::to_i64(offsets(cc::min(cc::max(q, i64(0)), keys - 1)));
            };
            sorted_lower_bound(s, lo, hi, i, keys, kSearchSteps, offset_at, p + 1);
            cc::Val kk = s.let(lo(i) - 1, "kk");
            cc::Val kc = s.let(cc::max(kk, i64(0)), "kc");
            const KeyRun run = key_run(s, offsets, kc, keys, n);
            cc::Val in_run = s.let(kk >= 0 && run.begin <= p && p < run.end, "in_run");
            cc::Val o = s.let(cc::to_i64(order(p)), "o");
            cc::Val oc = s.let(cc::min(cc::max(o, i64(0)), n - 1), "oc");
            cc::Val good = o >= 0 && o < n && in_run && cc::to_i64(idx(oc / k, oc % k)) == kk;
            // A position the offsets give to no key is no key's (as key_run leaves it out); one
            // they give to a key whose run does not hold it is that key's, bad.
            key_of(i) = cc::to_i32(kk);
            entry(i) = cc::to_i32(cc::select(good, o, i64(-1)));
          },
          [&] {
            key_of(i) = -1;
            entry(i) = -1;
          });
    });
    s.barrier();
    // Segment ends, from the window's end backwards by one thread: a start's end is where its
    // key stops.
    s.parallel(1, [&](cc::Idx) {
      s.serial(kWindow, [&](cc::Idx r) {
        cc::Val i = s.let(i64(kWindow - 1) - r, "i");
        cc::Val kk = s.let(cc::to_i64(key_of(i)), "kk");
        cc::Val same_next =
            s.let(i + 1 < kWindow && cc::to_i64(key_of(cc::min(i + 1, i64(kWindow - 1)))) == kk,
                  "same_next");
        cc::Val end = s.let(
            cc::select(same_next, cc::to_i64(seg_end(cc::min(i + 1, i64(kWindow - 1)))), i + 1),
            "end");
        // seg_end holds the run's end at every position until the starts are marked below;
        // seg_bad whether an entry from here to that end is bad.
        seg_end(i) = cc::to_i32(end);
        cc::Val bad_next =
            s.let(same_next && cc::to_i64(seg_bad(cc::min(i + 1, i64(kWindow - 1)))) == 1, "bn");
        seg_bad(i) = cc::to_i32(cc::select(bad_next || cc::to_i64(entry(i)) == -1, i64(1), i64(0)));
      });
    });
    s.barrier();
    // A start is a keyed position whose predecessor in the window has another key.
    cc::Buf start_end = s.alloc_shared("start_end", DType::I32, {kWindow});
    s.parallel(kWindow, [&](cc::Idx i) {
      cc::Val kk = s.let(cc::to_i64(key_of(i)), "kk");
      cc::Val prev = s.let(cc::to_i64(key_of(cc::max(i - 1, i64(0)))), "prev");
      cc::Val start = s.let(kk >= 0 && (i == 0 || prev != kk), "start");
      start_end(i) = cc::to_i32(cc::select(start, cc::to_i64(seg_end(i)), i64(-1)));
      s.if_then(p0 + i < n, [&] { seg_key(p0 + i) = cc::to_i32(cc::select(start, kk, i64(-1))); });
    });
    s.barrier();
    // Each segment's rows summed, kWidth columns a thread: the segments are block-uniform (shared
    // memory), so each step below is its own parallel with no guard or inner loop in it, and g's
    // rows and part's move as 16-byte vectors (one column a thread, scalar: 372 us at T = 1024,
    // H = 16, K = 256, E = 512).
    const int64_t cols = kCols * kWidth;
    std::vector<cc::Buf> acc;
    for (int l = 0; l < kLanes; ++l)
      acc.push_back(s.alloc_fragment("acc" + std::to_string(l), DType::F32, {cols}));
    auto segments = [&](const cc::Val& c0, bool guarded) {
      auto columns = [&](const std::function<void(const cc::Idx&, const cc::Idx&)>& body) {
        s.annotate_layout(kWidth);
        s.parallel(cols, [&](cc::Idx c) {
          cc::Idx col = c0 + c;
          if (guarded)
            s.if_then(col < e, [&] { body(c, col); });
          else
            body(c, col);
        });
      };
      s.serial(i64(kWindow), [&](cc::Idx i) {
        cc::Val stop = s.let(cc::to_i64(start_end(i)), "stop");
        s.if_then(stop >= 0, [&] {
          for (const cc::Buf& a : acc)
            columns([&](const cc::Idx& c, const cc::Idx&) { a(c) = 0.0f; });
          // Branch-free over the lanes: a slot past the segment (or a bad entry) adds +0.
          s.serial(cc::ceildiv(stop - i, i64(kLanes)), [&](cc::Idx rr) {
            for (int l = 0; l < kLanes; ++l) {
              cc::Val q = s.let(i + rr * kLanes + l, "q");
              cc::Val o = s.let(
                  cc::select(q < stop, cc::to_i64(entry(cc::min(q, i64(kWindow - 1)))), i64(-2)),
                  "o");
              cc::Val oc = s.let(cc::min(cc::max(o, i64(0)), n - 1), "oc");
              columns([&](const cc::Idx& c, const cc::Idx& col) {
                acc[l](c) = acc[l](c) + cc::select(o >= 0, g(oc, col), 0.0f);
              });
            }
          });
          cc::Val bad = s.let(cc::to_i64(seg_bad(i)) == 1, "bad");
          columns([&](const cc::Idx& c, const cc::Idx& col) {
            cc::Val sum = acc[0](c);
            for (int l = 1; l < kLanes; ++l) sum = sum + acc[l](c);
            part(p0 + i, col) = cc::select(bad, nan_f32(), sum);
          });
        });
      });
    };
    // The columns `cols` at a time: the window's searches and segments serve every column.
    s.serial(cc::ceildiv(e, i64(cols)), [&](cc::Idx cb) {
      cc::Val c0 = s.let(cb * cols, "c0");
      s.if_then_else(
          c0 + cols <= e, [&] { segments(c0, false); }, [&] { segments(c0, true); });
    });
  });
  return kb.build();
}

cc::Kernel build_grad_key_sums_tc(DType dt, const SparseAttentionShape& sh) {
  cc::KernelBuilder kb(kernel_name("sparse_attention_tc_grad_key_sums", dt, sh));
  cc::Dim t = kb.dim("T"), sd = kb.dim("S"), e = kb.dim("E");
  const cc::Val k(sh.selected());
  cc::Buf offsets = kb.input("offsets", DType::I32, {sd - sh.off});
  cc::Buf part = kb.input("part", DType::F32, {t * k, e});
  cc::Buf seg_key = kb.input("seg_key", DType::I32, {t * k});
  cc::Buf band;  // with a window: each key's band sum (keys below T), added first
  if (sh.w > 0) band = kb.input("band", DType::F32, {t, e});
  cc::Buf dkv = kb.output("dkv", dt, {sd, e});
  kb.body({sd, cc::ceildiv(e, i64(kCols))}, kCols, [&](cc::Scope& s) {
    cc::Idx key = s.block_idx(0), base = s.block_idx(1) * kCols;
    cc::Val n = s.let(t * k, "n");
    const KeyRun run = key_run_shifted(s, offsets, key, sd, n, sh.off);
    // idx's id of this row (seg_key holds ids, as key_windows found them).
    const cc::Val id = sh.off > 0 ? s.let(key - sh.off, "id") : cc::Val(key);
    cc::Val first = s.let(run.begin / kWindow, "first");
    cc::Val windows = s.let(
        cc::select(run.end > run.begin, (run.end - 1) / kWindow - first + 1, i64(0)), "windows");
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kCols});
    cc::Buf bad = s.alloc_fragment("bad", DType::F32, {kCols});
    s.parallel(kCols, [&](cc::Idx c) {
      cc::Idx col = base + c;
      s.if_then(col < e, [&] {
        acc(c) = 0.0f;
        if (sh.w > 0) s.if_then(key < t, [&] { acc(c) = band(key, col); });
        bad(c) = 0.0f;
        s.serial(windows, [&](cc::Idx w) {
          cc::Val pos = s.let(cc::max(run.begin, (first + w) * kWindow), "pos");
          cc::Val pc = s.let(cc::min(cc::max(pos, i64(0)), n - 1), "pc");
          s.if_then_else(
              cc::to_i64(seg_key(pc)) == id, [&] { acc(c) = acc(c) + part(pc, col); },
              [&] { bad(c) = 1.0f; });
        });
        dkv(key, col) = cc::select(bad(c) == 0.0f, acc(c), nan_f32());
      });
    });
  });
  return kb.build();
}

}  // namespace tilerun::kernels::sparse_attention_detail
