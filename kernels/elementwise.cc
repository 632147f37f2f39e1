// Elementwise ops: add, mul, scale, silu, and silu's backward op silu_grad. Each is one tile
// kernel over the tensors seen as flat arrays.
#include <cmath>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/families.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<TensorType> infer_binary(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "a");
  expect_same(in[1], "b", in[0], "a");
  return {in[0]};
}

std::vector<TensorType> infer_unary(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {in[0]};
}

std::vector<TensorType> infer_silu_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// out[i] = f(in[0][i], in[1][i], ...) over tensors of one shape.
template <typename F>
std::vector<RefTensor> ref_map(const std::vector<RefTensor>& in, F f) {
  RefTensor out = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (in.size() == 1)
      out.data[i] = f(in[0].data[i], 0.0);
    else
      out.data[i] = f(in[0].data[i], in[1].data[i]);
  }
  return {out};
}

// d(x * s(x))/dx = s + x * s * (1 - s), s = sigmoid(x).
double silu_derivative(double x) {
  double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

std::vector<RefTensor> ref_add(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_map(in, std::plus<double>());
}
std::vector<RefTensor> ref_mul(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_map(in, std::multiplies<double>());
}
std::vector<RefTensor> ref_scale(const std::vector<RefTensor>& in, const Attrs& attrs) {
  double alpha = attr_float(attrs, "alpha");
  return ref_map(in, [alpha](double x, double) { return alpha * x; });
}
std::vector<RefTensor> ref_silu(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_map(in, [](double x, double) { return x * sigmoid(x); });
}
std::vector<RefTensor> ref_silu_grad(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_map(in, [](double x, double dy) { return dy * silu_derivative(x); });
}

// ---- Gradient rules ------------------------------------------------------------------------

// Both input gradients are the output gradient itself: no kernel.
std::vector<GradOp> grad_add(const std::vector<TensorType>&, const Attrs&,
                             const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  for (int i = 0; i < 2; ++i)
    if (needs[i]) ops.push_back({"alias", {"dy0"}, {dx_name(i)}, {}});
  return ops;
}

// d(a * b) = dy * b, dy * a.
std::vector<GradOp> grad_mul(const std::vector<TensorType>&, const Attrs&,
                             const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  for (int i = 0; i < 2; ++i)
    if (needs[i]) ops.push_back({"mul", {"dy0", x_name(1 - i)}, {dx_name(i)}, {}});
  return ops;
}

std::vector<GradOp> grad_scale(const std::vector<TensorType>&, const Attrs& attrs,
                               const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"scale", {"dy0"}, {"dx0"}, {{"alpha", attr_float(attrs, "alpha")}}}};
}

std::vector<GradOp> grad_silu(const std::vector<TensorType>&, const Attrs&,
                              const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"silu_grad", {"x0", "dy0"}, {"dx0"}, {}}};
}

// ---- Tile kernels --------------------------------------------------------------------------

// 256 threads per block. A tensor of fewer than kManyElements elements takes one element per
// thread, so that even a small one spreads over many blocks (and SMs); a larger one takes 4 per
// thread (1024 per block), enough work to amortise a block's start-up. Either way each element
// is computed alone, so the choice never changes a result.
constexpr int kThreads = 256;
constexpr int64_t kManyElements = int64_t{1} << 16;
int64_t per_thread(int64_t n) { return n < kManyElements ? 1 : 4; }

// The element function: inputs' values at one element (as f32) and the scalars.
using MapFn = std::function<cc::Val(cc::Scope&, const std::vector<cc::Val>& in,
                                    const std::vector<cc::Val>& scalars)>;

struct MapOp {
  std::string name;
  int arity = 1;
  std::vector<std::string> scalar_attrs;  // f32 scalar parameters, from these attributes
  MapFn fn;
};

// out[e] = fn(in0[e], in1[e], ..., scalars) for e in [0, N), `ept` elements per thread.
// Parameters: in0.., out; N; scalars.
std::string map_name(const MapOp& op, int64_t ept) {
  return ept == 1 ? op.name : op.name + "_x" + std::to_string(ept);
}

