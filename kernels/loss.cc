// over 600 lines: the four loss terms and their backward ops share the rows-then-total plan, the
// pair helpers and the test-case helpers, so they stay one family.
// Losses: the terms of a model's `loss:` (cross_entropy, mse, kl_div, half_sum_squares), each
// reducing its inputs to an f32 scalar, their backward ops, and loss_seed, the constant a weighted
// term's gradient starts from. Kernels: one block per row of the [R, D] view computes that row's
// term (a block reduction in the builder's fixed order), then one block adds the R row terms (each
// thread its rows t, t + T, ... in order, then the tree) and divides. A row's term never depends
// on R or on the other rows, and nothing is atomic.
#include <cmath>
#include <limits>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/loss_kernels.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const TensorType kScalar{DType::F32, {}};

// ---- Inference -----------------------------------------------------------------------------

// (logits [.., V], targets i32 [..]) -> f32 scalar.
std::vector<TensorType> infer_cross_entropy(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "logits");
  if (in[0].shape.empty()) throw ShapeError("input 'logits' is a scalar, expected rank >= 1");
  std::vector<int64_t> rows(in[0].shape.begin(), in[0].shape.end() - 1);
  expect_same(in[1], "targets", TensorType{DType::I32, rows}, "logits without its last axis");
  return {kScalar};
}

// (logits, targets, dloss) -> dlogits.
std::vector<TensorType> infer_cross_entropy_grad(const std::vector<TensorType>& in,
                                                 const Attrs& attrs) {
  infer_cross_entropy(in, attrs);
  expect_same(in[2], "dloss", kScalar, "a loss value");
  return {in[0]};
}

std::vector<TensorType> infer_half_sum_squares(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {kScalar};
}

std::vector<TensorType> infer_half_sum_squares_grad(const std::vector<TensorType>& in,
                                                    const Attrs&) {
  expect_float(in[0], "x");
  expect_same(in[1], "dloss", kScalar, "a loss value");
  return {in[0]};
}

// (a, b) of one type -> f32 scalar: mse(a, b), kl_div(log_p, q).
std::vector<TensorType> infer_pair_loss(const std::vector<TensorType>& in,
                                        const std::vector<std::string>& slots) {
  expect_float(in[0], slots[0]);
  expect_same(in[1], slots[1], in[0], slots[0]);
  return {kScalar};
}
std::vector<TensorType> infer_mse(const std::vector<TensorType>& in, const Attrs&) {
  return infer_pair_loss(in, {"a", "b"});
}
std::vector<TensorType> infer_kl_div(const std::vector<TensorType>& in, const Attrs&) {
  return infer_pair_loss(in, {"log_p", "q"});
}
// (a, b, dloss) -> (da, db).
std::vector<TensorType> infer_mse_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  infer_mse(in, attrs);
  expect_same(in[2], "dloss", kScalar, "a loss value");
  return {in[0], in[0]};
}
std::vector<TensorType> infer_kl_div_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  infer_kl_div(in, attrs);
  expect_same(in[2], "dloss", kScalar, "a loss value");
  return {in[0], in[0]};
}

// The seed reads a loss value only for its type: it must be one.
std::vector<TensorType> infer_loss_seed(const std::vector<TensorType>& in, const Attrs&) {
  expect_same(in[0], "loss", kScalar, "a loss value");
  return {kScalar};
}

// ---- References ----------------------------------------------------------------------------

int64_t target_of(double v) { return static_cast<int64_t>(std::llround(v)); }

// Per row: 0 where the target is ignore_index (the row is not counted), NaN where it is out of
// [0, V), else logsumexp(row) - row[target]; the loss is the sum over counted rows divided by
// their number (by 1 when there are none, so that a batch of ignored rows gives 0, not NaN).
std::vector<RefTensor> ref_cross_entropy(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &x = in[0], &t = in[1];
  const int64_t ignore = attr_int(attrs, "ignore_index");
  auto [rows, cols] = rows_cols(x.shape);
  double total = 0, count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t tgt = target_of(t.data[r]);
    if (tgt == ignore) continue;
    ++count;
    if (tgt < 0 || tgt >= cols) {
      total += kNaN;
      continue;
    }
    const double* xr = &x.data[r * cols];
    double mx = xr[0], sum = 0;
    for (int64_t c = 1; c < cols; ++c) mx = std::max(mx, xr[c]);
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    total += mx + std::log(sum) - xr[tgt];
  }
  return {RefTensor{.shape = {}, .data = {total / std::max(count, 1.0)}}};
}

