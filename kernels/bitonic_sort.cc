#include "kernels/bitonic_sort.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

void bitonic_sort(cc::Scope& s, const cc::Buf& keys, int64_t m, bool descending) {
  // Blocks of `size` alternate the final direction and its opposite, halved by `half` until
  // the last merge (size = m) leaves the whole tile in the final direction.
  for (int64_t size = 2; size <= m; size *= 2)
    for (int64_t half = size / 2; half >= 1; half /= 2) {
      s.barrier();
      s.parallel(m / (2 * half), half, [&](cc::Idx a, cc::Idx b) {
        cc::Idx lo = s.let(a * (2 * half) + b, "lo");
        cc::Idx hi = s.let(lo + half, "hi");
        cc::Val u = s.let(keys(lo), "u"), w = s.let(keys(hi), "w");
        // (lo / size) % 2, with lo / size = a / (size / (2·half)) as b < half.
        cc::Val final_dir = (a / (size / (2 * half))) % 2 == 0;
        cc::Val out_of_order =
            descending ? cc::select(final_dir, u<w, u> w) : cc::select(final_dir, u > w, u < w);
        cc::Val swap = s.let(out_of_order, "swap");
        keys(lo) = cc::select(swap, w, u);
        keys(hi) = cc::select(swap, u, w);
      });
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
      s.if_then_else(
          key(mid) < target, [&] { lo(t) = mid + 1; }, [&] { hi(t) = mid; });
    });
  });
}

}  // namespace tilerun::kernels
