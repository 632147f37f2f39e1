// linear_fp8: y = x · w^T trained in FP8, forward and backward on the tensor core's FP8 path (the
// DeepSeek-V3 recipe with fine-grained scales):
//   forward   y  = matmul_fp8(quantize(x, 1×128), quantize(w, 128×128))
//   backward  dx = linear_fp8(dy, w^T)     dy per 1×128 of its rows (along N), w^T per 128×128
//             dw = linear_fp8(dy^T, x^T)   dy^T per 1×128 along the tokens, x^T per 128×128
// Each product is matmul_fp8's: 128 of K summed by the FP8 MMA from +0, promoted to f32 with
// the two blocks' scales (fma), rounded once. The gradient rule is the derivative of the
// unrounded product x·w^T (straight-through over the roundings, as fake_quant's): each of the
// backward's products rounds its own operands. FP8 wgmma reads both operands K-major from shared
// memory, so the operands the backward needs transposed (w for dx; dy and x for dw, whose K runs
// over the tokens) are transposed before they are quantized (the transpose op: a tiled copy of the
// 16-bit or f32 tensor), and their codes come out K-major; quantizing w^T in 128×128 blocks gives
// the transpose of w's own codes and scales (the same blocks, the same amax).
//
// x [M, K] and w [N, K] of one dtype (f32 or bf16), y [M, N] in it; M, N and K multiples of 128
// (every operand of the three products is quantized in blocks of 128 along its K).
#include <string>
#include <vector>

#include "kernels/expand_util.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/sub_expansion.h"

namespace tilerun::kernels {
namespace {

constexpr int64_t kBlock = 128;

std::vector<TensorType> infer_linear_fp8(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_rank(in[0], 2, "x");
  expect_rank(in[1], 2, "w");
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16)
    throw ShapeError("input 'x' is " + to_string(in[0]) + ", expected f32 or bf16");
  if (in[1].dtype != in[0].dtype)
    throw ShapeError("input 'w' is " + to_string(in[1]) + ", expected dtype " +
                     std::string(dtype_name(in[0].dtype)) + " like 'x'");
  const int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[1].shape[0];
  if (in[1].shape[1] != k)
    throw ShapeError("input 'w' is " + to_string(in[1]) + ", expected [N, " + std::to_string(k) +
                     "] (w is K-major: y = x · w^T)");
  auto whole_blocks = [&](const char* dim, int64_t v, const char* of) {
    if (v < 1 || v % kBlock != 0)
      throw ShapeError(std::string(dim) + " = " + std::to_string(v) + " (" + of +
                       ") is not a positive multiple of 128: the forward and backward products "
                       "quantize each operand in blocks of 128 along it");
  };
  whole_blocks("M", m, "x's rows");
  whole_blocks("N", n, "w's rows");
  whole_blocks("K", k, "x's and w's columns");
  const std::string& f = attr_string(attrs, "format");
  if (f != "f8e4m3" && f != "f8e5m2")
    throw ShapeError("attribute 'format' is '" + f + "', expected f8e4m3 or f8e5m2");
  const std::string& s = attr_string(attrs, "scale");
  if (s != "f32" && s != "e8m0")
    throw ShapeError("attribute 'scale' is '" + s + "', expected f32 or e8m0");
  return {{in[0].dtype, {m, n}}};
}

Attrs quantize_attrs(const Attrs& attrs, std::vector<int64_t> block) {
  return {{"format", attr_string(attrs, "format")},
          {"block", std::move(block)},
          {"scale", attr_string(attrs, "scale")}};
}

Attrs matmul_attrs(DType to) { return {{"to", std::string(dtype_name(to))}}; }

// The forward's three ops by their references: quantize x and w, then matmul_fp8 (the tensor
// core's FP8 model, so the kernels' bits).
std::vector<RefTensor> ref_linear_fp8(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const OpSchema& quantize = *op_registry().find("quantize");
  const OpSchema& matmul = *op_registry().find("matmul_fp8");
  std::vector<RefTensor> xq = quantize.reference({in[0]}, quantize_attrs(attrs, {kBlock}));
  std::vector<RefTensor> wq = quantize.reference({in[1]}, quantize_attrs(attrs, {kBlock, kBlock}));
  // The reference runs in double; matmul_fp8 rounds to its `to` dtype's values: f32 here, the
  // graph rounds to the output's dtype where it stores.
  return matmul.reference({xq[0], xq[1], wq[0], wq[1]}, matmul_attrs(DType::F32));
}

// dx = linear_fp8(dy, w^T), dw = linear_fp8(dy^T, x^T): the derivative of x·w^T, each product
// in FP8 (the header).
std::vector<GradOp> grad_linear_fp8(const std::vector<TensorType>&, const Attrs& attrs,
                                    const std::vector<bool>& needs) {
  const Attrs fp8 = {{"format", attr_string(attrs, "format")},
                     {"scale", attr_string(attrs, "scale")}};
  std::vector<GradOp> ops;
  if (needs[0]) {
    ops.push_back({"transpose", {"x1"}, {"wt"}, {}});
    ops.push_back({"linear_fp8", {"dy0", "wt"}, {"dx0"}, fp8});
  }
  if (needs[1]) {
    ops.push_back({"transpose", {"dy0"}, {"dyt"}, {}});
    ops.push_back({"transpose", {"x0"}, {"xt"}, {}});
    ops.push_back({"linear_fp8", {"dyt", "xt"}, {"dx1"}, fp8});
  }
  return ops;
}

OpExpansion expand_linear_fp8(const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                              const Attrs& attrs) {
  const OpSchema& quantize = *op_registry().find("quantize");
  const OpSchema& matmul = *op_registry().find("matmul_fp8");
  OpExpansion ex;
  // Each operand's codes and scales into scratch.
  std::vector<TensorType> q_types;
  std::vector<KernelArg> q_args;
  for (int i : {0, 1}) {
    const Attrs qa = quantize_attrs(
        attrs, i == 0 ? std::vector<int64_t>{kBlock} : std::vector<int64_t>{kBlock, kBlock});
    const std::vector<TensorType> qt = quantize.infer({in[i]}, qa);
    const int codes = static_cast<int>(ex.scratch.size());
    ex.scratch.insert(ex.scratch.end(), qt.begin(), qt.end());
    append_expansion(ex, quantize.expand({in[i]}, qt, qa), {input_slot(i)},
                     {scratch_slot(codes), scratch_slot(codes + 1)});
    q_types.insert(q_types.end(), qt.begin(), qt.end());
    q_args.insert(q_args.end(), {scratch_slot(codes), scratch_slot(codes + 1)});
  }
  const Attrs ma = matmul_attrs(out[0].dtype);
  append_expansion(ex, matmul.expand(q_types, matmul.infer(q_types, ma), ma), q_args,
                   {output_slot(0)});
  return ex;
}

}  // namespace

