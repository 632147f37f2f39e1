// matmul_fp8: y = x · w^T from FP8 codes and their block scales, the V4 / DeepSeek recipe on the
// tensor core's FP8 path (wgmma m64nNk32 .e4m3/.e5m2):
//   x [M, K] FP8 with x_scale [M, KB] (one scale per 1 x 128 block of a row: quantize with
//   block [128]), w [N, K] FP8 with w_scale [NB, KB] (one per 128 x 128 block: quantize with
//   block [128, 128]); KB = ceil(K / 128), NB = ceil(N / 128). Scales are f32, or e8m0 (UE8M0:
//   powers of two, quantize's scale: e8m0), each tensor either.
//   y[m, n] = the f32 chain over the K blocks kb, from +0:
//     part = the tensor core's sum of x[m, k]·w[n, k] over block kb, from +0 (the MMA model's
//            groups of 32 in k order; compiler/codegen/mma_model.h hopper_mma_model_fp8),
//     acc  = fma(part, x_scale[m, kb] · w_scale[n / 128, kb], acc) (the product of the scales
//            rounded to f32 first),
//   rounded once to y's dtype (`to`: bf16 or f32).
// Why the promotion every 128 of K: the FP8 MMA keeps few bits below its largest term, so a long
// K summed inside it loses the small terms; 128 at a time, then in f32 on the CUDA cores, is the
// recipe's answer. The zero-padded tail of the last block takes part in its chain as zeros, and
// the reference sums the same padded block (a group of zero products still aligns the chain).
//
// Kernel: a 128 x 128 tile of y a block of two warpgroups; each K block's tiles of x and w land in
// shared memory by the tensor memory accelerator ([128, 128] codes, 128-byte rows under the 128B
// swizzle, five stages (four beside an f32 epilogue), the copies stages - 2 steps ahead). Each
// step's gemm runs into a fresh partial, one of two in turn, and is left running while every
// thread promotes the previous step's partial into the running sum: the promotion's CUDA-core
// work overlaps the tensor core's next block instead of leaving it idle (the forty-third
// session's profile: 8 warps an SM, no eligible warp 67% of cycles). The scales are read from
// global memory (each thread's two rows a step; cached). The epilogue goes through a padded
// shared tile as the bf16 matmul's does. Needs K a multiple of 16 (16-byte rows for the tensor
// maps).
//
// No gradient: FP8 codes are storage (quantize detaches); a model trains through fake_quant and
// the 16-bit matmul.
#include <cmath>
#include <string>
#include <vector>

