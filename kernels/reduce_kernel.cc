#include "kernels/reduce_kernel.h"

#include <algorithm>

#include "compiler/base/check.h"
#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

namespace {

// Threads per block of both kernels: the row kernel's lanes, the column kernel's outputs.
constexpr int kThreads = static_cast<int>(kLanes);
// The row kernel pays a block per output, worth it once a row fills half the lanes.
constexpr int64_t kRowKernelMinExtent = kLanes / 2;
// A strided axis takes a block per output too when there are fewer outputs than this (too few
// threads for the column kernel) and each is long; the grid's y axis (P) is at most 65535.
constexpr int64_t kFewOutputs = 1024, kStridedRowMinExtent = 256, kMaxGridY = 65535;

cc::Val fold_of(ReduceKind k, const cc::Val& a, const cc::Val& b) {
  if (k == ReduceKind::Max) return cc::max(a, b);
  if (k == ReduceKind::Min) return cc::min(a, b);
  return a + b;
}

// The element as the fold sees it; `m` is the row's max (LogSumExp only).
cc::Val map_of(ReduceKind k, const cc::Val& x, const cc::Val& m) {
  switch (k) {
    case ReduceKind::L2:
      return x * x;
    case ReduceKind::L1:
      return cc::abs(x);
    case ReduceKind::LogSumExp:
      return cc::exp(x - m);
    default:
      return x;
  }
}

cc::Val finish_of(ReduceKind k, const cc::Val& v, const cc::Val& extent, const cc::Val& m) {
  switch (k) {
    case ReduceKind::Mean:
      return v / cc::to_f32(extent);
    case ReduceKind::L2:
      return cc::sqrt(v);
    case ReduceKind::LogSumExp:
      return m + cc::log(v);
    default:
      return v;
  }
}

std::string kernel_name(ReduceKind kind, const std::string& shape, DType in, DType out) {
  std::string name = "reduce_" + reduce_kind_name(kind) + "_" + shape + "_";
  name += std::string(dtype_name(in));
  if (out != in) name += "_" + std::string(dtype_name(out));
  return name;
}

// One block per output. inner == false: x [P, K], blocks over p; parameters x, y; P, K. inner:
// x [P, K, R] (a strided axis with few outputs and a long extent), blocks (r, p) over grid
// {R, P}; parameters x, y; P, K, R.
cc::Kernel build_row(ReduceKind kind, DType in, DType out, bool inner) {
  cc::KernelBuilder kb(kernel_name(kind, inner ? "srow" : "row", in, out));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Dim r = inner ? kb.dim("R") : cc::Dim(cc::Val(1), "R");
  cc::Buf x = inner ? kb.input("x", in, {p, k, r}) : kb.input("x", in, {p, k});
  cc::Buf y = inner ? kb.output("y", out, {p, r}) : kb.output("y", out, {p});
  std::vector<cc::Val> grid = {inner ? cc::Val(r) : cc::Val(p)};
  if (inner) grid.push_back(p);
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(inner ? 1 : 0), col = inner ? s.block_idx(0) : cc::Idx(0);
    auto at = [&](const cc::Idx& j) { return inner ? x(row, j, col) : x(row, j); };
    cc::Buf lanes = s.alloc_shared("lanes", DType::F32, {kLanes});
    cc::Buf total = s.alloc_shared("total", DType::F32, {1});
    cc::Val m;
    if (kind == ReduceKind::LogSumExp) m = s.let(s.reduce_max(k, at), "m");
    fold_row(
        s, k, lanes, total, [&](cc::Idx j) { return map_of(kind, at(j), m); },
        [&](cc::Val a, cc::Val b) { return fold_of(kind, a, b); });
    s.parallel(1, [&](cc::Idx) {
      cc::Val v = finish_of(kind, total(0), k, m);
      if (inner)
        y(row, col) = v;
      else
        y(row) = v;
    });
  });
  return kb.build();
}