// dlogits[r, c] = dloss * (softmax(row)[c] - (c == target)) / count, 0 on ignored rows.
std::vector<RefTensor> ref_cross_entropy_grad(const std::vector<RefTensor>& in,
                                              const Attrs& attrs) {
  const RefTensor &x = in[0], &t = in[1], &dy = in[2];
  const int64_t ignore = attr_int(attrs, "ignore_index");
  auto [rows, cols] = rows_cols(x.shape);
  double count = 0;
  for (int64_t r = 0; r < rows; ++r) count += target_of(t.data[r]) != ignore;
  const double scale = dy.data[0] / std::max(count, 1.0);
  RefTensor dx = ref_zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t tgt = target_of(t.data[r]);
    if (tgt == ignore) continue;
    const double* xr = &x.data[r * cols];
    double* dr = &dx.data[r * cols];
    if (tgt < 0 || tgt >= cols) {
      std::fill(dr, dr + cols, kNaN);
      continue;
    }
    double mx = xr[0], sum = 0;
    for (int64_t c = 1; c < cols; ++c) mx = std::max(mx, xr[c]);
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    for (int64_t c = 0; c < cols; ++c)
      dr[c] = (std::exp(xr[c] - mx) / sum - (c == tgt ? 1.0 : 0.0)) * scale;
  }
  return {dx};
}

std::vector<RefTensor> ref_half_sum_squares(const std::vector<RefTensor>& in, const Attrs&) {
  double sum = 0;
  for (double v : in[0].data) sum += v * v;
  return {RefTensor{.shape = {}, .data = {0.5 * sum}}};
}

std::vector<RefTensor> ref_half_sum_squares_grad(const std::vector<RefTensor>& in, const Attrs&) {
  RefTensor dx = in[0];
  for (double& v : dx.data) v *= in[1].data[0];
  return {dx};
}

std::vector<RefTensor> ref_mse(const std::vector<RefTensor>& in, const Attrs&) {
  double sum = 0;
  for (size_t i = 0; i < in[0].data.size(); ++i) {
    double d = in[0].data[i] - in[1].data[i];
    sum += d * d;
  }
  return {RefTensor{.shape = {}, .data = {sum / static_cast<double>(in[0].numel())}}};
}

std::vector<RefTensor> ref_mse_grad(const std::vector<RefTensor>& in, const Attrs&) {
  RefTensor da = in[0], db = in[0];
  const double f = 2 * in[2].data[0] / static_cast<double>(in[0].numel());
  for (size_t i = 0; i < da.data.size(); ++i) {
    da.data[i] = (in[0].data[i] - in[1].data[i]) * f;
    db.data[i] = -da.data[i];
  }
  return {da, db};
}

// kl_div's rows as its attributes read them: log_p (log_softmax of the row with `logits`) and
// q (divided by its sum + kKlTiny with `normalize`), and that divisor.
struct KlRow {
  std::vector<double> lp, q;
  double den = 1;
};
KlRow kl_row(const double* a, const double* b, int64_t cols, const Attrs& attrs) {
  KlRow r{.lp = std::vector<double>(a, a + cols), .q = std::vector<double>(b, b + cols)};
  if (attr_bool(attrs, "logits")) {
    double mx = a[0], sum = 0;
    for (int64_t c = 1; c < cols; ++c) mx = std::max(mx, a[c]);
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(a[c] - mx);
    for (double& v : r.lp) v -= mx + std::log(sum);
  }
  if (attr_bool(attrs, "normalize")) {
    double sum = 0;
    for (double v : r.q) sum += v;
    r.den = sum + kKlTiny;
    for (double& v : r.q) v /= r.den;
  }
  return r;
}

