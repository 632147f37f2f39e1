// Optimiser steps, run after backward to update each weight in place (graph/optimizer.cc binds
// an op's outputs to its inputs' tensors): sgd_update; adamw_bias, which advances AdamW's bias
// corrections c = 1 - beta^t in the arena (so nothing on the host changes from step to step and a
// CUDA graph replays as it is); adamw_update. One flat kernel each, one element per thread, each
// element read and then written by its one owner thread: in-place binding is safe.
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

constexpr int kThreads = 256;

// ---- Inference -----------------------------------------------------------------------------

// (w, dw) -> w.
std::vector<TensorType> infer_sgd(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "w");
  expect_same(in[1], "dw", in[0], "w");
  return {in[0]};
}

const TensorType kBias{DType::F32, {2}};

std::vector<TensorType> infer_adamw_bias(const std::vector<TensorType>& in, const Attrs&) {
  expect_same(in[0], "c", kBias, "the two bias corrections");
  return {kBias};
}

// (w, dw, m, v, c) -> (w, m, v); m and v are f32 whatever w is.
std::vector<TensorType> infer_adamw(const std::vector<TensorType>& in, const Attrs& attrs) {
  infer_sgd(in, attrs);
  const TensorType state{DType::F32, in[0].shape};
  expect_same(in[2], "m", state, "w in f32");
  expect_same(in[3], "v", state, "w in f32");
  expect_same(in[4], "c", kBias, "the two bias corrections");
  return {in[0], state, state};
}

// ---- References ----------------------------------------------------------------------------

std::vector<RefTensor> ref_sgd(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double lr = attr_float(attrs, "lr");
  RefTensor w = in[0];
  for (size_t i = 0; i < w.data.size(); ++i) w.data[i] -= lr * in[1].data[i];
  return {w};
}

// c = (1 - beta1^t, 1 - beta2^t) after t steps, from zeros: c <- beta c + (1 - beta).
std::vector<RefTensor> ref_adamw_bias(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double b1 = attr_float(attrs, "beta1"), b2 = attr_float(attrs, "beta2");
  RefTensor c = in[0];
  c.data[0] = c.data[0] * b1 + (1 - b1);
  c.data[1] = c.data[1] * b2 + (1 - b2);
  return {c};
}

std::vector<RefTensor> ref_adamw(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const double lr = attr_float(attrs, "lr"), b1 = attr_float(attrs, "beta1"),
               b2 = attr_float(attrs, "beta2"), eps = attr_float(attrs, "eps"),
               wd = attr_float(attrs, "weight_decay");
  RefTensor w = in[0], m = in[2], v = in[3];
  const double c1 = in[4].data[0], c2 = in[4].data[1];
  for (size_t i = 0; i < w.data.size(); ++i) {
    const double g = in[1].data[i];
    m.data[i] = b1 * m.data[i] + (1 - b1) * g;
    v.data[i] = b2 * v.data[i] + (1 - b2) * g * g;
    const double step = m.data[i] / c1 / (std::sqrt(v.data[i] / c2) + eps);
    w.data[i] -= lr * (step + wd * w.data[i]);
  }
  return {w, m, v};
}

// ---- Kernels -------------------------------------------------------------------------------

// Parameters: w, dw, w_new; N; lr.
cc::Kernel build_sgd(DType dtype) {
  cc::KernelBuilder kb("sgd_update_" + std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N");
  cc::Buf w = kb.input("w", dtype, {n}), dw = kb.input("dw", dtype, {n});
  cc::Buf out = kb.output("w_new", dtype, {n});
  cc::Val lr = kb.scalar_f32("lr");
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx e = s.block_idx(0) * kThreads + i;
      s.if_then(e < n, [&] { out(e) = w(e) - lr * dw(e); });
    });
  });
  return kb.build();
}

// Parameters: c, c_new; beta1, 1 - beta1, beta2, 1 - beta2 (the differences taken in double).
cc::Kernel build_adamw_bias() {
  cc::KernelBuilder kb("adamw_bias");
  cc::Buf c = kb.input("c", DType::F32, {2});
  cc::Buf out = kb.output("c_new", DType::F32, {2});
  cc::Val b1 = kb.scalar_f32("beta1"), r1 = kb.scalar_f32("one_minus_beta1");
  cc::Val b2 = kb.scalar_f32("beta2"), r2 = kb.scalar_f32("one_minus_beta2");
  kb.body({1}, 32, [&](cc::Scope& s) {
    s.parallel(2, [&](cc::Idx i) { out(i) = cc::select(i == 0, c(i) * b1 + r1, c(i) * b2 + r2); });
  });
  return kb.build();
}