// One thread per output. With R > 1: x [P, K, R], the block (p, r-tile) over grid {P, R/128},
// consecutive threads on consecutive r (coalesced); parameters x, y; P, K, R. With R == 1 (short
// rows): x [P, K], a thread per row p; parameters x, y; P, K. Index maps stay affine (no
// division by a dim), so the proofs are quick.
cc::Kernel build_col(ReduceKind kind, DType in, DType out, bool inner) {
  cc::KernelBuilder kb(kernel_name(kind, inner ? "col" : "seq", in, out));
  cc::Dim p = kb.dim("P"), k = kb.dim("K");
  cc::Dim r = inner ? kb.dim("R") : cc::Dim(cc::Val(1), "R");
  cc::Buf x = inner ? kb.input("x", in, {p, k, r}) : kb.input("x", in, {p, k});
  cc::Buf y = inner ? kb.output("y", out, {p, r}) : kb.output("y", out, {p});
  std::vector<cc::Val> grid = {inner ? cc::Val(p) : cc::ceildiv(p, kThreads)};
  if (inner) grid.push_back(cc::ceildiv(r, kThreads));
  kb.body(grid, kThreads, [&](cc::Scope& s) {
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kLanes});
    cc::Buf part = s.alloc_fragment("part", DType::F32, {kLanes});
    cc::Buf mx = s.alloc_fragment("mx", DType::F32, {kLanes});
    s.parallel(kThreads, [&](cc::Idx t) {
      cc::Idx po = inner ? s.block_idx(0) : s.block_idx(0) * kThreads + t;
      cc::Idx ro = inner ? s.block_idx(1) * kThreads + t : cc::Idx(0);
      auto at = [&](const cc::Idx& j) { return inner ? x(po, j, ro) : x(po, j); };
      s.if_then(inner ? ro < r : po < p, [&] {
        cc::Val m;
        if (kind == ReduceKind::LogSumExp) {
          mx(t) = at(cc::Idx(0));
          s.serial(k - 1, [&](cc::Idx j) { mx(t) = cc::max(mx(t), at(j + 1)); });
          m = s.let(mx(t), "m");
        }
        fold_thread(
            s, k, t, acc, part, [&](cc::Idx j) { return map_of(kind, at(j), m); },
            [&](cc::Val a, cc::Val b) { return fold_of(kind, a, b); });
        cc::Val v = finish_of(kind, acc(t), k, m);
        if (inner)
          y(po, ro) = v;
        else
          y(po) = v;
      });
    });
  });
  return kb.build();
}

// The column kernel for a short axis (K <= kShortColumn) over rows of R, both constants, R a
// multiple of 8 and every element at most 2 bytes: `rows` outputs' rows a block (about 2048
// outputs), 8 consecutive outputs a thread, so that each of the K loads and the store is one
// 16-byte access; each output folds its K elements in order from the first, the column
// kernel's order for K <= kLanes, so the same bits. The column kernel's scalar loads left
// V4-mini's sum over a token's 6 routes ([T, 6, 1024] bf16) at a quarter of its memory floor on
// the H200 (52 us at T = 4096). Parameters x [P, K, R], y [P, R]; P.
constexpr int64_t kShortColumn = 16, kMaxVectorColumns = 16384;

std::string col_vectors_name(ReduceKind kind, int64_t k, int64_t r, DType in, DType out) {
  return kernel_name(kind, "col_k" + std::to_string(k) + "_r" + std::to_string(r), in, out);
}

cc::Kernel build_col_vectors(ReduceKind kind, DType in, DType out, int64_t k, int64_t r) {
  const int64_t rows = std::max<int64_t>(1, 2048 / r);
  cc::KernelBuilder kb(col_vectors_name(kind, k, r, in, out));
  cc::Dim p = kb.dim("P");
  cc::Buf x = kb.input("x", in, {p, cc::Val(k), cc::Val(r)});
  cc::Buf y = kb.output("y", out, {p, cc::Val(r)});
  kb.body({cc::ceildiv(p, rows)}, kThreads, [&](cc::Scope& s) {
    cc::Idx p0 = s.let(s.block_idx(0) * rows, "p0");
    whole_or_guarded(s, p0 + rows <= p, [&](bool guarded) {
      s.annotate_layout(8);
      s.parallel(rows, r, [&](cc::Idx i, cc::Idx c) {
        guard_if(s, guarded, p0 + i < p, [&] {
          cc::Val po = s.let(p0 + i, "po");
          cc::Val acc = s.let(map_of(kind, x(po, 0, c), cc::Val()), "acc");
          for (int64_t j = 1; j < k; ++j)
            acc = s.let(fold_of(kind, acc, map_of(kind, x(po, j, c), cc::Val())), "acc");
          y(po, c) = finish_of(kind, acc, cc::Val(k), cc::Val());
        });
      });
    });
  });
  return kb.build();
}

// Pass 1 of a long strided axis with few outputs (use_lanes): part[p, g, r] = lane g's fold of
// x[p, g, r], x[p, g + kLanes, r], ... in order, from its first element: the column kernel's
// lanes, each on a thread of its own instead of one after another on the output's thread.
// Blocks of 16 lanes by 32 consecutive r (coalesced), grid {R / 32, kLanes / 16, P}; parameters
// x, part; P, K, R. Pass 2 is the column kernel over part [P, min(K, kLanes), R]: its lanes hold
// one element each, so it folds the lanes in lane order, and the bits are the column kernel's.
constexpr int64_t kLaneTileR = 32, kLaneTileG = 16;