#include "compiler/codegen/mma_model.h"
#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"
#include "kernels/matmul_tc.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {
namespace {

namespace cc = tilerun::compiler;

constexpr int64_t kBlock = 128;  // a scale block's extent along K (and N for w)
constexpr int kThreads = 256;    // two warpgroups, 64 rows each

// Shared stages of [128, 128] codes for x and for w (32 KB a stage): five beside a bf16
// epilogue tile (35 KB), four beside an f32 one (70 KB), under the 227 KB a block may have.
int fp8_stages(DType to) { return to == DType::BF16 ? 5 : 4; }

int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// ---- Inference ---------------------------------------------------------------------------------

std::vector<TensorType> infer_matmul_fp8(const std::vector<TensorType>& in, const Attrs& attrs) {
  const DType to = float_dtype_attr(attrs, "to");
  if (to != DType::BF16 && to != DType::F32)
    throw ShapeError("attribute 'to' is " + std::string(dtype_name(to)) + ", expected bf16 or f32");
  const char* names[] = {"x", "x_scale", "w", "w_scale"};
  for (int i : {0, 2}) {
    expect_rank(in[i], 2, names[i]);
    if (!dtype_is_fp8(in[i].dtype))
      throw ShapeError("input '" + std::string(names[i]) + "' is " + to_string(in[i]) +
                       ", expected FP8 codes (f8e4m3 or f8e5m2)");
  }
  const int64_t m = in[0].shape[0], k = in[0].shape[1], n = in[2].shape[0];
  if (in[2].shape[1] != k)
    throw ShapeError("input 'w' is " + to_string(in[2]) + ", expected [N, " + std::to_string(k) +
                     "] (w is K-major: y = x · w^T)");
  if (k < 16 || k % 16 != 0)
    throw ShapeError("input 'x' is " + to_string(in[0]) +
                     ": K must be a positive multiple of 16 (16-byte rows for the tensor maps)");
  if (n < 1) throw ShapeError("input 'w' is " + to_string(in[2]) + ", empty");
  for (int i : {1, 3})
    if (in[i].dtype != DType::F32 && in[i].dtype != DType::E8M0)
      throw ShapeError("input '" + std::string(names[i]) + "' is " + to_string(in[i]) +
                       ", expected scales of f32 or e8m0");
  const TensorType xs{in[1].dtype, {m, blocks(k)}}, ws{in[3].dtype, {blocks(n), blocks(k)}};
  expect_same(in[1], "x_scale", xs, "x's 1 x 128 blocks");
  expect_same(in[3], "w_scale", ws, "w's 128 x 128 blocks");
  return {{to, {m, n}}};
}

// ---- Reference ---------------------------------------------------------------------------------

// The definition above, each block's chain by the tensor core's model on the values (exact in
// their FP8 formats), the promotion and the scales' product in f32.
std::vector<RefTensor> ref_matmul_fp8(const std::vector<RefTensor>& in, const Attrs&) {
  const RefTensor &x = in[0], &xs = in[1], &w = in[2], &ws = in[3];
  const int64_t m = x.shape[0], k = x.shape[1], n = w.shape[0], kb = blocks(k);
  const compiler::MmaModel model = compiler::hopper_mma_model_fp8();
  RefTensor y = ref_zeros({m, n});
  std::vector<double> row(kBlock), col(kBlock);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t b = 0; b < kb; ++b) {
        for (int64_t p = 0; p < kBlock; ++p) {
          const int64_t kk = b * kBlock + p;
          row[p] = kk < k ? x.data[i * k + kk] : 0.0;
          col[p] = kk < k ? w.data[j * k + kk] : 0.0;
        }
        const float part =
            compiler::mma_dot_values(model, 0.0f, row.data(), 1, col.data(), 1, kBlock);
        const float scale = static_cast<float>(xs.data[i * kb + b]) *
                            static_cast<float>(ws.data[(j / kBlock) * kb + b]);
        acc = std::fmaf(part, scale, acc);
      }
      y.data[i * n + j] = acc;
    }
  return {y};
}

// ---- Kernel ------------------------------------------------------------------------------------

// The operands' dtypes: x's and w's codes, their scales', y's.
struct Fp8Types {
  DType x, xs, w, ws, y;
};

std::string kernel_name(const Fp8Types& t) {
  auto n = [](DType d) { return std::string(dtype_name(d)); };
  // Scales other than f32 name themselves ("_sxe8m0", "_swe8m0").
  auto scale = [&](const char* which, DType d) {
    return d == DType::F32 ? std::string() : "_s" + std::string(which) + n(d);
  };
  return "matmul_fp8_" + n(t.x) + "_" + n(t.w) + "_128x128x128_tma" +
         std::to_string(fp8_stages(t.y)) + "p" + scale("x", t.xs) + scale("w", t.ws) + "_" + n(t.y);
}

