#include "kernels/softmax_kernel.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace {

constexpr int kThreads = static_cast<int>(kLanes);

cc::Val plus(cc::Val a, cc::Val b) { return a + b; }

// "row" (a block per row), "col" (a thread per row of a strided axis), "seq" (a thread per row
// of a short last axis).
std::string shape_of(const AxisView& v) {
  return use_row_kernel(v) ? "row" : v.inner > 1 ? "col" : "seq";
}

std::string fwd_name(SoftmaxVariant v, const std::string& shape, DType dt) {
  return std::string(v.log ? "log_softmax" : "softmax") + "_lane_" + shape +
         (v.bias ? "_bias" : "") + (v.sink ? "_sink" : "") + "_" + std::string(dtype_name(dt));
}

// Block (pb, po) of x [Po, Pb, K]. Parameters: x, [bias], [sink], y; Po, Pb, K; scale.
cc::Kernel build_fwd_row(SoftmaxVariant v, DType dt) {
  cc::KernelBuilder kb(fwd_name(v, "row", dt));
  cc::Dim po = kb.dim("Po"), pb = kb.dim("Pb"), k = kb.dim("K");
  cc::Buf x = kb.input("x", dt, {po, pb, k}), bias, sink;
  if (v.bias) bias = kb.input("bias", dt, {pb, k});
  if (v.sink) sink = kb.input("sink", dt, {po, pb});
  cc::Buf y = kb.output("y", dt, {po, pb, k});
  cc::Val scale = kb.scalar_f32("scale");
  kb.body({pb, po}, kThreads, [&](cc::Scope& s) {
    cc::Idx ib = s.block_idx(0), io = s.block_idx(1);
    auto z = [&](const cc::Idx& j) {
      cc::Val zj = scale * x(io, ib, j);
      return v.bias ? zj + bias(ib, j) : zj;
    };
    cc::Buf lanes = s.alloc_shared("lanes", DType::F32, {kLanes});
    cc::Buf total = s.alloc_shared("total", DType::F32, {1});
    cc::Val m = s.let(s.reduce_max(k, z), "m");
    if (v.sink) m = s.let(cc::max(m, sink(io, ib)), "m");
    fold_row(
        s, k, lanes, total, [&](cc::Idx j) { return cc::exp(z(j) - m); }, plus);
    cc::Val d = total(0);
    if (v.sink) d = d + cc::exp(sink(io, ib) - m);
    d = s.let(d, "d");
    cc::Val log_d = v.log ? s.let(cc::log(d), "log_d") : cc::Val();
    s.parallel(
        k, [&](cc::Idx j) { y(io, ib, j) = v.log ? (z(j) - m) - log_d : cc::exp(z(j) - m) / d; });
  });
  return kb.build();
}

// One thread per row. inner (R > 1): x [Po, Pb, K, R], blocks (pb, r-tile, po); otherwise
// x [Po, Pb, K], blocks (pb-tile, po). Parameters: x, [bias], [sink], y; Po, Pb, K, [R]; scale.
cc::Kernel build_fwd_thread(SoftmaxVariant v, DType dt, bool inner) {
  cc::KernelBuilder kb(fwd_name(v, inner ? "col" : "seq", dt));
  cc::Dim po = kb.dim("Po"), pb = kb.dim("Pb"), k = kb.dim("K");
  cc::Dim r = inner ? kb.dim("R") : cc::Dim(cc::Val(1), "R");
  auto shape = [&](std::vector<cc::Val> dims) {
    if (inner) dims.push_back(r);
    return dims;
  };
  cc::Buf x = kb.input("x", dt, shape({po, pb, k})), bias, sink;
  if (v.bias) bias = kb.input("bias", dt, shape({pb, k}));
  if (v.sink) sink = kb.input("sink", dt, shape({po, pb}));
  cc::Buf y = kb.output("y", dt, shape({po, pb, k}));
  cc::Val scale = kb.scalar_f32("scale");
  std::vector<cc::Val> grid = {inner ? cc::Val(pb) : cc::ceildiv(pb, kThreads)};
  if (inner) grid.push_back(cc::ceildiv(r, kThreads));
  grid.push_back(po);
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Buf mx = s.alloc_fragment("mx", DType::F32, {kLanes});
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kLanes});
    cc::Buf part = s.alloc_fragment("part", DType::F32, {kLanes});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx io = s.block_idx(inner ? 2 : 1);
      cc::Idx ib = inner ? s.block_idx(0) : s.block_idx(0) * kThreads + t;
      cc::Idx ir = inner ? s.block_idx(1) * kThreads + t : cc::Idx(0);
      auto at = [&](const cc::Buf& b, std::vector<cc::Val> idx) {
        if (inner) idx.push_back(ir);
        return b.at(idx);
      };
      auto z = [&](const cc::Idx& j) {
        cc::Val zj = scale * at(x, {io, ib, j});
        return v.bias ? zj + at(bias, {ib, j}) : zj;
      };
      s.if_then(inner ? ir < r : ib < pb, [&] {
        mx(t) = z(cc::Idx(0));
        s.serial(k - 1, [&](cc::Idx j) { mx(t) = cc::max(mx(t), z(j + 1)); });
        if (v.sink) mx(t) = cc::max(mx(t), at(sink, {io, ib}));
        cc::Val m = s.let(mx(t), "m");
        fold_thread(
            s, k, t, acc, part, [&](cc::Idx j) { return cc::exp(z(j) - m); }, plus);
        cc::Val d = acc(t);
        if (v.sink) d = d + cc::exp(at(sink, {io, ib}) - m);
        d = s.let(d, "d");
        cc::Val log_d = v.log ? s.let(cc::log(d), "log_d") : cc::Val();
        s.serial(k, [&](cc::Idx j) {
          at(y, {io, ib, j}) = v.log ? (z(j) - m) - log_d : cc::exp(z(j) - m) / d;
        });
      });
    });
  });
  return kb.build();
}