cc::Kernel build_lanes(ReduceKind kind, DType in) {
  cc::KernelBuilder kb(kernel_name(kind, "lanes", in, DType::F32));
  cc::Dim p = kb.dim("P"), k = kb.dim("K", {.min = 1}), r = kb.dim("R");
  cc::Buf x = kb.input("x", in, {p, k, r});
  cc::Buf part = kb.output("part", DType::F32, {p, cc::min(k, cc::Val(kLanes)), r});
  kb.body(
      {cc::ceildiv(r, kLaneTileR), cc::Val(kLanes / kLaneTileG), p}, kThreads, [&](cc::Scope& s) {
        cc::Idx r0 = s.let(s.block_idx(0) * kLaneTileR, "r0");
        cc::Idx g0 = s.let(s.block_idx(1) * kLaneTileG, "g0");
        cc::Idx po = s.block_idx(2);
        cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kLaneTileG, kLaneTileR});
        const cc::Val none;
        s.parallel(kLaneTileG, kLaneTileR, [&](cc::Idx gl, cc::Idx rr) {
          cc::Idx g = g0 + gl, ro = r0 + rr;
          s.if_then(g < k && ro < r, [&] {
            acc(gl, rr) = map_of(kind, x(po, g, ro), none);
            s.serial(cc::ceildiv(k - g, cc::Val(kLanes)) - 1, [&](cc::Idx i) {
              acc(gl, rr) =
                  fold_of(kind, acc(gl, rr), map_of(kind, x(po, g + (i + 1) * kLanes, ro), none));
            });
            part(po, g, ro) = acc(gl, rr);
          });
        });
      });
  return kb.build();
}

// Pass 2: y[p, r] = part[p, 0, r], then part[p, 1, r], ... folded in lane order (L = min(K,
// kLanes) lanes), the column kernel's arithmetic. A block stages 32 outputs' lanes in shared
// memory (independent, coalesced loads), then a thread per output folds them: the column kernel
// itself would chain L dependent global loads per thread. Grid {R / 32, P}; parameters part, y;
// P, L, R.
cc::Kernel build_lanes_fold(ReduceKind kind, DType out) {
  cc::KernelBuilder kb(kernel_name(kind, "lanes_fold", DType::F32, out));
  cc::Dim p = kb.dim("P"), l = kb.dim("L", {.min = 1, .max = kLanes}), r = kb.dim("R");
  cc::Buf part = kb.input("part", DType::F32, {p, l, r});
  cc::Buf y = kb.output("y", out, {p, r});
  kb.body({cc::ceildiv(r, kLaneTileR), p}, kThreads, [&](cc::Scope& s) {
    cc::Idx r0 = s.let(s.block_idx(0) * kLaneTileR, "r0");
    cc::Idx po = s.block_idx(1);
    cc::Buf tile = s.alloc_shared("tile", DType::F32, {kLanes, kLaneTileR});
    s.parallel(kLanes, kLaneTileR, [&](cc::Idx g, cc::Idx rr) {
      s.if_then(g < l && r0 + rr < r, [&] { tile(g, rr) = part(po, g, r0 + rr); });
    });
    s.barrier();
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kLaneTileR});
    s.parallel(kLaneTileR, [&](cc::Idx rr) {
      s.if_then(r0 + rr < r, [&] {
        acc(rr) = tile(0, rr);
        s.serial(l - 1, [&](cc::Idx g) { acc(rr) = fold_of(kind, acc(rr), tile(g + 1, rr)); });
        y(po, r0 + rr) = acc(rr);
      });
    });
  });
  return kb.build();
}

// The column kernel's one thread per output leaves the GPU idle when there are few outputs and
// each folds a long axis (a bias gradient: [T, C] → [C]); the lanes pass then spreads each
// output's lanes over threads. Only folds without a map or finish that depend on the extent
// (pass 2 folds plain lane partials).
constexpr int64_t kLanesMinExtent = 256, kLanesMaxOutputs = 16384, kMaxGridZ = 65535;