// KL(q || p) summed over the last axis and averaged over the rows ("batchmean"); q log q = 0
// where q = 0.
std::vector<RefTensor> ref_kl_div(const std::vector<RefTensor>& in, const Attrs& attrs) {
  auto [rows, cols] = rows_cols(in[0].shape);
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const KlRow k = kl_row(&in[0].data[r * cols], &in[1].data[r * cols], cols, attrs);
    for (int64_t c = 0; c < cols; ++c)
      if (k.q[c] > 0) sum += k.q[c] * (std::log(k.q[c]) - k.lp[c]);
  }
  return {RefTensor{.shape = {}, .data = {sum / static_cast<double>(rows)}}};
}

// dlog_p = -q dloss / R; dq = (log q + 1 - log_p) dloss / R, taken as 0 where q <= 0 (where
// the derivative of q log q is -inf: a one-hot target must not give an infinite gradient).
// Through `logits` (z): dz = (softmax(z)·Σ q - q) dloss / R; through `normalize` (q' = q / den):
// dq = (g - Σ g·q') / den, g the gradient with respect to q'.
std::vector<RefTensor> ref_kl_div_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  auto [rows, cols] = rows_cols(in[0].shape);
  const double f = in[2].data[0] / static_cast<double>(rows);
  const bool logits = attr_bool(attrs, "logits"), normalize = attr_bool(attrs, "normalize");
  RefTensor dlp = in[0], dq = in[0];
  for (int64_t r = 0; r < rows; ++r) {
    const KlRow k = kl_row(&in[0].data[r * cols], &in[1].data[r * cols], cols, attrs);
    double q_sum = 0, gq = 0;
    std::vector<double> g(cols);
    for (int64_t c = 0; c < cols; ++c) {
      g[c] = k.q[c] > 0 ? (std::log(k.q[c]) + 1 - k.lp[c]) * f : 0.0;
      q_sum += k.q[c];
      gq += g[c] * k.q[c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      dlp.data[r * cols + c] = logits ? (std::exp(k.lp[c]) * q_sum - k.q[c]) * f : -k.q[c] * f;
      dq.data[r * cols + c] = normalize ? (g[c] - gq) / k.den : g[c];
    }
  }
  return {dlp, dq};
}

std::vector<RefTensor> ref_loss_seed(const std::vector<RefTensor>&, const Attrs& attrs) {
  return {RefTensor{.shape = {}, .data = {attr_float(attrs, "weight")}}};
}

// ---- Gradient rules ------------------------------------------------------------------------

// The targets are integers: never differentiated (autodiff asks only for float inputs).
std::vector<GradOp> grad_cross_entropy(const std::vector<TensorType>&, const Attrs& attrs,
                                       const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"cross_entropy_grad",
           {"x0", "x1", "dy0"},
           {"dx0"},
           {{"ignore_index", attr_int(attrs, "ignore_index")}}}};
}

std::vector<GradOp> grad_half_sum_squares(const std::vector<TensorType>&, const Attrs&,
                                          const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"half_sum_squares_grad", {"x0", "dy0"}, {"dx0"}, {}}};
}

// One backward op computes both gradients; one not needed gets a rule-local name.
GradOp pair_grad(const std::string& op, const std::vector<bool>& needs) {
  return {op,
          {"x0", "x1", "dy0"},
          {needs[0] ? "dx0" : "unused_dx0", needs[1] ? "dx1" : "unused_dx1"},
          {}};
}
std::vector<GradOp> grad_mse(const std::vector<TensorType>&, const Attrs&,
                             const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1]) return {};
  return {pair_grad("mse_grad", needs)};
}
std::vector<GradOp> grad_kl_div(const std::vector<TensorType>&, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1]) return {};
  GradOp op = pair_grad("kl_div_grad", needs);
  op.attrs = {{"logits", attr_bool(attrs, "logits")}, {"normalize", attr_bool(attrs, "normalize")}};
  return {op};
}

// ---- Expansions ----------------------------------------------------------------------------

// The total of R row sums (f32, scratch 0) into output 0, divided by `divisor`: straight from the
// row sums, or past kLossChunk rows through the chunk sums in scratch 1.
OpExpansion total_of_rows(int64_t rows, double divisor);

