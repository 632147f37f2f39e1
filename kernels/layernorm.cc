// layernorm over the last axis or its groups (norm_util.h): y = (x - mean) * rstd * weight + bias,
// rstd = 1 / sqrt(var + eps), var the biased variance, taken in two passes (the mean first, then
// the mean squared deviation) so that a large mean does not cancel it away. One block per row.
// Its backward op layernorm_grad: dx fused with per-RB-row partial sums of dweight and dbias (as
// rmsnorm_grad), then the fixed-order column sum of each.
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/norm_util.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// x, weight, [bias] -> y.
std::vector<TensorType> infer_layernorm(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "x");
  TensorType w{in[0].dtype, {norm_group(in[0], attrs)}};
  expect_same(in[1], "weight", w, norm_extent_name(attrs));
  if (in.size() > 2) expect_same(in[2], "bias", w, norm_extent_name(attrs));
  return {in[0]};
}

// (x, weight, dy) -> (dx, dweight, dbias).
std::vector<TensorType> infer_layernorm_grad(const std::vector<TensorType>& in,
                                             const Attrs& attrs) {
  infer_layernorm({in[0], in[1]}, attrs);
  expect_same(in[2], "dy", in[0], "x");
  return {in[0], in[1], in[1]};
}

const AttrSpec kEps{.name = "eps",
                    .kind = AttrKind::Float,
                    .default_value = AttrValue{1e-5},
                    .doc = "added to the variance",
                    .positive = true};

struct RowStats {
  double mean, rstd;
};
RowStats stats(const double* x, int64_t n, double eps) {
  double mean = 0, var = 0;
  for (int64_t c = 0; c < n; ++c) mean += x[c];
  mean /= static_cast<double>(n);
  for (int64_t c = 0; c < n; ++c) var += (x[c] - mean) * (x[c] - mean);
  return {mean, 1.0 / std::sqrt(var / static_cast<double>(n) + eps)};
}

std::vector<RefTensor> ref_layernorm(const std::vector<RefTensor>& in, const Attrs& attrs) {
  RefTensor x = as_norm_rows(in[0], attrs);
  auto [rows, cols] = rows_cols(x.shape);
  RefTensor y = ref_zeros(in[0].shape);
  for (int64_t r = 0; r < rows; ++r) {
    RowStats st = stats(&x.data[r * cols], cols, attr_float(attrs, "eps"));
    for (int64_t c = 0; c < cols; ++c)
      y.data[r * cols + c] = (x.data[r * cols + c] - st.mean) * st.rstd * in[1].data[c] +
                             (in.size() > 2 ? in[2].data[c] : 0.0);
  }
  return {y};
}

// With xh = (x - mean) * rstd and g = weight * dy per element, n elements a row:
//   dx = rstd * (g - mean(g) - xh * mean(g * xh)),  dweight = sum_rows dy * xh,  dbias = sum dy.
std::vector<RefTensor> ref_layernorm_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  RefTensor x = as_norm_rows(in[0], attrs);
  const RefTensor &w = in[1], &dy = in[2];
  auto [rows, cols] = rows_cols(x.shape);
  RefTensor dx = ref_zeros(in[0].shape), dw = ref_zeros(w.shape), db = ref_zeros(w.shape);
  std::vector<double> xh(cols);
  for (int64_t r = 0; r < rows; ++r) {
    RowStats st = stats(&x.data[r * cols], cols, attr_float(attrs, "eps"));
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      xh[c] = (x.data[r * cols + c] - st.mean) * st.rstd;
      double g = w.data[c] * dy.data[r * cols + c];
      mg += g;
      mgx += g * xh[c];
    }
    mg /= static_cast<double>(cols);
    mgx /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      double dyv = dy.data[r * cols + c];
      dx.data[r * cols + c] = st.rstd * (w.data[c] * dyv - mg - xh[c] * mgx);
      dw.data[c] += dyv * xh[c];
      db.data[c] += dyv;
    }
  }
  return {dx, dw, db};
}

// One layernorm_grad computes every gradient (they share the row statistics); an output nobody
// needs gets a rule-local name.
std::vector<GradOp> grad_layernorm(const std::vector<TensorType>& in, const Attrs& attrs,
                                   const std::vector<bool>& needs) {
  const bool bias = in.size() > 2, need_bias = bias && needs[2];
  if (!needs[0] && !needs[1] && !need_bias) return {};
  return {{"layernorm_grad",
           {"x0", "x1", "dy0"},
           {needs[0] ? "dx0" : "unused_dx", needs[1] ? "dx1" : "unused_dweight",
            need_bias ? "dx2" : "unused_dbias"},
           {{"eps", attr_float(attrs, "eps")}, {"group", attr_int(attrs, "group")}}}};
}

// ---- Tile kernels: tensors as [R, D], R rows of D (the last axis or a group) -----------------

