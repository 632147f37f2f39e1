#include "kernels/block_scan.h"

#include <algorithm>

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace {

cc::Val zero_of(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return cc::Val(0.0f);
    case DType::I32:
      return cc::to_i32(cc::Val(0));
    default:
      return cc::Val(int64_t{0});
  }
}

}  // namespace

void block_scan_sum(cc::Scope& s, const std::string& name, int threads, const cc::Buf& x,
                    const cc::Buf& exclusive, const cc::Buf& total) {
  const int lanes = std::min(threads, 32), warps = threads / lanes;
  const DType dtype = x.dtype();
  const cc::Val zero = zero_of(dtype);
  cc::Buf partner = s.alloc_fragment(name + "_partner", dtype, {threads});
  cc::Buf warp_totals = s.alloc_shared(name + "_warp_totals", dtype, {warps});
  s.parallel(threads, [&](cc::Idx t) {
    exclusive(t) = zero;
    total(t) = x(t);
  });
  for (int o = 1; o < lanes; o *= 2) {
    s.shuffle_xor(partner, total, o);
    s.parallel(threads, [&](cc::Idx t) {
      s.if_then((t % lanes) / o % 2 == 1, [&] { exclusive(t) = exclusive(t) + partner(t); });
      total(t) = total(t) + partner(t);
    });
  }
  s.parallel(threads, [&](cc::Idx t) {
    s.if_then(t % lanes == 0, [&] { warp_totals(t / lanes) = total(t); });
  });
  s.barrier();
  s.parallel(threads, [&](cc::Idx t) {
    cc::Val warp = s.let(t / lanes, "warp");
    cc::Val before = zero, all = zero;
    for (int w = 0; w < warps; ++w) {
      cc::Val v = s.let(warp_totals(w), "warp_total");
      before = s.let(cc::select(cc::Val(int64_t{w}) < warp, before + v, before), "before");
      all = s.let(all + v, "all");
    }
    exclusive(t) = before + exclusive(t);
    total(t) = all;
  });
  s.barrier();
}

void block_sums(cc::Scope& s, const std::string& name, int threads,
                const std::vector<cc::Buf>& counters, const cc::Buf& totals) {
  const int lanes = std::min(threads, 32), warps = threads / lanes;
  const int64_t n = static_cast<int64_t>(counters.size());
  const DType dtype = counters.at(0).dtype();
  const cc::Val zero = zero_of(dtype);
  cc::Buf partner = s.alloc_fragment(name + "_partner", dtype, {threads});
  cc::Buf warp_sums = s.alloc_shared(name + "_warp_sums", dtype, {warps, n});
  for (int64_t c = 0; c < n; ++c) {
    const cc::Buf& counter = counters[c];
    for (int o = 1; o < lanes; o *= 2) {
      s.shuffle_xor(partner, counter, o);
      s.parallel(threads, [&](cc::Idx t) { counter(t) = counter(t) + partner(t); });
    }
    s.parallel(threads, [&](cc::Idx t) {
      s.if_then(t % lanes == 0, [&] { warp_sums(t / lanes, c) = counter(t); });
    });
  }
  s.barrier();
  s.parallel(n, [&](cc::Idx c) {
    cc::Val sum = zero;
    for (int w = 0; w < warps; ++w) sum = s.let(sum + warp_sums(w, c), "sum");
    totals(c) = sum;
  });
  s.barrier();
}

}  // namespace tilerun::kernels