cc::Kernel build_matmul_fp8(const Fp8Types& t) {
  const DType xd = t.x, wd = t.w, to = t.y;
  cc::KernelBuilder kb(kernel_name(t));
  cc::Dim m = kb.dim("M", {.min = 0}), n = kb.dim("N", {.min = 1}),
          k = kb.dim("K", {.min = 16, .divisible_by = 16});
  const cc::Val kblocks = cc::ceildiv(k, cc::Val(kBlock));
  cc::Buf x = kb.input("x", xd, {m, k});
  cc::Buf xs = kb.input("x_scale", t.xs, {m, kblocks});
  cc::Buf w = kb.input("w", wd, {n, k});
  cc::Buf ws = kb.input("w_scale", t.ws, {cc::ceildiv(n, cc::Val(kBlock)), kblocks});
  cc::Buf y = kb.output("y", to, {m, n});
  const int stages = fp8_stages(to);
  kb.body({cc::ceildiv(n, kTcN), cc::ceildiv(m, kTcM)}, kThreads, [&](cc::Scope& s) {
    // Not let-bound: the copies' origins must show themselves multiples of 16 (tile_verifier).
    cc::Idx n0 = s.block_idx(0) * kTcN, m0 = s.block_idx(1) * kTcM;
    const cc::Swizzle sw = cc::tensor_core_swizzle(128, 1);
    cc::Buf full = s.alloc_shared("full", DType::I64, {stages});
    cc::Buf as = s.alloc_shared("As", xd, {stages, kTcM, kBlock}, sw);
    cc::Buf bs = s.alloc_shared("Bs", wd, {stages, kTcN, kBlock}, sw);
    // Two partial sums in turn: step j's gemm runs into one while step j - 1's is promoted
    // from the other on the CUDA cores.
    cc::Buf parts[2] = {s.alloc_fragment("part0", DType::F32, {kTcM, kTcN}),
                        s.alloc_fragment("part1", DType::F32, {kTcM, kTcN})};
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kTcM, kTcN});
    s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
    cc::Val steps = s.let(kblocks, "steps");
    cc::Val padded = s.let((steps + 1) / 2 * 2, "padded");  // steps rounded up to even
    const cc::Val nstages(int64_t{stages});
    auto slot = [&](const cc::Val& j) { return j % nstages; };
    // Step j's two boxes into its stage, from thread 0, completing on the stage's mbarrier.
    auto issue = [&](const cc::Val& j) {
      s.if_then(j < padded, [&] {
        cc::Val sl = s.let(slot(j), "slot");
        s.copy_tma(as.region({sl, 0, 0}, {1, kTcM, kBlock}),
                   x.region({m0, j * kBlock}, {kTcM, kBlock}), full, sl);
        s.copy_tma(bs.region({sl, 0, 0}, {1, kTcN, kBlock}),
                   w.region({n0, j * kBlock}, {kTcN, kBlock}), full, sl);
      });
    };
    s.mbarrier_init(full, 2);
    s.barrier();
    // The copies run stages - 2 steps ahead: step ko's gemm may still be running in the other
    // warpgroup when this one passes step ko + 1's barrier, but step ko - 1's has finished in
    // every warpgroup by then (each waited for it before its own barrier), so the stage it read,
    // (ko - 1) % S = (ko + 1 + S - 2) % S, is free to refill at step ko + 1.
    const int ahead = stages - 2;
    for (int d = 0; d < ahead; ++d) issue(cc::Val(int64_t{d}));
    // The row of x_scale each fragment row reads (rows past M read row M - 1: not stored).
    const cc::Val last_row = cc::max(cc::Val(m) - 1, cc::Val(int64_t{0}));
    auto promote = [&](const cc::Buf& part, const cc::Val& j) {
      cc::Val wscale = s.let(ws(s.block_idx(0), j), "wscale");
      s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx c) {
        cc::Val scale = xs(cc::min(m0 + i, last_row), j) * wscale;
        acc(i, c) = cc::fma(part(i, c), scale, acc(i, c));
      });
    };
    // Step ko: its gemm into parts[p], left running (pending 1: the step before's is then
    // done). The steps go in pairs, so that each partial is a fixed register array: the pair's
    // first gemm runs while the last pair's second partial is promoted, its second while the
    // first's is, and the pair ends with both done, so no gemm is in flight across the loop's
    // back edge (which made ptxas serialize every wgmma of the kernel). An odd count's
    // last step is a gemm of zeros (its boxes lie past K), never promoted.
    auto step = [&](const cc::Val& ko, int p) {
      s.mbarrier_wait(full, slot(ko), ko / nstages % 2);
      s.barrier();
      issue(ko + ahead);
      s.parallel(kTcM, kTcN, [&](cc::Idx i, cc::Idx j) { parts[p](i, j) = 0.0f; });
      s.gemm_at(s.let(slot(ko), "cur"), parts[p], as, bs, /*trans_a=*/false, /*trans_b=*/true,
                /*pending=*/1);
    };
    s.serial(padded / 2, [&](cc::Idx j) {
      step(j * 2, 0);
      s.if_then(j > 0, [&] { promote(parts[1], j * 2 - 1); });
      step(j * 2 + 1, 1);
      promote(parts[0], j * 2);
      s.gemm_wait(0);
    });
    s.if_then(padded == steps, [&] { promote(parts[1], steps - 1); });
    tc_store_through_shared(s, to, {acc}, kTcM, m0, n0, m, n,
                            [&](const cc::Val& r, const cc::Val& c) { return y(r, c); });
  });
  return kb.build();
}