constexpr int kThreads = 128;

struct Stats {
  cc::Val mean, rstd;
};
Stats row_stats(cc::Scope& s, const cc::Buf& x, const cc::Idx& row, const cc::Dim& d,
                const cc::Val& eps) {
  cc::Val n = cc::to_f32(d);
  cc::Val mean = s.let(s.reduce_sum(d, [&](cc::Idx j) { return x(row, j); }) / n, "mean");
  cc::Val var = s.let(s.reduce_sum(d,
                                   [&](cc::Idx j) {
                                     cc::Val c = x(row, j) - mean;
                                     return c * c;
                                   }) /
                          n,
                      "var");
  return {mean, s.let(1.0f / cc::sqrt(var + eps), "rstd")};
}

// Parameters: x, weight, [bias], y; R, D; eps.
cc::Kernel build_layernorm(DType dtype, bool bias) {
  cc::KernelBuilder kb(std::string(bias ? "layernorm_" : "layernorm_nobias_") +
                       std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d}), w = kb.input("weight", dtype, {d}), b;
  if (bias) b = kb.input("bias", dtype, {d});
  cc::Buf y = kb.output("y", dtype, {r, d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({r}, kThreads, [&](cc::Scope& s) {
    cc::Idx row = s.block_idx(0);
    Stats st = row_stats(s, x, row, d, eps);
    s.parallel(d, [&](cc::Idx j) {
      cc::Val v = (x(row, j) - st.mean) * st.rstd * w(j);
      y(row, j) = bias ? v + b(j) : v;
    });
  });
  return kb.build();
}

std::string grad_dx_name(int64_t rb) {
  return rb == 1 ? "layernorm_grad_dx" : "layernorm_grad_dx_rb" + std::to_string(rb);
}

// dx for `rb` rows per block, fused with those rows' dweight and dbias partial sums (f32, in row
// order), written owner-computes by the thread of column j. Parameters: x, weight, dy, dx,
// partial_w, partial_b; R, D; eps.
cc::Kernel build_layernorm_grad_dx(DType dtype, int64_t rb) {
  cc::KernelBuilder kb(grad_dx_name(rb) + "_" + std::string(dtype_name(dtype)));
  cc::Dim r = kb.dim("R"), d = kb.dim("D");
  cc::Buf x = kb.input("x", dtype, {r, d}), w = kb.input("weight", dtype, {d});
  cc::Buf dy = kb.input("dy", dtype, {r, d});
  cc::Buf dx = kb.output("dx", dtype, {r, d});
  cc::Buf pw = kb.output("partial_w", DType::F32, {cc::ceildiv(r, rb), d});
  cc::Buf pb = kb.output("partial_b", DType::F32, {cc::ceildiv(r, rb), d});
  cc::Val eps = kb.scalar_f32("eps");
  kb.body({cc::ceildiv(r, rb)}, kThreads, [&](cc::Scope& s) {
    cc::Idx blk = s.block_idx(0), r0 = blk * rb;
    auto one_row = [&](const cc::Idx& t) {
      cc::Idx row = r0 + t;
      Stats st = row_stats(s, x, row, d, eps);
      cc::Val n = cc::to_f32(d);
      auto xh = [&](const cc::Idx& j) { return (x(row, j) - st.mean) * st.rstd; };
      cc::Val mg = s.let(s.reduce_sum(d, [&](cc::Idx j) { return w(j) * dy(row, j); }) / n, "mg");
      cc::Val mgx =
          s.let(s.reduce_sum(d, [&](cc::Idx j) { return w(j) * dy(row, j) * xh(j); }) / n, "mgx");
      s.parallel(d, [&](cc::Idx j) {
        cc::Val xv = s.let(xh(j), "xh"), dyv = s.let(dy(row, j), "dy");
        dx(row, j) = st.rstd * (w(j) * dyv - mg - xv * mgx);
        cc::Val tw = s.let(dyv * xv, "tw");
        if (rb == 1) {
          pw(blk, j) = tw;
          pb(blk, j) = dyv;
        } else {
          s.if_then_else(
              t == 0,
              [&] {
                pw(blk, j) = tw;
                pb(blk, j) = dyv;
              },
              [&] {
                pw(blk, j) = pw(blk, j) + tw;
                pb(blk, j) = pb(blk, j) + dyv;
              });
        }
      });
    };
    if (rb == 1)
      one_row(cc::Idx(0));
    else
      s.serial(cc::min(cc::Val(rb), r - r0), one_row);
  });
  return kb.build();
}

ExpandFn expand_layernorm(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dt = out[0].dtype;
    const bool bias = in.size() > 2;
    auto [rows, cols] = norm_rows(in[0], attrs);
    KernelCall call{.kernel = cache->get(kernel_key(bias ? "layernorm" : "layernorm_nobias", dt),
                                         [&] { return build_layernorm(dt, bias); }),
                    .buffers = {input_slot(0), input_slot(1)},
                    .dims = {rows, cols},
                    .scalars = {attr_float(attrs, "eps")}};
    if (bias) call.buffers.push_back(input_slot(2));
    call.buffers.push_back(output_slot(0));
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_layernorm_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dt = out[0].dtype;
    auto [rows, cols] = norm_rows(in[0], attrs);
    int64_t rb = rows_per_block(rows), blocks = (rows + rb - 1) / rb;
    KernelCall dx{.kernel = cache->get(kernel_key(grad_dx_name(rb), dt),
                                       [&] { return build_layernorm_grad_dx(dt, rb); }),
                  .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0),
                              scratch_slot(0), scratch_slot(1)},
                  .dims = {rows, cols},
                  .scalars = {attr_float(attrs, "eps")}};
    auto column_sum = [&](int partial, int output) {
      return KernelCall{.kernel = cache->get(
                            kernel_key("layernorm_grad_colsum", dt),
                            [&] { return build_partial_column_sum(dt, "layernorm_grad_colsum"); }),
                        .buffers = {scratch_slot(partial), output_slot(output)},
                        .dims = {blocks, cols}};
    };
    TensorType partial{DType::F32, {blocks, cols}};
    return OpExpansion{.scratch = {partial, partial},
                       .calls = {dx, column_sum(0, 1), column_sum(1, 2)}};
  };
}

}  // namespace