// The backward kernels see y and dy as [P, K, R].
std::string grad_name(bool log, const std::string& shape, DType dt) {
  return std::string(log ? "log_softmax" : "softmax") + "_grad_lane_" + shape + "_" +
         std::string(dtype_name(dt));
}

// The gradient's element: q is what the row sums (y·dy, or dy for log_softmax).
cc::Val grad_q(bool log, const cc::Val& y, const cc::Val& dy) { return log ? dy : y * dy; }
cc::Val grad_dx(bool log, const cc::Val& y, const cc::Val& dy, const cc::Val& dot,
                const cc::Val& scale) {
  return log ? scale * (dy - cc::exp(y) * dot) : scale * (y * (dy - dot));
}

// Block per row of y [P, K]. Parameters: y, dy, dx; P, K; scale.
cc::Kernel build_grad_row(bool log, DType dt) {
  cc::KernelBuilder kb(grad_name(log, "row", dt));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Buf y = kb.input("y", dt, {p, k}), dy = kb.input("dy", dt, {p, k});
  cc::Buf dx = kb.output("dx", dt, {p, k});
  cc::Val scale = kb.scalar_f32("scale");
  kb.body({p}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    cc::Buf lanes = s.alloc_shared("lanes", DType::F32, {kLanes});
    cc::Buf total = s.alloc_shared("total", DType::F32, {1});
    fold_row(
        s, k, lanes, total, [&](cc::Idx j) { return grad_q(log, y(row, j), dy(row, j)); }, plus);
    cc::Val dot = s.let(total(0), "dot");
    s.parallel(k, [&](cc::Idx j) { dx(row, j) = grad_dx(log, y(row, j), dy(row, j), dot, scale); });
  });
  return kb.build();
}

// Block per row of y [P, K]: the sink's gradient, -(1 - sum(p)) · sum(q), both sums lane-order
// folds of the row (a long row: V4's attention rows of T + C = 5120 took 25 ms at T = 4096 on
// the H200 as one thread per row). Parameters: y, dy, dsink; P, K.
cc::Kernel build_sink_grad_row(bool log, DType dt) {
  cc::KernelBuilder kb(std::string(log ? "log_softmax" : "softmax") + "_sink_grad_row_" +
                       std::string(dtype_name(dt)));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Buf y = kb.input("y", dt, {p, k}), dy = kb.input("dy", dt, {p, k});
  cc::Buf out = kb.output("dsink", dt, {p});
  kb.body({p}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    // Separate scratch per fold: the second fold's writes never meet the first total's reads.
    cc::Buf lanes_q = s.alloc_shared("lanes_q", DType::F32, {kLanes});
    cc::Buf total_q = s.alloc_shared("total_q", DType::F32, {1});
    cc::Buf lanes_p = s.alloc_shared("lanes_p", DType::F32, {kLanes});
    cc::Buf total_p = s.alloc_shared("total_p", DType::F32, {1});
    fold_row(
        s, k, lanes_q, total_q, [&](cc::Idx j) { return grad_q(log, y(row, j), dy(row, j)); },
        plus);
    fold_row(
        s, k, lanes_p, total_p,
        [&](cc::Idx j) {
          cc::Val yv = y(row, j);
          return log ? cc::exp(yv) : yv;
        },
        plus);
    s.parallel(1, [&](cc::Idx) { out(row) = -(1.0f - total_p(0)) * total_q(0); });
  });
  return kb.build();
}

