#include "kernels/norm_util.h"

#include "kernels/ref_util.h"

namespace tilerun::kernels {

namespace cc = tilerun::compiler;

const AttrSpec kNormGroup{.name = "group",
                          .kind = AttrKind::Int,
                          .default_value = AttrValue{int64_t{0}},
                          .doc =
                              "normalise each run of this many elements of the last axis alone "
                              "(per-head norms); 0: the whole axis"};

int64_t norm_group(const TensorType& x, const Attrs& attrs) {
  if (x.shape.empty()) throw ShapeError("input 'x' is a scalar, expected rank >= 1");
  const int64_t d = x.shape.back();
  const int64_t g = attrs.count("group") ? attr_int(attrs, "group") : 0;
  if (g < 0 || (g > 0 && d % g != 0))
    throw ShapeError("attribute 'group' is " + std::to_string(g) +
                     ", which does not divide the last axis (" + std::to_string(d) +
                     ") of input 'x' " + to_string(x) + "; expected a divisor of " +
                     std::to_string(d) + " (or 0 for the whole axis)");
  return g == 0 ? d : g;
}

std::string norm_extent_name(const Attrs& attrs) {
  bool grouped = attrs.count("group") && attr_int(attrs, "group") > 0;
  return grouped ? "the group size" : "the last axis of x";
}

std::pair<int64_t, int64_t> norm_rows(const TensorType& x, const Attrs& attrs) {
  int64_t g = norm_group(x, attrs), n = 1;
  for (int64_t d : x.shape) n *= d;
  return {n / g, g};
}

RefTensor as_norm_rows(const RefTensor& x, const Attrs& attrs) {
  auto [rows, cols] = norm_rows({DType::F32, x.shape}, attrs);
  return RefTensor{.shape = {rows, cols}, .data = x.data};
}

namespace {

constexpr int64_t kTargetBlocks = 256, kMaxRowsPerBlock = 16;
// The column sum's block covers kColsPerBlock columns with kRowGroups groups of threads.
constexpr int64_t kColsPerBlock = 16, kRowGroups = 16;

}  // namespace

int64_t rows_per_block(int64_t rows) {
  int64_t rb = 1;
  while (rb < kMaxRowsPerBlock && (rows + rb - 1) / rb > kTargetBlocks) rb *= 2;
  return rb;
}

cc::Buf row_sums(
    cc::Scope& s, int64_t rows, int64_t d, int64_t n_values, int threads,
    const std::function<std::vector<cc::Val>(const cc::Idx&, const cc::Idx&)>& values) {
  std::vector<cc::Buf> part;
  for (int64_t v = 0; v < n_values; ++v)
    part.push_back(s.alloc_fragment("part" + std::to_string(v), DType::F32, {threads}));
  cc::Buf tree = s.alloc_shared("tree", DType::F32, {n_values, rows, threads});
  s.parallel(threads, [&](cc::Idx th) {
    s.serial(cc::Val(rows), [&](cc::Idx r) {
      for (const cc::Buf& p : part) p(th) = -0.0f;
      s.serial(cc::ceildiv(cc::Val(d), cc::Val(threads)), [&](cc::Idx it) {
        cc::Idx j = it * threads + th;
        s.if_then(j < d, [&] {
          std::vector<cc::Val> v = values(r, j);
          for (int64_t i = 0; i < n_values; ++i) part[i](th) = part[i](th) + v[i];
        });
      });
      for (int64_t i = 0; i < n_values; ++i) tree(cc::Val(i), r, th) = part[i](th);
    });
  });
  s.barrier();
  for (int64_t half = threads / 2; half >= 1; half /= 2) {
    s.parallel(n_values, rows, half, [&](cc::Idx v, cc::Idx r, cc::Idx th) {
      tree(v, r, th) = tree(v, r, th) + tree(v, r, th + half);
    });
    s.barrier();
  }
  return tree;
}

cc::Buf norm_inverses(cc::Scope& s, const cc::Buf& xs, int64_t rows, int64_t d, int threads,
                      const cc::Val& eps) {
  cc::Buf tree = row_sums(s, rows, d, 1, threads, [&](const cc::Idx& r, const cc::Idx& j) {
    cc::Val v = s.let(xs(r, j), "x");
    return std::vector<cc::Val>{v * v};
  });
  cc::Buf inv = s.alloc_shared("inv", DType::F32, {rows});
  s.parallel(cc::Val(rows), [&](cc::Idx r) {
    inv(r) = 1.0f / cc::sqrt(tree(0, r, 0) / cc::to_f32(cc::Val(d)) + eps);
  });
  s.barrier();
  return inv;
}

cc::Kernel build_partial_column_sum(DType dtype, const std::string& name) {
  cc::KernelBuilder kb(name + "_" + std::string(dtype_name(dtype)));
  cc::Dim p = kb.dim("P"), d = kb.dim("D");
  cc::Buf partial = kb.input("partial", DType::F32, {p, d});
  cc::Buf dgamma = kb.output("dgamma", dtype, {d});
  constexpr int kThreadsDg = static_cast<int>(kColsPerBlock * kRowGroups);
  kb.body({cc::ceildiv(d, kColsPerBlock)}, kThreadsDg, [&](cc::Scope& s) {
    cc::Idx c0 = s.block_idx(0) * kColsPerBlock;
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kRowGroups, kColsPerBlock});
    cc::Buf sums = s.alloc_shared("sums", DType::F32, {kRowGroups, kColsPerBlock});
    s.parallel(kRowGroups, kColsPerBlock, [&](cc::Idx g, cc::Idx j) { acc(g, j) = 0.0f; });
    s.serial(cc::ceildiv(p, cc::Val(kRowGroups)), [&](cc::Idx i) {
      s.parallel(kRowGroups, kColsPerBlock, [&](cc::Idx g, cc::Idx j) {
        cc::Idx row = i * kRowGroups + g;
        s.if_then(row < p && c0 + j < d, [&] { acc(g, j) = acc(g, j) + partial(row, c0 + j); });
      });
    });
    s.parallel(kRowGroups, kColsPerBlock, [&](cc::Idx g, cc::Idx j) { sums(g, j) = acc(g, j); });
    s.barrier();
    s.parallel(kColsPerBlock, [&](cc::Idx j) {
      s.if_then(c0 + j < d, [&] {
        cc::Val total = sums(0, j);
        for (int64_t g = 1; g < kRowGroups; ++g) total = s.let(total + sums(g, j), "sum");
        dgamma(c0 + j) = total;
      });
    });
  });
  return kb.build();
}

}  // namespace tilerun::kernels