ExpandFn expand_matmul_fp8(std::shared_ptr<KernelCache> cache) {
  return
      [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out, const Attrs&) {
        const Fp8Types t{in[0].dtype, in[1].dtype, in[2].dtype, in[3].dtype, out[0].dtype};
        const std::string name = kernel_name(t);
        KernelCall call{
            .kernel = cache->get(name, [&] { return build_matmul_fp8(t); }),
            .buffers = {input_slot(0), input_slot(1), input_slot(2), input_slot(3), output_slot(0)},
            .dims = {in[0].shape[0], in[2].shape[0], in[0].shape[1]}};
        return OpExpansion{.calls = {call}};
      };
}

// Scales drawn as positive powers of two times 1 + a little (any f32 works; these keep y's
// magnitudes moderate).
void positive_scales(std::vector<RefTensor>& in) {
  for (int i : {1, 3})
    for (double& v : in[i].data)
      v = static_cast<double>(
          static_cast<float>(std::ldexp(1 + std::abs(v) / 8, static_cast<int>(2 * v))));
}

// UE8M0 scales: powers of two.
void pow2_scales(std::vector<RefTensor>& in) {
  for (int i : {1, 3})
    for (double& v : in[i].data) v = std::ldexp(1.0, static_cast<int>(std::lround(2 * v)));
}

OpTestCase fp8_case(int64_t m, int64_t n, int64_t k, DType xd = DType::F8E4M3,
                    DType wd = DType::F8E4M3, DType sd = DType::F32) {
  return {.shapes = {{m, k}, {m, blocks(k)}, {n, k}, {blocks(n), blocks(k)}},
          .lo = -4,
          .hi = 4,
          .derive = sd == DType::E8M0 ? pow2_scales : positive_scales,
          .input_dtypes = {{0, xd}, {1, sd}, {2, wd}, {3, sd}}};
}

}  // namespace

void register_matmul_fp8(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  // x = [1, 2, 0, ..] (K = 16) with scale 2, w's two rows [3, 1, 0, ..] and [-1, 0.5, 0, ..]
  // with scale 0.25: y = [(3 + 2)·0.5, (-1 + 1)·0.5].
  std::vector<double> xr(16, 0.0), wr(32, 0.0);
  xr[0] = 1, xr[1] = 2, wr[0] = 3, wr[1] = 1, wr[16] = -1, wr[17] = 0.5;
  registry.add(
      {.name = "matmul_fp8",
       .doc = "y = x · w^T from FP8 codes with block scales (x_scale per 1×128 of x's rows, "
              "w_scale per 128×128 of w [N, K]; f32 or e8m0): each 128 of K summed on the tensor "
              "core from +0 "
              "(its FP8 model), scaled by x_scale·w_scale and added in f32 (fma), rounded once to "
              "y's dtype (to); K a multiple of 16; no gradient (codes are storage)",
       .inputs = {"x", "x_scale", "w", "w_scale"},
       .outputs = {"y"},
       .attrs = {{.name = "to",
                  .kind = AttrKind::String,
                  .default_value = AttrValue{std::string("bf16")},
                  .doc = "y's dtype: bf16 or f32"}},
       .dtypes = {DType::F32, DType::BF16},
       .dtype_attr = "to",
       .infer = infer_matmul_fp8,
       .reference = ref_matmul_fp8,
       .expand = expand_matmul_fp8(cache),
       .tests = {
           .kernel = {fp8_case(150, 131, 304), fp8_case(128, 128, 128),
                      fp8_case(7, 300, 16, DType::F8E4M3, DType::F8E5M2),
                      fp8_case(33, 40, 400, DType::F8E5M2, DType::F8E5M2),
                      fp8_case(64, 256, 512, DType::F8E4M3, DType::F8E4M3, DType::E8M0)},
           .examples = {{.inputs = {{{1, 16}, xr}, {{1, 1}, {2}}, {{2, 16}, wr}, {{1, 1}, {0.25}}},
                         .attrs = {{"to", std::string("f32")}},
                         .outputs = {{{1, 2}, {2.5, 0}}},
                         .input_dtypes = {{0, DType::F8E4M3}, {2, DType::F8E4M3}}}}}});
}

}  // namespace tilerun::kernels