// One thread per row: the gradient (sink = false; parameters y, dy, dx; P, K, [R]; scale) or
// the sink's gradient (sink = true; parameters y, dy, dsink; P, K, [R]).
cc::Kernel build_grad_thread(bool log, DType dt, bool inner, bool sink) {
  std::string shape = inner ? "col" : "seq";
  cc::KernelBuilder kb(sink ? std::string(log ? "log_softmax" : "softmax") + "_sink_grad_" + shape +
                                  "_" + std::string(dtype_name(dt))
                            : grad_name(log, shape, dt));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Dim r = inner ? kb.dim("R") : cc::Dim(cc::Val(1), "R");
  auto shape_of_rows = [&](std::vector<cc::Val> dims) {
    if (inner) dims.push_back(r);
    return dims;
  };
  cc::Buf y = kb.input("y", dt, shape_of_rows({p, k})),
          dy = kb.input("dy", dt, shape_of_rows({p, k}));
  cc::Buf out = sink ? kb.output("dsink", dt, shape_of_rows({p}))
                     : kb.output("dx", dt, shape_of_rows({p, k}));
  cc::Val scale = sink ? cc::Val(1.0f) : kb.scalar_f32("scale");
  std::vector<cc::Val> grid = {inner ? cc::Val(p) : cc::ceildiv(p, kThreads)};
  if (inner) grid.push_back(cc::ceildiv(r, kThreads));
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kLanes});
    cc::Buf acc_p = s.alloc_fragment("acc_p", DType::F32, {kLanes});
    cc::Buf part = s.alloc_fragment("part", DType::F32, {kLanes});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx ip = inner ? s.block_idx(0) : s.block_idx(0) * kThreads + t;
      cc::Idx ir = inner ? s.block_idx(1) * kThreads + t : cc::Idx(0);
      auto at = [&](const cc::Buf& b, std::vector<cc::Val> idx) {
        if (inner) idx.push_back(ir);
        return b.at(idx);
      };
      s.if_then(inner ? ir < r : ip < p, [&] {
        fold_thread(
            s, k, t, acc, part,
            [&](cc::Idx j) {
              return grad_q(log, at(y, {ip, j}), at(dy, {ip, j}));
            },
            plus);
        cc::Val dot = s.let(acc(t), "dot");
        if (sink) {
          fold_thread(
              s, k, t, acc_p, part,
              [&](cc::Idx j) {
                cc::Val yv = at(y, {ip, j});
                return log ? cc::exp(yv) : yv;
              },
              plus);
          at(out, {ip}) = -(1.0f - acc_p(t)) * dot;
        } else {
          s.serial(k, [&](cc::Idx j) {
            at(out, {ip, j}) = grad_dx(log, at(y, {ip, j}), at(dy, {ip, j}), dot, scale);
          });
        }
      });
    });
  });
  return kb.build();
}

std::vector<int64_t> rows_dims(const AxisView& v) {
  if (v.inner > 1) return {v.outer, v.extent, v.inner};
  return {v.outer, v.extent};
}

}  // namespace

KernelCall softmax_call(KernelCache& cache, SoftmaxVariant v, DType dtype, const SoftmaxView& view,
                        double scale) {
  AxisView rows{.outer = view.po * view.pb, .extent = view.k, .inner = view.r};
  std::string shape = shape_of(rows);
  auto kernel = cache.get(fwd_name(v, shape, dtype), [&] {
    return shape == "row" ? build_fwd_row(v, dtype) : build_fwd_thread(v, dtype, shape == "col");
  });
  KernelCall call{.kernel = kernel, .buffers = {input_slot(0)}, .scalars = {scale}};
  int slot = 1;
  if (v.bias) call.buffers.push_back(input_slot(slot++));
  if (v.sink) call.buffers.push_back(input_slot(slot++));
  call.buffers.push_back(output_slot(0));
  call.dims = {view.po, view.pb, view.k};
  if (shape == "col") call.dims.push_back(view.r);
  return call;
}

KernelCall softmax_grad_call(KernelCache& cache, bool log, DType dtype, const AxisView& view,
                             double scale) {
  std::string shape = shape_of(view);
  auto kernel = cache.get(grad_name(log, shape, dtype), [&] {
    return shape == "row" ? build_grad_row(log, dtype)
                          : build_grad_thread(log, dtype, shape == "col", false);
  });
  return {.kernel = kernel,
          .buffers = {input_slot(0), input_slot(1), output_slot(0)},
          .dims = rows_dims(view),
          .scalars = {scale}};
}

KernelCall softmax_sink_grad_call(KernelCache& cache, bool log, DType dtype, const AxisView& view) {
  const std::string shape = shape_of(view);
  std::string key = std::string(log ? "log_softmax" : "softmax") + "_sink_grad_" + shape + "." +
                    std::string(dtype_name(dtype));
  auto kernel = cache.get(key, [&] {
    return shape == "row" ? build_sink_grad_row(log, dtype)
                          : build_grad_thread(log, dtype, shape == "col", true);
  });
  return {.kernel = kernel,
          .buffers = {input_slot(0), input_slot(1), output_slot(0)},
          .dims = rows_dims(view)};
}

}  // namespace tilerun::kernels