// Parameters: w, dw, m, v, c, w_new, m_new, v_new; N; lr, beta1, 1 - beta1, beta2, 1 - beta2,
// eps, weight_decay.
cc::Kernel build_adamw(DType dtype) {
  cc::KernelBuilder kb("adamw_update_" + std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N");
  cc::Buf w = kb.input("w", dtype, {n}), dw = kb.input("dw", dtype, {n});
  cc::Buf m = kb.input("m", DType::F32, {n}), v = kb.input("v", DType::F32, {n});
  cc::Buf c = kb.input("c", DType::F32, {2});
  cc::Buf w_out = kb.output("w_new", dtype, {n});
  cc::Buf m_out = kb.output("m_new", DType::F32, {n}), v_out = kb.output("v_new", DType::F32, {n});
  cc::Val lr = kb.scalar_f32("lr"), b1 = kb.scalar_f32("beta1"),
          r1 = kb.scalar_f32("one_minus_beta1"), b2 = kb.scalar_f32("beta2"),
          r2 = kb.scalar_f32("one_minus_beta2"), eps = kb.scalar_f32("eps"),
          wd = kb.scalar_f32("weight_decay");
  kb.body({cc::ceildiv(n, kThreads)}, kThreads, [&](cc::Scope& s) {
    s.parallel(kThreads, [&](cc::Idx i) {
      cc::Idx e = s.block_idx(0) * kThreads + i;
      s.if_then(e < n, [&] {
        cc::Val g = s.let(dw(e), "g"), wv = s.let(w(e), "w");
        cc::Val m1 = s.let(b1 * m(e) + r1 * g, "m");
        cc::Val v1 = s.let(b2 * v(e) + r2 * (g * g), "v");
        cc::Val step = s.let(m1 / c(0) / (cc::sqrt(v1 / c(1)) + eps), "step");
        m_out(e) = m1;
        v_out(e) = v1;
        w_out(e) = wv - lr * (step + wd * wv);
      });
    });
  });
  return kb.build();
}

std::vector<double> adamw_scalars(const Attrs& attrs, bool with_lr) {
  const double b1 = attr_float(attrs, "beta1"), b2 = attr_float(attrs, "beta2");
  std::vector<double> s;
  if (with_lr) s.push_back(attr_float(attrs, "lr"));
  s.insert(s.end(), {b1, 1 - b1, b2, 1 - b2});
  if (with_lr) s.insert(s.end(), {attr_float(attrs, "eps"), attr_float(attrs, "weight_decay")});
  return s;
}

ExpandFn expand_sgd(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    DType dt = in[0].dtype;
    KernelCall call{
        .kernel = cache->get(kernel_key("sgd_update", dt), [&] { return build_sgd(dt); }),
        .buffers = {input_slot(0), input_slot(1), output_slot(0)},
        .dims = {numel(in[0])},
        .scalars = {attr_float(attrs, "lr")}};
    return OpExpansion{.calls = {call}};
  };
}

ExpandFn expand_adamw_bias(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>&, const std::vector<TensorType>&, const Attrs& attrs) {
        KernelCall call{.kernel = cache->get("adamw_bias", build_adamw_bias),
                        .buffers = {input_slot(0), output_slot(0)},
                        .scalars = adamw_scalars(attrs, false)};
        return OpExpansion{.calls = {call}};
      };
}

ExpandFn expand_adamw(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>&,
                 const Attrs& attrs) {
    DType dt = in[0].dtype;
    KernelCall call{
        .kernel = cache->get(kernel_key("adamw_update", dt), [&] { return build_adamw(dt); }),
        .buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3), input_slot(4),
                    output_slot(0), output_slot(1), output_slot(2)},
        .dims = {numel(in[0])},
        .scalars = adamw_scalars(attrs, true)};
    return OpExpansion{.calls = {call}};
  };
}

AttrSpec positive(const char* name, const char* doc) {
  return {.name = name, .kind = AttrKind::Float, .doc = doc, .positive = true};
}
AttrSpec with_default(const char* name, double value, const char* doc) {
  return {.name = name, .kind = AttrKind::Float, .default_value = AttrValue{value}, .doc = doc};
}

}  // namespace