// The row sums over the [R, D] view of the inputs into scratch 0, then the total into output 0:
// straight from the row sums, or past kLossChunk rows through the chunk sums in scratch 1 (one
// block adding 500 k row sums took 202 us on the H200).
OpExpansion total_of_rows(int64_t rows, double divisor) {
  static KernelCache cache;  // the two kernels take no dtype
  OpExpansion out{.scratch = {TensorType{DType::F32, {rows}}}};
  const bool chunked = rows > kLossChunk;
  const int64_t totals = chunked ? (rows + kLossChunk - 1) / kLossChunk : rows;
  if (chunked) {
    out.scratch.push_back(TensorType{DType::F32, {totals}});
    out.calls.push_back(KernelCall{.kernel = cache.get("loss_chunks", build_loss_chunks),
                                   .buffers = {scratch_slot(0), scratch_slot(1)},
                                   .dims = {rows}});
  }
  out.calls.push_back(KernelCall{.kernel = cache.get("loss_total", build_loss_total),
                                 .buffers = {scratch_slot(chunked ? 1 : 0), output_slot(0)},
                                 .dims = {totals},
                                 .scalars = {divisor}});
  return out;
}

OpExpansion rows_then_total(const std::shared_ptr<KernelCache>& cache, const std::string& name,
                            compiler::Kernel (*build_rows)(DType, int64_t, int64_t), DType dt,
                            int64_t rows, int64_t cols, std::vector<KernelArg> inputs,
                            double divisor) {
  const int64_t rb = loss_rows_per_block(rows, cols);
  inputs.push_back(scratch_slot(0));
  KernelCall part{.kernel = cache->get(kernel_key(sum_rows_name(name, rb, cols), dt),
                                       [&] { return build_rows(dt, rb, cols); }),
                  .buffers = std::move(inputs),
                  .dims = rb == 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows}};
  OpExpansion out = total_of_rows(rows, divisor);
  out.calls.insert(out.calls.begin(), part);
  return out;
}

ExpandFn expand_half_sum_squares(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    auto [rows, cols] = rows_cols(in[0].shape);
    return rows_then_total(cache, "half_sum_squares_rows", build_half_sum_squares_rows, in[0].dtype,
                           rows, cols, {input_slot(0)}, 2.0);
  };
}

ExpandFn expand_half_sum_squares_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    DType dt = in[0].dtype;
    KernelCall call{.kernel = cache->get(kernel_key("half_sum_squares_grad", dt),
                                         [&] { return build_half_sum_squares_grad(dt); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {numel(in[0])}};
    return OpExpansion{.calls = {call}};
  };
}

// mse: rows of (a - b)^2 over the [R, D] view, divided by the element count; kl_div: rows of
// q (log q - log_p), divided by R.
ExpandFn expand_pair_loss(std::shared_ptr<KernelCache> cache, std::string rows_name,
                          compiler::Kernel (*build_rows)(DType, int64_t, int64_t),
                          bool per_element) {
  return [=](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    auto [rows, cols] = rows_cols(in[0].shape);
    const double divisor = static_cast<double>(per_element ? numel(in[0]) : rows);
    return rows_then_total(cache, rows_name, build_rows, in[0].dtype, rows, cols,
                           {input_slot(0), input_slot(1)}, divisor);
  };
}

// mse_grad's factor is dloss / N (times 2 in the kernel); kl_div_grad's dloss / R.
ExpandFn expand_pair_grad(std::shared_ptr<KernelCache> cache, std::string name,
                          compiler::Kernel (*build)(DType), bool per_element) {
  return [=](const std::vector<TensorType>& in, const std::vector<TensorType>&, const Attrs&) {
    DType dt = in[0].dtype;
    const int64_t rows = rows_cols(in[0].shape).first;
    KernelCall call{
        .kernel = cache->get(kernel_key(name, dt), [&] { return build(dt); }),
        .buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0), output_slot(1)},
        .dims = {numel(in[0])},
        .scalars = {static_cast<double>(per_element ? numel(in[0]) : rows)}};
    return OpExpansion{.calls = {call}};
  };
}