void register_layernorm(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const Attrs g16 = {{"group", int64_t{16}}};
  registry.add(
      {.name = "layernorm",
       .doc = "y = (x - mean) / sqrt(var + eps) * weight + bias over the last axis, or over each "
              "group of group elements; weight and bias have that many elements; y like x; "
              "grad: layernorm_grad",
       .inputs = {"x", "weight", "bias"},
       .optional_inputs = 1,
       .outputs = {"y"},
       .attrs = {kEps, kNormGroup},
       .infer = infer_layernorm,
       .reference = ref_layernorm,
       .gradient = grad_layernorm,
       .expand = expand_layernorm(cache),
       .tests = {.kernel = {{{{1, 1}, {1}, {1}}},
                            {{{7, 33}, {33}, {33}}},
                            {{{130, 7}, {7}, {7}}, {{"eps", 1e-3}}},
                            {{{2, 3, 130}, {130}, {130}}, {}, 3, 5},  // a mean far from 0
                            {{{5, 64}, {16}, {16}}, g16},
                            {{{7, 33}, {33}}}},
                 .gradient = {{{{5, 7}, {7}, {7}}},
                              {{{2, 3, 8}, {4}, {4}}, {{"group", int64_t{4}}, {"eps", 0.1}}},
                              {{{3, 6}, {6}}, {{"eps", 0.1}}}},
                 // mean 2, variance 1: x - mean = [-1, 1].
                 .examples = {{.inputs = {{{1, 2}, {1, 3}}, {{2}, {2, 1}}, {{2}, {0.5, 0}}},
                               .attrs = {{"eps", 0.0}},
                               .outputs = {{{1, 2}, {-1.5, 1}}}}}}});
  registry.add(
      {.name = "layernorm_grad",
       .doc = "(dx, dweight, dbias) of layernorm from (x, weight, dy) (the backward op of "
              "layernorm)",
       .inputs = {"x", "weight", "dy"},
       .outputs = {"dx", "dweight", "dbias"},
       .attrs = {kEps, kNormGroup},
       .infer = infer_layernorm_grad,
       .reference = ref_layernorm_grad,
       .expand = expand_layernorm_grad(cache),
       .tests = {
           .kernel = {{{{1, 1}, {1}, {1, 1}}, {{"eps", 0.1}}},
                      {{{7, 33}, {33}, {7, 33}}},
                      {{{33, 130}, {130}, {33, 130}}},
                      {{{1001, 33}, {33}, {1001, 33}}},  // 4 rows per partial
                      {{{6, 32}, {8}, {6, 32}}, {{"group", int64_t{8}}}}},
           // x = [0, 1, 2]: rstd = sqrt(1.5), xh = [-rstd, 0, rstd]; dy = [1, 0, 0].
           .examples = {
               {.inputs = {{{1, 3}, {0, 1, 2}}, {{3}, {1, 1, 1}}, {{1, 3}, {1, 0, 0}}},
                .attrs = {{"eps", 0.0}},
                .outputs = {
                    {{1, 3}, {0.20412414523193148, -0.40824829046386296, 0.20412414523193148}},
                    {{3}, {-1.224744871391589, 0, 0}},
                    {{3}, {1, 0, 0}}}}}}});
}

}  // namespace tilerun::kernels