bool use_lanes(ReduceKind kind, const AxisView& v) {
  const bool plain = kind == ReduceKind::Sum || kind == ReduceKind::Max || kind == ReduceKind::Min;
  // Fewer than kFewOutputs: the strided row kernel's block per output (reduce_call).
  return plain && v.inner > 1 && v.extent >= kLanesMinExtent && v.outer * v.inner >= kFewOutputs &&
         v.outer * v.inner <= kLanesMaxOutputs && v.outer <= kMaxGridZ;
}

}  // namespace

AxisView axis_view(const std::vector<int64_t>& shape, int first, int last) {
  AxisView v;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i)
    (i < first ? v.outer : i < last ? v.extent : v.inner) *= shape[i];
  return v;
}

std::vector<std::pair<int, int>> runs_of(const std::vector<int>& axes) {
  std::vector<std::pair<int, int>> runs;
  for (int a : axes) {
    if (!runs.empty() && runs.back().second == a)
      runs.back().second = a + 1;
    else
      runs.push_back({a, a + 1});
  }
  return runs;
}

OpExpansion reduce_over_axes(KernelCache& cache, ReduceKind kind, const TensorType& x,
                             DType out_dtype, const std::vector<int>& axes) {
  std::vector<std::pair<int, int>> runs = runs_of(axes);  // the last run first
  std::reverse(runs.begin(), runs.end());
  OpExpansion ex;
  if (runs.empty()) {  // nothing to fold: a copy (extent 1 folds nothing, -0 stays -0)
    int64_t n = 1;
    for (int64_t d : x.shape) n *= d;
    ex.calls.push_back(
        reduce_call(cache, kind, x.dtype, out_dtype, {.outer = n}, input_slot(0), output_slot(0)));
    return ex;
  }
  std::vector<int64_t> shape = x.shape;
  DType dt = x.dtype;
  KernelArg src = input_slot(0);
  for (size_t j = 0; j < runs.size(); ++j) {
    AxisView v = axis_view(shape, runs[j].first, runs[j].second);
    for (int i = runs[j].first; i < runs[j].second; ++i) shape[i] = 1;
    bool last = j + 1 == runs.size();
    const bool lanes = use_lanes(kind, v);
    KernelArg part = lanes ? scratch_slot(static_cast<int>(ex.scratch.size())) : KernelArg{};
    const int64_t n_lanes = std::min(v.extent, kLanes);
    if (lanes) {  // pass 1 into f32 lane partials [P, L, R]
      ex.scratch.push_back({DType::F32, {v.outer, n_lanes, v.inner}});
      ex.calls.push_back({.kernel = cache.get(kernel_name(kind, "lanes", dt, DType::F32),
                                              [&] { return build_lanes(kind, dt); }),
                          .buffers = {src, part},
                          .dims = {v.outer, v.extent, v.inner}});
    }
    KernelArg dst = last ? output_slot(0) : scratch_slot(static_cast<int>(ex.scratch.size()));
    if (!last) ex.scratch.push_back({DType::F32, shape});
    const DType to = last ? out_dtype : DType::F32;
    if (lanes) {  // pass 2: the lanes folded in lane order
      ex.calls.push_back({.kernel = cache.get(kernel_name(kind, "lanes_fold", DType::F32, to),
                                              [&] { return build_lanes_fold(kind, to); }),
                          .buffers = {part, dst},
                          .dims = {v.outer, n_lanes, v.inner}});
    } else {
      ex.calls.push_back(reduce_call(cache, kind, dt, to, v, src, dst));
    }
    src = dst;
    dt = DType::F32;
  }
  return ex;
}

std::vector<int> broadcast_axes(const std::vector<int64_t>& x_shape,
                                const std::vector<int64_t>& shape) {
  const size_t lead = x_shape.size() - shape.size();
  std::vector<int> axes;
  for (size_t a = 0; a < x_shape.size(); ++a)
    if (a < lead || (shape[a - lead] == 1 && x_shape[a] != 1)) axes.push_back(static_cast<int>(a));
  return axes;
}

int normalize_axis(int64_t axis, size_t rank, const std::string& attr, const std::string& operand) {
  const int64_t n = static_cast<int64_t>(rank);
  if (axis < -n || axis >= n)
    throw ShapeError(
        "attribute '" + attr + "' is " + std::to_string(axis) + ", out of range for " + "input '" +
        operand + "' of rank " + std::to_string(n) + "; expected " +
        (n == 0 ? "a tensor of rank >= 1"
                : "an axis in [" + std::to_string(-n) + ", " + std::to_string(n - 1) + "]"));
  return static_cast<int>(axis < 0 ? axis + n : axis);
}

