#include "kernels/bitonic_sort.h"

#include <limits>
#include <vector>

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

cc::Val monotone_bits(const cc::Val& v) {
  cc::Val bits = cc::bitcast(cc::Type::I32, cc::select(v == 0.0f, cc::Val(0.0f), v));
  cc::Val ordered =
      bits ^ (cc::shr(bits, cc::to_i32(cc::Val(31))) & cc::to_i32(cc::Val(0x7FFFFFFF)));
  return cc::select(v != v, cc::to_i32(cc::Val(0x7FFFFFFF)), ordered);
}

cc::Val sort_key(const cc::Val& v, const cc::Val& index) {
  return cc::to_i64(monotone_bits(v)) * int64_t{4294967296} + (4294967295 - index);
}

cc::Val sort_key_index(const cc::Val& key) { return 4294967295 - (key & 4294967295); }

cc::Val padding_key() { return cc::Val(std::numeric_limits<int64_t>::min() + 1); }

void bitonic_sort(cc::Scope& s, const cc::Buf& keys, int64_t m, bool descending) {
  // Blocks of `size` alternate the final direction and its opposite, halved by `half` until
  // the last merge (size = m) leaves the whole tile in the final direction. Up to three
  // consecutive halvings of a size (half, half / 2, half / 4) run in one pass between barriers
  // where the row is long enough to keep the block busy:
  // a thread takes the 2^r elements lo + c·q (q the pass's smallest half, c < 2^r), which those
  // stages exchange only among themselves, from registers. (One barrier and one shared round trip
  // a stage before: 55 for a row of 1024; 30 passes on 256 threads now.) The network compares the
  // same pairs in the same order, so the same result.
  for (int64_t size = 2; size <= m; size *= 2) {
    for (int64_t half = size / 2; half >= 1;) {
      // Stages in this pass: as many as keep every thread of the block busy (a thread takes 2^r
      // elements), at most three and at most the merge's remaining ones. (Three for a row of 64
      // on 256 threads left most of them idle: 4.0 -> 4.7 us at T = 1024.)
      int r = 1;
      while (r < 3 && (int64_t{1} << r) < 2 * half && (m >> (r + 1)) >= s.threads()) ++r;
      const int64_t q = half >> (r - 1);      // the pass's smallest half
      const int64_t group = int64_t{1} << r;  // elements a thread
      s.barrier();
      s.parallel(m / (group * q), q, [&](cc::Idx a, cc::Idx b) {
        cc::Idx lo = s.let(a * (group * q) + b, "lo");
        std::vector<cc::Val> v;
        for (int64_t c = 0; c < group; ++c) v.push_back(s.let(keys(lo + c * q), "u"));
        // (lo / size) % 2, with lo / size = a / (size / (group·q)) as b < q.
        cc::Val final_dir = s.let((a / (size / (group * q))) % 2 == 0, "dir");
        for (int stage = r - 1; stage >= 0; --stage) {
          const int64_t step = int64_t{1} << stage;  // partner c + step, at distance step·q
          for (int64_t c = 0; c < group; ++c) {
            if (c & step) continue;
            const cc::Val u = v[c], w = v[c + step];
            cc::Val out_of_order =
                descending ? cc::select(final_dir, u<w, u> w) : cc::select(final_dir, u > w, u < w);
            cc::Val swap = s.let(out_of_order, "swap");
            v[c] = s.let(cc::select(swap, w, u), "lo_key");
            v[c + step] = s.let(cc::select(swap, u, w), "hi_key");
          }
        }
        for (int64_t c = 0; c < group; ++c) keys(lo + c * q) = v[c];
      });
      half = q / 2;
    }
  }
  s.barrier();
}

int64_t bitonic_length(int64_t n) {
  int64_t m = 1;
  while (m < n) m *= 2;
  return m;
}

int search_steps(int64_t n) {
  int steps = 1;
  for (int64_t w = 1; w < n; w *= 2) ++steps;
  return steps;
}

void sorted_lower_bound(cc::Scope& s, const cc::Buf& lo, const cc::Buf& hi, const cc::Idx& t,
                        const cc::Val& n, int steps,
                        const std::function<cc::Val(const cc::Val&)>& key, const cc::Val& target) {
  lo(t) = cc::Val(int64_t{0});
  hi(t) = n;
  s.serial(steps, [&](cc::Idx) {
    cc::Val l = s.let(lo(t), "l"), h = s.let(hi(t), "h");
    s.if_then(l < h, [&] {
      cc::Val mid = s.let((l + h) / 2, "mid");
      // mid is in [0, n) by the search's invariant (0 <= lo <= mid < hi <= n), which the
      // analysis cannot see through the fragments: the clamp (a no-op) proves the key's load.
      cc::Val at = cc::min(cc::max(mid, cc::Val(int64_t{0})), n - 1);
      s.if_then_else(
          key(at) < target, [&] { lo(t) = mid + 1; }, [&] { hi(t) = mid; });
    });
  });
}

}  // namespace tilerun::kernels