// kl_div (and, `backward`, kl_div_grad): the pair loss's kernels, or with `logits` or
// `normalize` a block a row that first takes the row's log-sum-exp and q's sum (forward: the row
// terms, then their total; backward: both gradients).
ExpandFn expand_kl_div(std::shared_ptr<KernelCache> cache, bool backward) {
  return [cache, backward](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                           const Attrs& attrs) {
    const bool logits = attr_bool(attrs, "logits"), normalize = attr_bool(attrs, "normalize");
    if (!logits && !normalize)
      return backward
                 ? expand_pair_grad(cache, "kl_div_grad", build_kl_div_grad, false)(in, out, attrs)
                 : expand_pair_loss(cache, "kl_div_rows", build_kl_div_rows, false)(in, out, attrs);
    auto [rows, cols] = rows_cols(in[0].shape);
    const DType dt = in[0].dtype;
    const std::string name = kl_div_rows_name(logits, normalize, backward);
    KernelCall call{.kernel = cache->get(
                        kernel_key(name, dt),
                        [&] { return build_kl_div_row_blocks(dt, logits, normalize, backward); }),
                    .buffers = {input_slot(0), input_slot(1), scratch_slot(0)},
                    .dims = {rows, cols}};
    if (backward) {
      call.buffers = {input_slot(0), input_slot(1), input_slot(2), output_slot(0), output_slot(1)};
      call.scalars = {static_cast<double>(rows)};
      return OpExpansion{.calls = {call}};
    }
    OpExpansion ex = total_of_rows(rows, static_cast<double>(rows));
    ex.calls.insert(ex.calls.begin(), call);
    return ex;
  };
}

ExpandFn expand_cross_entropy(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    DType dt = in[0].dtype;
    auto [rows, cols] = rows_cols(in[0].shape);
    const double ignore = static_cast<double>(attr_int(attrs, "ignore_index"));
    KernelCall part{.kernel = cache->get(kernel_key("cross_entropy_rows", dt),
                                         [&] { return build_cross_entropy_rows(dt); }),
                    .buffers = {input_slot(0), input_slot(1), scratch_slot(0)},
                    .dims = {rows, cols},
                    .scalars = {ignore}};
    KernelCall total{.kernel = cache->get("cross_entropy_total", build_cross_entropy_total),
                     .buffers = {scratch_slot(0), input_slot(1), output_slot(0)},
                     .dims = {rows},
                     .scalars = {ignore}};
    return OpExpansion{.scratch = {TensorType{DType::F32, {rows}}}, .calls = {part, total}};
  };
}

ExpandFn expand_cross_entropy_grad(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    DType dt = in[0].dtype;
    auto [rows, cols] = rows_cols(in[0].shape);
    const double ignore = static_cast<double>(attr_int(attrs, "ignore_index"));
    KernelCall count{.kernel = cache->get("cross_entropy_count", build_cross_entropy_count),
                     .buffers = {input_slot(1), scratch_slot(0)},
                     .dims = {rows},
                     .scalars = {ignore}};
    KernelCall grad{
        .kernel = cache->get(kernel_key("cross_entropy_grad", dt),
                             [&] { return build_cross_entropy_grad(dt); }),
        .buffers = {input_slot(0), input_slot(1), input_slot(2), scratch_slot(0), output_slot(0)},
        .dims = {rows, cols},
        .scalars = {ignore}};
    return OpExpansion{.scratch = {TensorType{DType::F32, {1}}}, .calls = {count, grad}};
  };
}

ExpandFn expand_loss_seed(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>&, const std::vector<TensorType>&, const Attrs& attrs) {
        KernelCall call{.kernel = cache->get("loss_seed", build_loss_seed),
                        .buffers = {input_slot(0), output_slot(0)},
                        .scalars = {attr_float(attrs, "weight")}};
        return OpExpansion{.calls = {call}};
      };
}

const AttrSpec kIgnoreIndex{.name = "ignore_index",
                            .kind = AttrKind::Int,
                            .default_value = AttrValue{int64_t{-100}},
                            .doc = "rows whose target is this are left out of the mean"};

// A case of a cross_entropy op: logits in [-range, range), targets in [int_lo, int_hi).
OpTestCase with_targets(std::vector<std::vector<int64_t>> shapes, int64_t int_lo, int64_t int_hi,
                        Attrs attrs = {}, double range = 2) {
  return {.shapes = std::move(shapes),
          .attrs = std::move(attrs),
          .lo = -range,
          .hi = range,
          .int_lo = int_lo,
          .int_hi = int_hi};
}

