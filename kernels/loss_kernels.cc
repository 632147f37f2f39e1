#include "kernels/loss_kernels.h"

#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// Rows: one block each. Totals: one block, whatever R is, so the order of the sum over rows is
// fixed by R and these constants alone. Flat gradient kernels: one element per thread.
constexpr int kRowThreads = 128, kTotalThreads = 256, kFlatThreads = 256;

std::string suffix(DType dtype) { return "_" + std::string(dtype_name(dtype)); }

cc::Val nan_f32() { return cc::Val(std::numeric_limits<float>::quiet_NaN()); }

// 1 for a row that counts (its target is not ignore_index), else 0, as f32.
cc::Val counted(const cc::Val& target, const cc::Val& ignore) {
  return cc::select(target == ignore, cc::Val(0.0f), cc::Val(1.0f));
}

}  // namespace

cc::Kernel build_half_sum_squares_rows(DType dtype) {
  cc::KernelBuilder kb("half_sum_squares_rows" + suffix(dtype));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d});
  cc::Buf part = kb.output("part", DType::F32, {r});
  kb.body({r}, kRowThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val sum = s.reduce_sum(d, [&](cc::Idx j) {
      cc::Val v = x(row, j);
      return v * v;
    });
    s.parallel(1, [&](cc::Idx i) { part(row + i) = sum; });
  });
  return kb.build();
}

cc::Kernel build_loss_total() {
  cc::KernelBuilder kb("loss_total");
  cc::Dim r = kb.dim("R");
  cc::Buf part = kb.input("part", DType::F32, {r});
  cc::Buf out = kb.output("out", DType::F32, {1});
  cc::Val divisor = kb.scalar_f32("divisor");
  kb.body({1}, kTotalThreads, [&](cc::Scope& s) {
    cc::Val sum = s.reduce_sum(r, [&](cc::Idx i) { return part(i); });
    s.parallel(1, [&](cc::Idx i) { out(i) = sum / divisor; });
  });
  return kb.build();
}

cc::Kernel build_half_sum_squares_grad(DType dtype) {
  cc::KernelBuilder kb("half_sum_squares_grad" + suffix(dtype));
  cc::Dim n = kb.dim("N");
  cc::Buf x = kb.input("x", dtype, {n});
  cc::Buf dy = kb.input("dloss", DType::F32, {1});
  cc::Buf dx = kb.output("dx", dtype, {n});
  kb.body({cc::ceildiv(n, kFlatThreads)}, kFlatThreads, [&](cc::Scope& s) {
    s.parallel(kFlatThreads, [&](cc::Idx i) {
      cc::Idx e = s.block_idx(0) * kFlatThreads + i;
      s.if_then(e < n, [&] { dx(e) = dy(0) * x(e); });
    });
  });
  return kb.build();
}

namespace {

// part[r] = sum_j term(a[r, j], b[r, j]): one block per row.
cc::Kernel build_pair_rows(const std::string& name, DType dtype,
                           const std::function<cc::Val(const cc::Val&, const cc::Val&)>& term) {
  cc::KernelBuilder kb(name + suffix(dtype));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf a = kb.input("a", dtype, {r, d}), b = kb.input("b", dtype, {r, d});
  cc::Buf part = kb.output("part", DType::F32, {r});
  kb.body({r}, kRowThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val sum = s.reduce_sum(d, [&](cc::Idx j) { return term(a(row, j), b(row, j)); });
    s.parallel(1, [&](cc::Idx i) { part(row + i) = sum; });
  });
  return kb.build();
}

// (da, db) = grads(a[e], b[e], dloss / divisor) over N elements, one per thread.
cc::Kernel build_pair_grad(
    const std::string& name, DType dtype,
    const std::function<std::pair<cc::Val, cc::Val>(cc::Scope&, const cc::Val&, const cc::Val&,
                                                    const cc::Val&)>& grads) {
  cc::KernelBuilder kb(name + suffix(dtype));
  cc::Dim n = kb.dim("N");
  cc::Buf a = kb.input("a", dtype, {n}), b = kb.input("b", dtype, {n});
  cc::Buf dy = kb.input("dloss", DType::F32, {1});
  cc::Buf da = kb.output("da", dtype, {n}), db = kb.output("db", dtype, {n});
  cc::Val divisor = kb.scalar_f32("divisor");
  kb.body({cc::ceildiv(n, kFlatThreads)}, kFlatThreads, [&](cc::Scope& s) {
    s.parallel(kFlatThreads, [&](cc::Idx i) {
      cc::Idx e = s.block_idx(0) * kFlatThreads + i;
      s.if_then(e < n, [&] {
        cc::Val factor = s.let(dy(0) / divisor, "factor");
        auto [ga, gb] = grads(s, s.let(a(e), "a"), s.let(b(e), "b"), factor);
        da(e) = ga;
        db(e) = gb;
      });
    });
  });
  return kb.build();
}

}  // namespace

cc::Kernel build_mse_rows(DType dtype) {
  return build_pair_rows("mse_rows", dtype, [](const cc::Val& a, const cc::Val& b) {
    cc::Val d = a - b;
    return d * d;
  });
}

cc::Kernel build_mse_grad(DType dtype) {
  return build_pair_grad("mse_grad", dtype,
                         [](cc::Scope& s, const cc::Val& a, const cc::Val& b, const cc::Val& f) {
                           cc::Val g = s.let((a - b) * (f * 2.0f), "g");
                           return std::pair{g, -g};
                         });
}

cc::Kernel build_kl_div_rows(DType dtype) {
  return build_pair_rows("kl_div_rows", dtype, [](const cc::Val& lp, const cc::Val& q) {
    return cc::select(q > 0.0f, q * (cc::log(q) - lp), cc::Val(0.0f));
  });
}