std::string reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum:
      return "sum";
    case ReduceKind::Mean:
      return "mean";
    case ReduceKind::Max:
      return "max";
    case ReduceKind::Min:
      return "min";
    case ReduceKind::LogSumExp:
      return "logsumexp";
    case ReduceKind::L2:
      return "l2";
    case ReduceKind::L1:
      return "l1";
  }
  TR_CHECK(false, "unknown reduce kind");
  return "";
}

bool use_row_kernel(const AxisView& v) { return v.inner == 1 && v.extent >= kRowKernelMinExtent; }

KernelCall reduce_call(KernelCache& cache, ReduceKind kind, DType in, DType out, const AxisView& v,
                       KernelArg x, KernelArg y) {
  const bool inner = v.inner > 1;
  // A strided axis with few outputs and a long extent: a block per output keeps the GPU busy.
  const bool strided_row = inner && v.outer * v.inner < kFewOutputs &&
                           v.extent >= kStridedRowMinExtent && v.outer <= kMaxGridY;
  const bool row = use_row_kernel(v) || strided_row;
  if (!row && inner && v.extent <= kShortColumn && v.inner % 8 == 0 &&
      v.inner <= kMaxVectorColumns && kind != ReduceKind::LogSumExp && dtype_bytes(in, 1) <= 2 &&
      dtype_bytes(out, 1) <= 2) {
    auto kernel = cache.get(col_vectors_name(kind, v.extent, v.inner, in, out),
                            [&] { return build_col_vectors(kind, in, out, v.extent, v.inner); });
    return KernelCall{.kernel = kernel, .buffers = {x, y}, .dims = {v.outer}};
  }
  std::string shape = row ? (inner ? "srow" : "row") : inner ? "col" : "seq";
  auto kernel = cache.get(kernel_name(kind, shape, in, out), [&] {
    return row ? build_row(kind, in, out, inner) : build_col(kind, in, out, inner);
  });
  KernelCall call{.kernel = kernel, .buffers = {x, y}};
  call.dims = inner ? std::vector<int64_t>{v.outer, v.extent, v.inner}
                    : std::vector<int64_t>{v.outer, v.extent};
  return call;
}

void fold_row(cc::Scope& s, const cc::Val& k_extent, const cc::Buf& lanes, const cc::Buf& total,
              const std::function<cc::Val(cc::Idx)>& value,
              const std::function<cc::Val(cc::Val, cc::Val)>& fold) {
  // Lane t folds its elements in its own shared slot (no other thread touches it).
  s.parallel(kLanes, [&](cc::Idx t) {
    s.if_then(t < k_extent, [&] {
      lanes(t) = value(t);
      s.serial(cc::ceildiv(k_extent - t, cc::Val(kLanes)) - 1,
               [&](cc::Idx i) { lanes(t) = fold(lanes(t), value(t + (i + 1) * kLanes)); });
    });
  });
  s.barrier();
  // The lanes in lane order, by one thread, in a register (the chain through total(0) in shared
  // memory paid a store and a load a lane), over a constant count where every lane holds a value
  // (so that the loads of the lanes can be issued ahead of the chain).
  cc::Buf acc = s.alloc_fragment(lanes.name() + "_acc", DType::F32, {1});
  s.parallel(1, [&](cc::Idx i) {
    acc(i) = lanes(0);
    auto chain = [&](const cc::Val& n) {
      s.serial(n, [&](cc::Idx g) { acc(i) = fold(acc(i), lanes(g + 1)); });
    };
    s.if_then_else(
        k_extent >= kLanes, [&] { chain(cc::Val(kLanes - 1)); },
        [&] { chain(cc::min(k_extent, cc::Val(kLanes)) - 1); });
    total(0) = acc(i);
  });
  s.barrier();
}

void fold_thread(cc::Scope& s, const cc::Val& k_extent, const cc::Idx& t, const cc::Buf& acc,
                 const cc::Buf& part, const std::function<cc::Val(cc::Idx)>& value,
                 const std::function<cc::Val(cc::Val, cc::Val)>& fold) {
  // Lane g's elements g, g + kLanes, ... folded in order, starting from the first.
  auto lane = [&](const cc::Idx& g) {
    part(t) = value(g);
    s.serial(cc::ceildiv(k_extent - g, cc::Val(kLanes)) - 1,
             [&](cc::Idx i) { part(t) = fold(part(t), value(g + (i + 1) * kLanes)); });
  };
  lane(cc::Idx(0));
  acc(t) = part(t);
  s.serial(cc::min(k_extent, cc::Val(kLanes)) - 1, [&](cc::Idx g) {
    lane(g + 1);
    acc(t) = fold(acc(t), part(t));
  });
}

}  // namespace tilerun::kernels