const std::vector<AttrSpec> kKlAttrs = {
    {.name = "logits",
     .kind = AttrKind::Bool,
     .default_value = AttrValue{false},
     .doc = "log_p holds logits: log_softmax over the last axis first"},
    {.name = "normalize",
     .kind = AttrKind::Bool,
     .default_value = AttrValue{false},
     .doc = "q holds weights: each row divided by its sum + 1e-30 first"}};
Attrs kl_from(bool logits, bool normalize) {
  return {{"logits", logits}, {"normalize", normalize}};
}

// A scalar dloss input of a backward op: any value, one element.
RefTensor scalar(double v) { return RefTensor{.shape = {}, .data = {v}}; }

}  // namespace

void register_loss(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "cross_entropy",
       .doc = "loss = mean over rows whose target is not ignore_index of logsumexp(row) - "
              "row[target] (0 when every row is ignored, NaN for a target outside [0, V))",
       .inputs = {"logits", "targets"},
       .outputs = {"loss"},
       .attrs = {kIgnoreIndex},
       .input_dtypes = {{1, DType::I32}},
       .output_dtypes = {{0, DType::F32}},
       .infer = infer_cross_entropy,
       .reference = ref_cross_entropy,
       .gradient = grad_cross_entropy,
       .expand = expand_cross_entropy(cache),
       .tests = {
           .kernel = {with_targets({{1, 1}, {1}}, 0, 1),
                      with_targets({{7, 33}, {7}}, -1, 33, {{"ignore_index", int64_t{-1}}}, 30),
                      with_targets({{130, 7}, {130}}, 0, 7),
                      with_targets({{2, 5, 1000}, {2, 5}}, 0, 6, {{"ignore_index", int64_t{3}}},
                                   8)},
           .gradient = {with_targets({{3, 5}, {3}}, -1, 5, {{"ignore_index", int64_t{-1}}}),
                        with_targets({{2, 2, 4}, {2, 2}}, 0, 4)},
           // Row 0: logits [0, ln 3], target 1: lse = ln 4, loss ln 4 - ln 3. Row 1 is
           // ignored, row 2: uniform over 2, loss ln 2. Mean over 2 rows.
           .examples = {
               {.inputs = {{{3, 2}, {0, 1.0986122886681098, 5, 7, 1, 1}}, {{3}, {1, -100, 0}}},
                .outputs = {{{}, {0.49041462650586304}}}},
               // Every row ignored: 0.
               {.inputs = {{{1, 2}, {1, 2}}, {{1}, {7}}},
                .attrs = {{"ignore_index", int64_t{7}}},
                .outputs = {{{}, {0}}}}}}});
  registry.add(
      {.name = "cross_entropy_grad",
       .doc = "dlogits = dloss * (softmax(row) - onehot(target)) / count, 0 on ignored rows "
              "(the backward op of cross_entropy)",
       .inputs = {"logits", "targets", "dloss"},
       .outputs = {"dlogits"},
       .attrs = {kIgnoreIndex},
       .input_dtypes = {{1, DType::I32}, {2, DType::F32}},
       .infer = infer_cross_entropy_grad,
       .reference = ref_cross_entropy_grad,
       .expand = expand_cross_entropy_grad(cache),
       .tests = {
           .kernel = {with_targets({{1, 1}, {1}, {}}, 0, 1),
                      with_targets({{7, 33}, {7}, {}}, -1, 33, {{"ignore_index", int64_t{-1}}}, 30),
                      with_targets({{130, 7}, {130}, {}}, 0, 7)},
           // Row 0: softmax [1/4, 3/4], target 1: [1/4, -1/4] * dloss 2 / 1 counted row;
           // row 1 is ignored.
           .examples = {
               {.inputs = {{{2, 2}, {0, 1.0986122886681098, 5, 7}}, {{2}, {1, 0}}, scalar(2)},
                .attrs = {{"ignore_index", int64_t{0}}},
                .outputs = {{{2, 2}, {0.5, -0.5, 0, 0}}}}}}});
  registry.add(
      {.name = "half_sum_squares",
       .doc = "loss = 0.5 * sum(x^2)",
       .inputs = {"x"},
       .outputs = {"loss"},
       .output_dtypes = {{0, DType::F32}},
       .infer = infer_half_sum_squares,
       .reference = ref_half_sum_squares,
       .gradient = grad_half_sum_squares,
       .expand = expand_half_sum_squares(cache),
       .tests = {
           .kernel =
               {{{{1}}}, {{{7, 33}}}, {{{1025}}}, {{{3, 130, 7}}}, {{{4100, 9}}}, {{{16500, 3}}}},
           .gradient = {{{{3, 4}}}, {{{}}}},
           .examples = {{.inputs = {{{2}, {3, -4}}}, .outputs = {{{}, {12.5}}}}}}});
  registry.add({.name = "half_sum_squares_grad",
                .doc = "dx = dloss * x (the backward op of half_sum_squares)",
                .inputs = {"x", "dloss"},
                .outputs = {"dx"},
                .input_dtypes = {{1, DType::F32}},
                .infer = infer_half_sum_squares_grad,
                .reference = ref_half_sum_squares_grad,
                .expand = expand_half_sum_squares_grad(cache),
                .tests = {.kernel = {{{{1}, {}}}, {{{7, 33}, {}}}, {{{1025}, {}}}},
                          .examples = {{.inputs = {{{2}, {3, -4}}, scalar(0.5)},
                                        .outputs = {{{2}, {1.5, -2}}}}}}});
  registry.add({.name = "mse",
                .doc = "loss = mean((a - b)^2) over every element",
                .inputs = {"a", "b"},
                .outputs = {"loss"},
                .output_dtypes = {{0, DType::F32}},
                .infer = infer_mse,
                .reference = ref_mse,
                .gradient = grad_mse,
                .expand = expand_pair_loss(cache, "mse_rows", build_mse_rows, true),
                .tests = {.kernel = {{{{1}, {1}}},
                                     {{{7, 33}, {7, 33}}},
                                     {{{3, 130, 7}, {3, 130, 7}}},
                                     {{{4100, 9}, {4100, 9}}},
                                     {{{16500, 3}, {16500, 3}}}},
                          .gradient = {{{{3, 4}, {3, 4}}}},
                          // (0 + 4 + 9) / 3.
                          .examples = {{.inputs = {{{3}, {1, 2, 3}}, {{3}, {1, 0, 0}}},
                                        .outputs = {{{}, {13.0 / 3.0}}}}}}});
  registry.add({.name = "mse_grad",
                .doc = "da = 2 dloss (a - b) / N, db = -da (the backward op of mse)",
                .inputs = {"a", "b", "dloss"},
                .outputs = {"da", "db"},
                .input_dtypes = {{2, DType::F32}},
                .infer = infer_mse_grad,
                .reference = ref_mse_grad,
                .expand = expand_pair_grad(cache, "mse_grad", build_mse_grad, true),
                .tests = {.kernel = {{{{7, 33}, {7, 33}, {}}}, {{{1025}, {1025}, {}}}},
                          .examples = {{.inputs = {{{2}, {1, 3}}, {{2}, {0, 1}}, scalar(1)},
                                        .outputs = {{{2}, {1, 2}}, {{2}, {-1, -2}}}}}}});
  // q is a distribution (>= 0): the cases keep it away from 0, where q log q has no derivative.
  registry.add(
      {.name = "kl_div",
       .doc = "loss = sum(q * (log q - log_p)) / rows, the KL divergence of p from q per row, "
              "averaged over the rows (q log q = 0 where q = 0); with logits, log_p = "
              "log_softmax(the row); with normalize, q = the row / (its sum + 1e-30)",
       .inputs = {"log_p", "q"},
       .outputs = {"loss"},
       .attrs = kKlAttrs,
       .output_dtypes = {{0, DType::F32}},
       .infer = infer_kl_div,
       .reference = ref_kl_div,
       .gradient = grad_kl_div,
       .expand = expand_kl_div(cache, false),
       .tests = {
           .kernel = {{.shapes = {{1, 1}, {1, 1}}, .lo = 0.05, .hi = 1},
                      {.shapes = {{7, 33}, {7, 33}}, .lo = 0.05, .hi = 1},
                      {.shapes = {{2, 65, 7}, {2, 65, 7}}, .lo = 0.05, .hi = 1},
                      {.shapes = {{4100, 9}, {4100, 9}}, .lo = 0.05, .hi = 1},
                      {.shapes = {{16500, 3}, {16500, 3}}, .lo = 0.05, .hi = 1},
                      // logits and unnormalised q (the indexer's attention mass)
                      {.shapes = {{7, 130}, {7, 130}}, .attrs = kl_from(true, true), .lo = 0.05},
                      {.shapes = {{5, 33}, {5, 33}}, .attrs = kl_from(true, false), .lo = 0.05},
                      {.shapes = {{3, 8}, {3, 8}}, .attrs = kl_from(false, true), .lo = 0.05}},
           .gradient = {{.shapes = {{3, 4}, {3, 4}}, .lo = 0.05, .hi = 1},
                        {.shapes = {{3, 5}, {3, 5}}, .attrs = kl_from(true, true), .lo = 0.05},
                        {.shapes = {{2, 4}, {2, 4}}, .attrs = kl_from(true, false), .lo = 0.05},
                        {.shapes = {{2, 4}, {2, 4}}, .attrs = kl_from(false, true), .lo = 0.05}},
           // Row 0: log_p = ln 1/2 each, q = [1/4, 3/4]: 1/4 ln(1/2) + 3/4 ln(3/2). Row 1:
           // q = [1, 0], log_p = [0, -1]: 0 (the q = 0 element adds nothing). Over 2 rows.
           .examples = {{.inputs = {{{2, 2}, {-0.6931471805599453, -0.6931471805599453, 0, -1}},
                                    {{2, 2}, {0.25, 0.75, 1, 0}}},
                         .outputs = {{{}, {0.06540601797056848}}}}}}});
  registry.add(
      {.name = "kl_div_grad",
       .doc = "dlog_p = -q dloss / rows, dq = (log q + 1 - log_p) dloss / rows, 0 where q <= 0, "
              "through kl_div's logits and normalize (the backward op of kl_div)",
       .inputs = {"log_p", "q", "dloss"},
       .outputs = {"dlog_p", "dq"},
       .attrs = kKlAttrs,
       .input_dtypes = {{2, DType::F32}},
       .infer = infer_kl_div_grad,
       .reference = ref_kl_div_grad,
       .expand = expand_kl_div(cache, true),
       .tests = {
           .kernel =
               {{.shapes = {{7, 33}, {7, 33}, {}}, .lo = 0.05, .hi = 1},
                {.shapes = {{1025}, {1025}, {}}, .lo = -1, .hi = 1},
                {.shapes = {{7, 130}, {7, 130}, {}}, .attrs = kl_from(true, true), .lo = 0.05},
                {.shapes = {{3, 8}, {3, 8}, {}}, .attrs = kl_from(false, true), .lo = 0.05}},
           // One row, dloss 2: dlog_p = -2 q; dq = 2 (ln q + 1 - ln 1/2).
           .examples = {{.inputs = {{{2}, {-0.6931471805599453, -0.6931471805599453}},
                                    {{2}, {0.25, 0.75}},
                                    scalar(2)},
                         .outputs = {{{2}, {-0.5, -1.5}},
                                     {{2}, {0.6137056388801094, 2.8109302162163288}}}}}}});
  registry.add({.name = "loss_seed",
                .doc = "dloss = weight: the gradient a loss term's value starts from (its input "
                       "gives only the type)",
                .inputs = {"loss"},
                .outputs = {"dloss"},
                .attrs = {{.name = "weight", .kind = AttrKind::Float, .doc = "the term's weight"}},
                .dtypes = {DType::F32},
                .infer = infer_loss_seed,
                .reference = ref_loss_seed,
                .expand = expand_loss_seed(cache),
                .tests = {.kernel = {{{{}}, {{"weight", 0.25}}}},
                          .examples = {{.inputs = {scalar(3)},
                                        .attrs = {{"weight", 0.5}},
                                        .outputs = {{{}, {0.5}}}}}}});
}

}  // namespace tilerun::kernels
