// grouped_matmul_fp4: grouped_matmul (kernels/grouped_matmul.cc) with the experts' weights stored
// as FP4 E2M1 codes and one e8m0 scale per `block` values along w's last axis, quantize's MXFP4
// storage (V4's expert weights). y = grouped_matmul(x, dequantize(w, scale)): every dequantized
// weight, a code times a power of two within e8m0's range, is exact in bf16 and f32, so the
// product is grouped_matmul's on those weights, bit for bit, in either dtype.
// graph/fold_fp4_weights.h turns a trained fake_quant of the weights (fp4e2m1, ue8m0) read by
// grouped_matmuls into a quantize and these, with the same bits: the weights go to the GEMMs at a
// quarter of bf16's bytes, and their rounding writes a quarter of the bytes too.
// Kernels: bf16 with the offsets' sorted contract (a model's), K a multiple of 64 and w's rows of
// bytes 16-byte aligned run build_grouped_fp4_aligned, which decodes each step's codes in shared
// memory into the tensor core's bf16 tile; anything else dequantizes into scratch (dequantize's
// kernel) and runs grouped_matmul's expansion on it: the same bits either way.
// Gradient: dx = grouped_matmul_fp4(dy, w, scale; the other transpose) over the same segments;
// codes, scales and offsets get none (stored codes are frozen: a trained weight reaches this op
// through the fold, which keeps the fake_quant's straight-through gradient).
#include <cmath>

#include "kernels/expand_util.h"
#include "kernels/grouped_matmul_tc.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"
#include "kernels/sub_expansion.h"

namespace tilerun::kernels {

namespace {

// x [R, K], w fp4e2m1 [E, K, N] ([E, N, K] transposed), scale e8m0 [E, .., last / B], offsets
// i32 [E]; returns B, the scale block.
int64_t fp4_shape(const std::vector<TensorType>& in, const Attrs& attrs) {
  if (in[0].dtype != DType::F32 && in[0].dtype != DType::BF16)
    throw ShapeError("input 'x' is " + to_string(in[0]) + ", expected f32 or bf16 (a weight " +
                     "decoded from FP4 is exact in both)");
  expect_rank(in[0], 2, "x");
  const bool tb = attr_bool(attrs, "transpose_b");
  const TensorType &w = in[1], &scale = in[2];
  const int64_t k = in[0].shape[1];
  if (w.dtype != DType::FP4E2M1 || w.shape.size() != 3 || (tb ? w.shape[2] : w.shape[1]) != k)
    throw ShapeError(
        "input 'w' is " + to_string(w) + ", expected fp4e2m1" +
        (tb ? "[E, N, " + std::to_string(k) + "]" : "[E, " + std::to_string(k) + ", N]") +
        " (codes; K from 'x' " + to_string(in[0]) + ")");
  const int64_t last = w.shape[2];
  if (scale.dtype != DType::E8M0 || scale.shape.size() != 3 || scale.shape[0] != w.shape[0] ||
      scale.shape[1] != w.shape[1] || scale.shape[2] < 1 || last % scale.shape[2] != 0 ||
      (last / scale.shape[2]) % 2 != 0)
    throw ShapeError("input 'scale' is " + to_string(scale) + ", expected e8m0[" +
                     std::to_string(w.shape[0]) + ", " + std::to_string(w.shape[1]) + ", " +
                     std::to_string(last) + " / B] (one scale per B values of w's last " +
                     "axis, B even) for input 'w' " + to_string(w));
  if (in[3].dtype != DType::I32 || in[3].shape != std::vector<int64_t>{w.shape[0]})
    throw ShapeError("input 'offsets' is " + to_string(in[3]) + ", expected i32[" +
                     std::to_string(w.shape[0]) + "] (each expert's first row, counting_sort's " +
                     "offsets) for the experts of 'w'");
  return last / scale.shape[2];
}

std::vector<TensorType> infer_fp4(const std::vector<TensorType>& in, const Attrs& attrs) {
  fp4_shape(in, attrs);
  const bool tb = attr_bool(attrs, "transpose_b");
  return {TensorType{in[0].dtype, {in[0].shape[0], tb ? in[1].shape[1] : in[1].shape[2]}}};
}

const OpSchema& grouped() { return *op_registry().find("grouped_matmul"); }
const OpSchema& dequantize() { return *op_registry().find("dequantize"); }

// w's values: each code times its block's scale (exact in double, as in every dtype here).
std::vector<RefTensor> ref_fp4(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor w = dequantize().reference({in[1], in[2]}, {{"to", std::string("f32")}})[0];
  return grouped().reference({in[0], w, in[3]}, attrs);
}

std::vector<GradOp> grad_fp4(const std::vector<TensorType>& in, const Attrs& attrs,
                             const std::vector<bool>& needs) {
  std::vector<GradOp> ops;
  std::vector<std::string> dx_in = {"dy0", "x1", "x2", "x3"};
  if (in.size() > 4) dx_in.push_back("x4");  // the offsets' contract status goes along
  if (needs[0])
    ops.push_back({"grouped_matmul_fp4",
                   dx_in,
                   {"dx0"},
                   {{"transpose_b", !attr_bool(attrs, "transpose_b")}}});
  for (int i = 1; i < 4; ++i)
    if (needs[i])
      ops.push_back({"zeros", {"x" + std::to_string(i)}, {"dx" + std::to_string(i)}, {}});
  return ops;
}

ExpandFn expand_fp4(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    const DType dt = out[0].dtype;
    const bool tb = attr_bool(attrs, "transpose_b");
    const int64_t block = fp4_shape(in, attrs);
    const int64_t r = in[0].shape[0], k = in[0].shape[1], n = out[0].shape[1];
    const int64_t e = in[1].shape[0];
    const bool sorted = in.size() > 4;  // the graph appended the contract's status
    if (grouped_fp4_decodes(dt, tb, k, n, sorted)) {
      KernelCache::KernelPtr kernel =
          cache->get(kernel_key(grouped_fp4_aligned_name(tb, block), dt),
                     [&] { return build_grouped_fp4_aligned(dt, tb, block); });
      return OpExpansion{.calls = {{.kernel = kernel,
                                    .buffers = {input_slot(0), input_slot(1), input_slot(2),
                                                input_slot(3), input_slot(4), output_slot(0)},
                                    .dims = {r, n, k, e}}}};
    }
    // The weights dequantized into scratch in x's dtype, then grouped_matmul on them.
    OpExpansion ex;
    const Attrs to{{"to", std::string(dtype_name(dt))}};
    const std::vector<TensorType> wt = dequantize().infer({in[1], in[2]}, to);
    ex.scratch.push_back(wt[0]);
    append_expansion(ex, dequantize().expand({in[1], in[2]}, wt, to),
                     {input_slot(1), input_slot(2)}, {scratch_slot(0)});
    std::vector<TensorType> g_in = {in[0], wt[0], in[3]};
    std::vector<KernelArg> g_args = {input_slot(0), scratch_slot(0), input_slot(3)};
    if (sorted) {
      g_in.push_back(in[4]);
      g_args.push_back(input_slot(4));
    }
    append_expansion(ex, grouped().expand(g_in, out, attrs), g_args, {output_slot(0)});
    return ex;
  };
}

// Cases: x [R, K], w codes, scale, offsets. Codes are drawn over e2m1's range and rounded to it
// by the suite, scales (e8m0) over a few binades.
OpTestCase fp4_case(std::vector<std::vector<int64_t>> shapes, bool tb, int64_t lo, int64_t hi) {
  return {.shapes = std::move(shapes),
          .attrs = {{"transpose_b", tb}},
          .int_lo = lo,
          .int_hi = hi,
          .running_sums = {3},
          .derive =
              [](std::vector<RefTensor>& in) {
                for (double& v : in[1].data) v *= 3;  // codes in [-6, 6)
                for (double& v : in[2].data) v = std::ldexp(1.0, static_cast<int>(4 * v));
              },
          .input_dtypes = {{1, DType::FP4E2M1}, {2, DType::E8M0}}};
}

}  // namespace