cc::Kernel build_kl_div_grad(DType dtype) {
  return build_pair_grad(
      "kl_div_grad", dtype, [](cc::Scope&, const cc::Val& lp, const cc::Val& q, const cc::Val& f) {
        cc::Val dq = cc::select(q > 0.0f, (cc::log(q) + 1.0f - lp) * f, cc::Val(0.0f));
        return std::pair{-(q * f), dq};
      });
}

cc::Kernel build_cross_entropy_rows(DType dtype) {
  cc::KernelBuilder kb("cross_entropy_rows" + suffix(dtype));
  cc::Dim r = kb.dim("R"), v = kb.dim("V");
  cc::Buf x = kb.input("logits", dtype, {r, v});
  cc::Buf t = kb.input("targets", DType::I32, {r});
  cc::Buf part = kb.output("part", DType::F32, {r});
  cc::Val ignore = kb.scalar_i32("ignore_index");
  kb.body({r}, kRowThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val target = s.let(cc::to_i64(t(row)), "target");
    cc::Val mx = s.reduce_max(v, [&](cc::Idx j) { return x(row, j); });
    cc::Val sum = s.reduce_sum(v, [&](cc::Idx j) { return cc::exp(x(row, j) - mx); });
    // The target's logit without a data-dependent address: every other term adds +0 exactly.
    cc::Val picked = s.reduce_sum(
        v, [&](cc::Idx j) { return cc::select(j == target, x(row, j), cc::Val(0.0f)); });
    cc::Val loss = s.let(cc::log(sum) + mx - picked, "loss");
    cc::Val in_range = target >= 0 && target < v;
    s.parallel(1, [&](cc::Idx i) {
      part(row + i) = cc::select(cc::to_i64(ignore) == target, cc::Val(0.0f),
                                 cc::select(in_range, loss, nan_f32()));
    });
  });
  return kb.build();
}

cc::Kernel build_cross_entropy_total() {
  cc::KernelBuilder kb("cross_entropy_total");
  cc::Dim r = kb.dim("R");
  cc::Buf part = kb.input("part", DType::F32, {r});
  cc::Buf t = kb.input("targets", DType::I32, {r});
  cc::Buf out = kb.output("out", DType::F32, {1});
  cc::Val ignore = kb.scalar_i32("ignore_index");
  kb.body({1}, kTotalThreads, [&](cc::Scope& s) {
    cc::Val sum = s.reduce_sum(r, [&](cc::Idx i) { return part(i); });
    cc::Val count = s.reduce_sum(r, [&](cc::Idx i) { return counted(t(i), ignore); });
    s.parallel(1, [&](cc::Idx i) { out(i) = sum / cc::max(count, cc::Val(1.0f)); });
  });
  return kb.build();
}

cc::Kernel build_cross_entropy_count() {
  cc::KernelBuilder kb("cross_entropy_count");
  cc::Dim r = kb.dim("R");
  cc::Buf t = kb.input("targets", DType::I32, {r});
  cc::Buf out = kb.output("count", DType::F32, {1});
  cc::Val ignore = kb.scalar_i32("ignore_index");
  kb.body({1}, kTotalThreads, [&](cc::Scope& s) {
    cc::Val count = s.reduce_sum(r, [&](cc::Idx i) { return counted(t(i), ignore); });
    s.parallel(1, [&](cc::Idx i) { out(i) = cc::max(count, cc::Val(1.0f)); });
  });
  return kb.build();
}

cc::Kernel build_cross_entropy_grad(DType dtype) {
  cc::KernelBuilder kb("cross_entropy_grad" + suffix(dtype));
  cc::Dim r = kb.dim("R"), v = kb.dim("V");
  cc::Buf x = kb.input("logits", dtype, {r, v});
  cc::Buf t = kb.input("targets", DType::I32, {r});
  cc::Buf dy = kb.input("dloss", DType::F32, {1});
  cc::Buf count = kb.input("count", DType::F32, {1});
  cc::Buf dx = kb.output("dlogits", dtype, {r, v});
  cc::Val ignore = kb.scalar_i32("ignore_index");
  kb.body({r}, kRowThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Val target = s.let(cc::to_i64(t(row)), "target");
    cc::Val mx = s.reduce_max(v, [&](cc::Idx j) { return x(row, j); });
    cc::Val sum = s.reduce_sum(v, [&](cc::Idx j) { return cc::exp(x(row, j) - mx); });
    cc::Val ignored = s.let(cc::select(cc::to_i64(ignore) == target, cc::Val(1.0f), 0.0f), "ign");
    cc::Val in_range = target >= 0 && target < v;
    cc::Val scale = s.let(cc::select(in_range, dy(0) / count(0), nan_f32()), "scale");
    s.parallel(v, [&](cc::Idx j) {
      cc::Val p = cc::exp(x(row, j) - mx) / sum;
      cc::Val g = (p - cc::select(j == target, cc::Val(1.0f), cc::Val(0.0f))) * scale;
      dx(row, j) = cc::select(ignored == 1.0f, cc::Val(0.0f), g);
    });
  });
  return kb.build();
}

cc::Kernel build_loss_seed() {
  cc::KernelBuilder kb("loss_seed");
  cc::Buf loss = kb.input("loss", DType::F32, {1});
  cc::Buf out = kb.output("dloss", DType::F32, {1});
  cc::Val weight = kb.scalar_f32("weight");
  (void)loss;
  kb.body({1}, 32, [&](cc::Scope& s) { s.parallel(1, [&](cc::Idx i) { out(i) = weight; }); });
  return kb.build();
}

}  // namespace tilerun::kernels