void register_linear_fp8(OpRegistry& registry) {
  auto attr = [](const char* name, const char* value, const char* doc) {
    return AttrSpec{.name = name,
                    .kind = AttrKind::String,
                    .default_value = AttrValue{std::string(value)},
                    .doc = doc};
  };
  // x [128, 128]: row 0 = [1, 2, 0, ..], the others [1, 0, ..]; w [128, 128]: rows [3, 1, 0, ..]
  // and [-1, 0.5, 0, ..], the rest 0. With power-of-two scales every code and product is exact
  // (x's rows scale by 2^-7 and 2^-8, w by 2^-7): y's row 0 = [5, 0, ..], the others [3, -1, 0,
  // ..].
  const int64_t e = 128;
  std::vector<double> xv(e * e, 0.0), wv(e * e, 0.0), yv(e * e, 0.0);
  for (int64_t i = 0; i < e; ++i) xv[i * e] = 1, yv[i * e] = 3, yv[i * e + 1] = -1;
  xv[1] = 2, yv[0] = 5, yv[1] = 0;
  wv[0] = 3, wv[1] = 1, wv[e] = -1, wv[e + 1] = 0.5;
  registry.add(
      {.name = "linear_fp8",
       .doc = "y = x · w^T in FP8 (x per 1×128 of its rows, w [N, K] per 128×128, quantized in "
              "the step; matmul_fp8's product), trained in FP8: dx = linear_fp8(dy, w^T), dw = "
              "linear_fp8(dy^T, x^T), straight-through over the roundings; M, N, K multiples of "
              "128",
       .inputs = {"x", "w"},
       .outputs = {"y"},
       .attrs = {attr("format", "f8e4m3", "the codes' format: f8e4m3 or f8e5m2"),
                 attr("scale", "f32", "the scales: f32, or e8m0 (powers of two, rounded up)")},
       .dtypes = {DType::F32, DType::BF16},
       .infer = infer_linear_fp8,
       .reference = ref_linear_fp8,
       .gradient = grad_linear_fp8,
       .expand = expand_linear_fp8,
       .tests = {.kernel = {{.shapes = {{128, 256}, {384, 256}}},
                            {.shapes = {{256, 128}, {128, 128}},
                             .attrs = {{"format", std::string("f8e5m2")},
                                       {"scale", std::string("e8m0")}}}},
                 .examples = {{.inputs = {{{e, e}, xv}, {{e, e}, wv}},
                               .attrs = {{"scale", std::string("e8m0")}},
                               .outputs = {{{e, e}, yv}}}},
                 .fp8_gradient = true}});
}

}  // namespace tilerun::kernels
