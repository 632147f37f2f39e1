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

void block_segmented_scan_sum(cc::Scope& s, const std::string& name, int threads, const cc::Buf& x,
                              const cc::Buf& heads, const cc::Buf& inclusive) {
  const int lanes = std::min(threads, 32), warps = threads / lanes;
  const DType dtype = x.dtype();
  const cc::Val zero = zero_of(dtype);
  const cc::Val no(cc::to_i32(cc::Val(0))), yes(cc::to_i32(cc::Val(1)));
  // The lane's prefix (its flag: a head in it) and its group's total (flag and sum).
  cc::Buf prefix_f = s.alloc_fragment(name + "_prefix_head", DType::I32, {threads});
  cc::Buf total = s.alloc_fragment(name + "_total", dtype, {threads});
  cc::Buf total_f = s.alloc_fragment(name + "_total_head", DType::I32, {threads});
  cc::Buf partner = s.alloc_fragment(name + "_partner", dtype, {threads});
  cc::Buf partner_f = s.alloc_fragment(name + "_partner_head", DType::I32, {threads});
  cc::Buf warp_totals = s.alloc_shared(name + "_warp_totals", dtype, {warps});
  cc::Buf warp_heads = s.alloc_shared(name + "_warp_heads", DType::I32, {warps});
  s.parallel(threads, [&](cc::Idx t) {
    cc::Val head = s.let(cc::select(heads(t) != no, yes, no), "head");
    inclusive(t) = x(t);
    prefix_f(t) = head;
    total(t) = x(t);
    total_f(t) = head;
  });
  for (int o = 1; o < lanes; o *= 2) {
    s.shuffle_xor(partner, total, o);
    s.shuffle_xor(partner_f, total_f, o);
    s.parallel(threads, [&](cc::Idx t) {
      cc::Val right = s.let((t % lanes) / o % 2 == 1, "right");  // the partner's group is left
      s.if_then(right, [&] {
        inclusive(t) = cc::select(prefix_f(t) != no, inclusive(t), partner(t) + inclusive(t));
        prefix_f(t) = cc::select(partner_f(t) != no, yes, prefix_f(t));
      });
      // combine(left, right): right's sum if right has a head, else left's + right's.
      cc::Val left_v = s.let(cc::select(right, partner(t), total(t)), "left_v");
      cc::Val right_v = s.let(cc::select(right, total(t), partner(t)), "right_v");
      cc::Val right_f = s.let(cc::select(right, total_f(t), partner_f(t)), "right_f");
      total(t) = cc::select(right_f != no, right_v, left_v + right_v);
      total_f(t) = cc::select(total_f(t) != no || partner_f(t) != no, yes, no);
    });
  }
  s.parallel(threads, [&](cc::Idx t) {
    s.if_then(t % lanes == 0, [&] {
      warp_totals(t / lanes) = total(t);
      warp_heads(t / lanes) = total_f(t);
    });
  });
  s.barrier();
  s.parallel(threads, [&](cc::Idx t) {
    cc::Val warp = s.let(t / lanes, "warp");
    cc::Val before = zero;  // the warps before this one, combined left to right
    for (int w = 0; w < warps; ++w) {
      cc::Val v = s.let(warp_totals(w), "warp_total");
      cc::Val combined = cc::select(warp_heads(w) != no, v, before + v);
      before = s.let(cc::select(cc::Val(int64_t{w}) < warp, combined, before), "before");
    }
    inclusive(t) = cc::select(prefix_f(t) != no, inclusive(t), before + inclusive(t));
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