void register_optimizer(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const AttrSpec beta1 = with_default("beta1", 0.9, "decay of the first moment");
  const AttrSpec beta2 = with_default("beta2", 0.999, "decay of the second moment");
  registry.add(
      {.name = "sgd_update",
       .doc = "w_new = w - lr * dw (bound in place of w by an optimizer: step)",
       .inputs = {"w", "dw"},
       .outputs = {"w_new"},
       .attrs = {positive("lr", "the learning rate")},
       .infer = infer_sgd,
       .reference = ref_sgd,
       .expand = expand_sgd(cache),
       .tests = {.kernel = {{{{7, 33}, {7, 33}}, {{"lr", 0.1}}}, {{{1025}, {1025}}, {{"lr", 3.0}}}},
                 .examples = {{.inputs = {{{2}, {1, -2}}, {{2}, {0.5, 4}}},
                               .attrs = {{"lr", 0.5}},
                               .outputs = {{{2}, {0.75, -4}}}}}}});
  registry.add(
      {.name = "adamw_bias",
       .doc = "c_new = (beta1 c0 + 1 - beta1, beta2 c1 + 1 - beta2): from zeros, c = (1 - "
              "beta1^t, 1 - beta2^t) after t steps",
       .inputs = {"c"},
       .outputs = {"c_new"},
       .attrs = {beta1, beta2},
       .dtypes = {DType::F32},
       .infer = infer_adamw_bias,
       .reference = ref_adamw_bias,
       .expand = expand_adamw_bias(cache),
       .tests = {.kernel = {{{{2}}, {{"beta1", 0.8}}, 0, 1}},
                 // Step 2 from step 1's (0.1, 0.001): 1 - 0.9^2 = 0.19, 1 - 0.999^2 = 0.001999.
                 .examples = {{.inputs = {{{2}, {0.1, 0.001}}},
                               .outputs = {{{2}, {0.19, 0.0019990000000000003}}}}}}});
  registry.add(
      {.name = "adamw_update",
       .doc = "m = b1 m + (1 - b1) dw, v = b2 v + (1 - b2) dw^2, w -= lr (m / c0 / (sqrt(v / "
              "c1) + eps) + weight_decay w), c from adamw_bias (bound in place by an optimizer: "
              "step)",
       .inputs = {"w", "dw", "m", "v", "c"},
       .outputs = {"w_new", "m_new", "v_new"},
       .attrs = {positive("lr", "the learning rate"),
                 beta1,
                 beta2,
                 {.name = "eps",
                  .kind = AttrKind::Float,
                  .default_value = AttrValue{1e-8},
                  .doc = "added to sqrt(v)",
                  .positive = true},
                 with_default("weight_decay", 0.01, "decoupled weight decay")},
       .input_dtypes = {{2, DType::F32}, {3, DType::F32}, {4, DType::F32}},
       .output_dtypes = {{1, DType::F32}, {2, DType::F32}},
       .infer = infer_adamw,
       .reference = ref_adamw,
       .expand = expand_adamw(cache),
       // Moments and corrections as after some steps: positive, away from 0.
       .tests = {
           .kernel = {{{{7, 33}, {7, 33}, {7, 33}, {7, 33}, {2}}, {{"lr", 0.01}}, 0.05, 1},
                      {{{1025}, {1025}, {1025}, {1025}, {2}},
                       {{"lr", 0.5}, {"weight_decay", 0.0}},
                       0.05,
                       1}},
           // Step 1 from zeros: m = 0.1 g, v = 0.001 g^2, c = (0.1, 0.001): the step is
           // g / (|g| + eps) = sign(g) (eps 0); w = 1 - 0.1 (1 + 0.5) = 0.85 and
           // w = -2 - 0.1 (-1 - 1) = -1.8.
           .examples = {{.inputs = {{{2}, {1, -2}},
                                    {{2}, {3, -0.5}},
                                    {{2}, {0, 0}},
                                    {{2}, {0, 0}},
                                    {{2}, {0.1, 0.001}}},
                         .attrs = {{"lr", 0.1}, {"eps", 1e-300}, {"weight_decay", 0.5}},
                         .outputs = {{{2}, {0.85, -1.8}},
                                     {{2}, {0.30000000000000004, -0.05}},
                                     {{2}, {0.009000000000000008, 0.00025000000000000022}}}}}}});
}

}  // namespace tilerun::kernels