cc::Kernel build_map(const MapOp& op, DType dtype, int64_t ept) {
  cc::KernelBuilder kb(map_name(op, ept) + "_" + std::string(dtype_name(dtype)));
  cc::Dim n = kb.dim("N");
  std::vector<cc::Buf> in;
  for (int i = 0; i < op.arity; ++i) in.push_back(kb.input("in" + std::to_string(i), dtype, {n}));
  cc::Buf out = kb.output("out", dtype, {n});
  std::vector<cc::Val> scalars;
  for (const std::string& a : op.scalar_attrs) scalars.push_back(kb.scalar_f32(a));
  const int64_t per_block = kThreads * ept;
  kb.body({cc::ceildiv(n, per_block)}, kThreads, [&](cc::Scope& s) {
    cc::Idx base = s.block_idx(0) * per_block;
    s.parallel(per_block, [&](cc::Idx i) {
      cc::Idx e = base + i;
      s.if_then(e < n, [&] {
        std::vector<cc::Val> v;
        for (const cc::Buf& b : in) v.push_back(s.let(b(e), "v"));
        out(e) = op.fn(s, v, scalars);
      });
    });
  });
  return kb.build();
}

ExpandFn expand_map(std::shared_ptr<KernelCache> cache, MapOp op) {
  return [cache, op](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                     const Attrs& attrs) {
    DType dtype = out[0].dtype;
    int64_t n = numel(out[0]), ept = per_thread(n);
    KernelCall call{.kernel = cache->get(kernel_key(map_name(op, ept), dtype),
                                         [&] { return build_map(op, dtype, ept); }),
                    .dims = {n}};
    for (int i = 0; i < op.arity; ++i) call.buffers.push_back(input_slot(i));
    call.buffers.push_back(output_slot(0));
    for (const std::string& a : op.scalar_attrs) call.scalars.push_back(attr_float(attrs, a));
    return OpExpansion{.calls = {call}};
  };
}

const MapOp kAdd{"add", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] + v[1]; }};
const MapOp kMul{"mul", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] * v[1]; }};
const MapOp kScale{
    "scale", 1, {"alpha"}, [](cc::Scope&, const auto& v, const auto& sc) { return sc[0] * v[0]; }};
const MapOp kSilu{
    "silu", 1, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] * cc::sigmoid(v[0]); }};
// dy * s * (1 + x * (1 - s)), s = sigmoid(x) evaluated once.
const MapOp kSiluGrad{"silu_grad", 2, {}, [](cc::Scope& s, const auto& v, const auto&) {
                        cc::Val sg = s.let(cc::sigmoid(v[0]), "sig");
                        return v[1] * (sg * (1.0f + v[0] * (1.0f - sg)));
                      }};

}  // namespace

void register_elementwise(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "add",
                .doc = "out = a + b (same shape)",
                .inputs = {"a", "b"},
                .outputs = {"out"},
                .infer = infer_binary,
                .reference = ref_add,
                .gradient = grad_add,
                .expand = expand_map(cache, kAdd)});
  registry.add({.name = "mul",
                .doc = "out = a * b (same shape)",
                .inputs = {"a", "b"},
                .outputs = {"out"},
                .infer = infer_binary,
                .reference = ref_mul,
                .gradient = grad_mul,
                .expand = expand_map(cache, kMul)});
  registry.add({.name = "scale",
                .doc = "out = alpha * x",
                .inputs = {"x"},
                .outputs = {"out"},
                .attrs = {{.name = "alpha", .kind = AttrKind::Float, .doc = "the factor"}},
                .infer = infer_unary,
                .reference = ref_scale,
                .gradient = grad_scale,
                .expand = expand_map(cache, kScale)});
  registry.add({.name = "silu",
                .doc = "out = x * sigmoid(x)",
                .inputs = {"x"},
                .outputs = {"out"},
                .infer = infer_unary,
                .reference = ref_silu,
                .gradient = grad_silu,
                .expand = expand_map(cache, kSilu)});
  registry.add({.name = "silu_grad",
                .doc = "dx = dy * d silu(x)/dx (the backward op of silu)",
                .inputs = {"x", "dy"},
                .outputs = {"dx"},
                .infer = infer_silu_grad,
                .reference = ref_silu_grad,
                .expand = expand_map(cache, kSiluGrad)});
}

}  // namespace tilerun::kernels