// As grouped_matmul's: in a model the offsets are sorted segment starts in [0, R].
const IndexContract kFp4OffsetsContract{
    .slot = 3,
    .bound = [](const std::vector<TensorType>& in, const Attrs&) { return in[0].shape[0] + 1; },
    .indexes = "the rows of input 'x' where each expert's segment starts",
    .sorted = true};

void register_grouped_matmul_fp4(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "grouped_matmul_fp4",
       .doc = "grouped_matmul with FP4 weights: y [R, N] = x [R, K] @ (w[e] · its scales) for the "
              "rows of each expert's segment; w fp4e2m1 codes [E, K, N] ([E, N, K] with "
              "transpose_b), scale e8m0 with one per B (even) values of w's last axis "
              "(quantize's MXFP4), offsets as grouped_matmul's; the same bits as grouped_matmul on "
              "dequantize(w, scale); gradient: dx by grouped_matmul_fp4, none for the codes, "
              "scales or offsets",
       .inputs = {"x", "w", "scale", "offsets"},
       .outputs = {"y"},
       .attrs = {{.name = "transpose_b",
                  .kind = AttrKind::Bool,
                  .default_value = AttrValue{false},
                  .doc = "w holds each expert's matrix transposed, [E, N, K]"}},
       .dtypes = {DType::F32, DType::BF16},
       .input_dtypes = {{1, DType::FP4E2M1}, {2, DType::E8M0}, {3, DType::I32}},
       .infer = infer_fp4,
       .reference = ref_fp4,
       .gradient = grad_fp4,
       .expand = expand_fp4(cache),
       .index_contracts = {kFp4OffsetsContract},
       .tests = {.kernel = {fp4_case({{70, 64}, {4, 64, 40}, {4, 64, 1}, {4}}, false, 0, 18),
                            fp4_case({{70, 64}, {4, 40, 64}, {4, 40, 2}, {4}}, true, 0, 18),
                            fp4_case({{45, 128}, {3, 128, 64}, {3, 128, 4}, {3}}, false, 0, 1),
                            fp4_case({{130, 128}, {5, 72, 128}, {5, 72, 4}, {5}}, true, 0, 40)},
                 .gradient = {fp4_case({{7, 4}, {3, 4, 4}, {3, 4, 2}, {3}}, false, 0, 3),
                              fp4_case({{7, 4}, {3, 4, 4}, {3, 4, 1}, {3}}, true, 0, 3)},
                 // Row 0 in no segment; expert 0 rows 1-2, expert 1 row 3. w[0] = [[1, 2]] times
                 // 2, w[1] = [[-3, 0.5]] times 0.5 (K = 1, N = 2, one scale a row).
                 .examples = {{.inputs = {{{4, 1}, {1, 2, 3, 4}},
                                          {{2, 1, 2}, {1, 2, -3, 0.5}},
                                          {{2, 1, 1}, {2, 0.5}},
                                          {{2}, {1, 3}}},
                               .attrs = {{"transpose_b", false}},
                               .outputs = {{{4, 2}, {0, 0, 4, 8, 6, 12, -6, 1}}},
                               .input_dtypes = {{1, DType::FP4E2M1}, {2, DType::E8M0}}}}}});
}

}  // namespace tilerun::kernels
