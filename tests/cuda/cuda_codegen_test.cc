// The CUDA backend without a GPU: the emitted source is deterministic, self-contained and
// strict; NVRTC turns it into identical sm_90a cubins; odd names are escaped; launch geometry
// and parameter packing match the signature.
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/launch_abi.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <regex>

#include "compiler/analysis/index_width.h"
#include "compiler/analysis/launch_geometry.h"
#include "compiler/codegen/cpu_backend.h"
#include "compiler/ir/builder.h"
#include "compiler/lower.h"
#include "compiler/test_kernels.h"
#include "cuda/cuda_test_kernels.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

using cudatest::bit_ops_kernel;
using cudatest::ragged_elementwise_kernel;
using cudatest::row_reduction_kernel;
using cudatest::sin_cos_kernel;
using cudatest::tiled_matmul_kernel;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string scratch_dir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("tilerun-cuda-codegen-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

struct Named {
  const char* name;
  Kernel (*make)();
};
const Named kKernels[] = {
    {"ragged_elementwise", ragged_elementwise_kernel},
    {"row_reduction", row_reduction_kernel},
    {"tiled_matmul", tiled_matmul_kernel},
    {"bit_ops", bit_ops_kernel},
    {"sin_cos", sin_cos_kernel},
};

TEST(CudaCodegen, SourceIsDeterministicAndSelfContained) {
  for (const Named& n : kKernels) {
    SCOPED_TRACE(n.name);
    // Two independent builds and lowerings, emitted twice each.
    std::string a = emit_cuda(lower(n.make()));
    std::string b = emit_cuda(lower(n.make()));
    EXPECT_EQ(a, b);
    SimtKernel simt = lower(n.make());
    EXPECT_EQ(emit_cuda(simt), emit_cuda(simt));
    EXPECT_EQ(a.find("#include"), std::string::npos);
    EXPECT_NE(a.find(std::string("extern \"C\" __global__ void __launch_bounds__(") +
                     std::to_string(simt.sig.threads) + ") tilerun_" + n.name + "("),
              std::string::npos)
        << a;
    // No libdevice math and no fast intrinsics: only the strict helpers and _rn operations.
    for (const char* banned : {"expf", "logf", "tanhf", "sqrtf", "__expf", "__logf", "fminf",
                               "fmaxf", "__saturatef", "rsqrtf", "sinf(", "cosf(", "sincosf("})
      EXPECT_EQ(a.find(banned), std::string::npos) << banned;
  }
}

TEST(CudaCodegen, SignatureAndStrictOperations) {
  std::string src = emit_cuda(lower(ragged_elementwise_kernel()));
  const char* params[] = {"const float* x,", "float* __restrict__ y,", "short* __restrict__ yb,",
                          "long long N,", "float a) {"};
  size_t at = 0;
  for (const char* p : params) {
    size_t next = src.find(p, at);
    ASSERT_NE(next, std::string::npos) << p << "\n" << src;
    at = next;  // in signature order
  }
  // sigmoid/tanh arrive as strict IR: fmas, products and sums as IEEE intrinsics. Their quotient
  // of a d in [1, 2] goes by Newton steps (strict_math.cc reciprocal_1_2): no division, whose
  // IEEE form is a subroutine with a slow path on the GPU.
  EXPECT_EQ(src.find("__fdiv_rn("), std::string::npos);
  EXPECT_NE(src.find("__fmaf_rn("), std::string::npos);
  EXPECT_NE(src.find("__fmul_rn("), std::string::npos);
  EXPECT_NE(src.find("__fadd_rn("), std::string::npos);
  // Bitcasts for the bf16 rounding and NaN canonicalisation.
  EXPECT_NE(src.find("__float_as_int("), std::string::npos);
  EXPECT_NE(src.find("__int_as_float("), std::string::npos);
  // N <= 2^31 - 1 and one block's 256 elements past blockIdx.x * 256: every index fits 32 bits.
  EXPECT_NE(src.find("(int)threadIdx.x"), std::string::npos);
  EXPECT_NE(src.find("(int)blockIdx.x"), std::string::npos);
  EXPECT_EQ(src.find("blockIdx.y"), std::string::npos);

  std::string mm = emit_cuda(lower(tiled_matmul_kernel()));
  EXPECT_NE(mm.find("__shared__ __align__(16) float As[256];"), std::string::npos) << mm;
  EXPECT_NE(mm.find("__shared__ __align__(16) float Bs[256];"), std::string::npos);
  EXPECT_NE(mm.find("float acc[8];"), std::string::npos);
  EXPECT_EQ(count_of(mm, "__syncthreads();"), 2u);
  EXPECT_NE(mm.find("(long long)blockIdx.y"), std::string::npos);
  // The K loop holds both barriers: they are inside a for at block level.
  size_t k_loop = mm.find("for (long long k_");
  ASSERT_NE(k_loop, std::string::npos) << mm;
  EXPECT_GT(mm.find("__syncthreads();"), k_loop);

  std::string red = emit_cuda(lower(row_reduction_kernel()));
  EXPECT_GE(count_of(red, "__syncthreads();"), 3u);
  EXPECT_NE(red.find("__shared__"), std::string::npos);
}

TEST(CudaCodegen, IntegerAndConversionSemanticsUseTheHelpers) {
  std::string src = emit_cuda(lower(bit_ops_kernel()));
  for (const char* helper : {"tr_div(", "tr_mod(", "tr_mul(", "tr_shl(", "tr_shrl(", "tr_shra(",
                             "tr_f32_to_i32(", "tr_f32_to_i8(", "tr_f32_to_i16(", "tr_f32_to_i64(",
                             "tr_fneg(", "__int2float_rn(", "__ll2float_rn(", "__fsqrt_rn("})
    EXPECT_NE(src.find(helper), std::string::npos) << helper;
  // A select arm and the right of && whose lets read memory are evaluated only when chosen.
  EXPECT_NE(src.find("float sel;"), std::string::npos) << src;
  EXPECT_NE(src.find("bool cond = "), std::string::npos) << src;
  // Pure arithmetic lets are hoisted: sigmoid's NaN select stays a branch-free ternary.
  std::string ew = emit_cuda(lower(ragged_elementwise_kernel()));
  EXPECT_EQ(ew.find("float sel;"), std::string::npos) << ew;
}

// Index math in 32 bits where every i64 value is proved to fit (analysis/index_width.h): a
// kernel that fits at its dims' declared bounds computes its thread, block, loop and offset values
// as ints with plain operators for any shape; one that fits only at its launch shape does so when
// lowered for that shape (its dims pinned: pin_index_width) and keeps 64-bit helpers when lowered
// for any. Both compile.
TEST(CudaCodegen, IndexMathIs32BitWhereProved) {
  int pinned_only = 0;
  for (const Named& n : kKernels) {
    SCOPED_TRACE(n.name);
    const Kernel k = n.make();
    LowerOptions options;
    for (const DimParam& d : k.sig.dims) options.analysis.concrete[d.name] = d.bounds.min + 7;
    const SimtKernel generic = lower(k), pinned = lower(k, options);
    const std::string wide = emit_cuda(generic), narrow = emit_cuda(pinned);
    if (!index_width(generic).fits_32) {
      EXPECT_NE(wide.find("const long long thread_idx = (long long)threadIdx.x;"),
                std::string::npos);
      EXPECT_EQ(wide.find("const int thread_idx"), std::string::npos);
    } else {
      EXPECT_NE(wide.find("const int thread_idx = (int)threadIdx.x;"), std::string::npos);
    }
    const IndexWidth w = index_width(pinned);
    if (n.name == std::string("bit_ops") || n.name == std::string("sin_cos")) {
      // i64 data (bit_ops loads and converts i64 values; sin/cos reduce their argument in
      // 64-bit integers): 64-bit at any shape, and the reason says which value.
      EXPECT_FALSE(w.fits_32);
      EXPECT_NE(w.reason.find("may reach"), std::string::npos) << w.reason;
      EXPECT_NE(narrow.find("long long thread_idx"), std::string::npos);
      continue;
    }
    EXPECT_TRUE(w.fits_32) << w.reason;
    if (!index_width(generic).fits_32) {
      ++pinned_only;
      for (const DimParam& d : pinned.sig.dims) EXPECT_EQ(d.bounds.min, d.bounds.max) << d.name;
    }
    EXPECT_NE(narrow.find("const int thread_idx = (int)threadIdx.x;"), std::string::npos) << narrow;
    EXPECT_EQ(narrow.find("long long thread_idx"), std::string::npos);
    for (const DimParam& d : pinned.sig.dims)
      EXPECT_NE(narrow.find("const int " + d.name + "_i32 = (int)" + d.name + ";"),
                std::string::npos)
          << narrow;
    EXPECT_EQ(narrow.find("tr_add(thread_idx"), std::string::npos);
    const std::string body = narrow.substr(narrow.find("extern \"C\""));
    EXPECT_EQ(body.find("LL"), std::string::npos) << body;  // no 64-bit literal
    EXPECT_GE(compile_cuda(pinned, "").cubin.size(), 4u);
  }
  EXPECT_GE(pinned_only, 1);  // the products: M x K and K x N elements pass 2^31 at the bounds
}

TEST(CudaCodegen, NvrtcCompilesIdenticalCubins) {
  std::string dir = scratch_dir();
  for (const Named& n : kKernels) {
    SCOPED_TRACE(n.name);
    SimtKernel simt = lower(n.make());
    CudaBinary a = compile_cuda(simt, "");
    CudaBinary b = compile_cuda(simt, "");
    ASSERT_GE(a.cubin.size(), 4u);
    EXPECT_EQ(a.cubin.substr(0, 4), std::string("\x7f"
                                                "ELF"));
    EXPECT_EQ(a.cubin, b.cubin);
    EXPECT_EQ(a.name, std::string("tilerun_") + n.name);
    EXPECT_EQ(a.source, emit_cuda(simt));
    EXPECT_NE(a.cubin.find(a.name), std::string::npos);  // the entry point's symbol
    EXPECT_FALSE(a.from_cache);

    CudaBinary c = compile_cuda(n.make(), dir);  // the Tile IR convenience, through the cache
    CudaBinary d = compile_cuda(n.make(), dir);
    EXPECT_FALSE(c.from_cache);
    EXPECT_TRUE(d.from_cache);
    EXPECT_EQ(c.cubin, a.cubin);
    EXPECT_EQ(d.cubin, a.cubin);
  }
  std::filesystem::remove_all(dir);
}

TEST(CudaCodegen, KernelSymbolEscapesOddNames) {
  EXPECT_EQ(cuda_kernel_symbol("rmsnorm_fwd"), "tilerun_rmsnorm_fwd");
  EXPECT_EQ(cuda_kernel_symbol("exp"), "tilerun_exp");
  std::string odd = cuda_kernel_symbol("attn/fwd (v2)*");
  EXPECT_TRUE(std::regex_match(odd, std::regex("tilerun_attn_fwd__v2___[0-9a-f]{8}"))) << odd;
  // Distinct names that sanitise alike stay distinct.
  EXPECT_NE(cuda_kernel_symbol("a.b"), cuda_kernel_symbol("a-b"));
  EXPECT_NE(cuda_kernel_symbol("a.b"), cuda_kernel_symbol("a_b"));
}

// A SIMT kernel built by hand, so its names can be anything the builder would refuse.
SimtKernel odd_names_kernel() {
  SimtKernel k;
  k.sig.name = "evil\nname\\ */ \"q\" {";
  k.sig.threads = 32;
  k.sig.dims.push_back({"float", {}});
  Expr n = Var::make(Type::I64, "float");
  k.sig.buffers.push_back({"in put", DType::F32, {n}, false});
  k.sig.buffers.push_back({"tr_add", DType::F32, {n}, true});
  k.sig.scalars.push_back({"threadIdx", Type::F32});
  k.sig.scalars.push_back({"1st", Type::I32});
  k.sig.grid.push_back(ceildiv(n, make_i64(32)));
  k.shared.push_back({"__shared__", DType::F32, {32}});
  k.locals.push_back({"x.y", Type::F32});
  Expr tid = Var::make(Type::I64, kThreadIdx);
  Expr i = add(mul(Var::make(Type::I64, kBlockIdx[0]), make_i64(32)), tid);
  Expr v = Load::make(Type::F32, "in put", {i});
  Stmt body = Seq::make({
      IfThenElse::make(lt(i, n), Store::make("__shared__", {tid}, v),
                       Store::make("__shared__", {tid}, make_f32(0.0f))),
      Barrier::make(),
      Assign::make("x.y", Binary::make(BinaryOp::Mul, Load::make(Type::F32, "__shared__", {tid}),
                                       Var::make(Type::F32, "threadIdx"))),
      IfThenElse::make(
          lt(i, n),
          LetStmt::make("int", Cast::make(Type::F32, Var::make(Type::I32, "1st")),
                        Store::make("tr_add", {i},
                                    Binary::make(BinaryOp::Add, Var::make(Type::F32, "x.y"),
                                                 Var::make(Type::F32, "int"))))),
  });
  k.body = body;
  return k;
}

TEST(CudaCodegen, OddNamesAreEscapedAndCompile) {
  SimtKernel k = odd_names_kernel();
  std::string src = emit_cuda(k);
  EXPECT_EQ(src.find("evil\n"), std::string::npos) << src;
  std::string first_line = src.substr(0, src.find('\n'));
  EXPECT_EQ(first_line.find("\\"), std::string::npos) << first_line;  // no line splice
  EXPECT_NE(first_line.find("evil%0Aname%5C"), std::string::npos) << first_line;
  EXPECT_EQ(src.find("in put"), std::string::npos);
  for (const char* ident : {"const float* in_put,", "float* __restrict__ vtr_add,",
                            "long long float_,", "float threadIdx_,", "int v1st)",
                            "float v__shared__[32]", "float x_y = 0.0f;", "const float int_ ="})
    EXPECT_NE(src.find(ident), std::string::npos) << ident << "\n" << src;
  CudaBinary bin = compile_cuda(k, "");
  EXPECT_EQ(bin.name, cuda_kernel_symbol(k.sig.name));
  EXPECT_NE(src.find("void __launch_bounds__(32) " + bin.name + "("), std::string::npos);
  EXPECT_NE(bin.cubin.find(bin.name), std::string::npos);
}

// Over 48 KiB the arrays move into one dynamic window, each at its offset (16-byte aligned,
// a swizzled tile 1024), and the binary carries the bytes the launch must pass.
TEST(CudaCodegen, SharedMemoryOver48KiBIsDynamic) {
  SimtKernel k = lower(tiled_matmul_kernel());
  ASSERT_EQ(cuda_dynamic_shared_bytes(k), 0);
  int64_t before = 0;
  for (const SimtArray& a : k.shared) before += dtype_bytes(a.dtype, a.size());
  k.shared.push_back({"big", DType::F32, {48 * 256}});
  const std::vector<int64_t> offsets = shared_offsets(k);
  ASSERT_EQ(offsets.size(), k.shared.size());
  EXPECT_EQ(offsets.front(), 0);
  EXPECT_EQ(offsets.back(), (before + 15) / 16 * 16);
  const int64_t bytes = cuda_dynamic_shared_bytes(k);
  EXPECT_EQ(bytes, offsets.back() + 48 * 1024);
  const std::string src = emit_cuda(k);
  EXPECT_NE(src.find("extern __shared__ __align__(1024) unsigned char tr_dynamic_smem[];"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("float* const big = reinterpret_cast<float*>(tr_dynamic_smem + " +
                     std::to_string(offsets.back()) + ");"),
            std::string::npos)
      << src;
  EXPECT_EQ(src.find("__shared__ __align__(16) float"), std::string::npos) << src;
  CudaBinary bin = compile_cuda(k, "");
  EXPECT_EQ(bin.dynamic_shared, bytes);
}

// An FP8 gemm lowers to wgmma's k32 instruction with each operand's format (e4m3 by e5m2 mixed),
// no transpose immediates, and NVRTC compiles it for sm_90a.
TEST(CudaCodegen, Fp8GemmLowersToWgmmaK32) {
  SimtKernel k = lower(testing::tensor_core_gemm_kernel(DType::F8E4M3, DType::F8E5M2));
  const std::string src = emit_cuda(k);
  EXPECT_NE(src.find("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2"), std::string::npos)
      << src;
  EXPECT_EQ(src.find("k16.f32"), std::string::npos) << src;
  CudaBinary bin = compile_cuda(k, "");
  EXPECT_FALSE(bin.cubin.empty());
}

// A gemm over f32 tiles lowers to wgmma's tf32 k8 instruction (four a 32-wide K step), no
// transpose immediates, and NVRTC compiles it for sm_90a.
TEST(CudaCodegen, Tf32GemmLowersToWgmmaK8) {
  SimtKernel k = lower(testing::tensor_core_gemm_kernel(DType::F32, DType::F32));
  const std::string src = emit_cuda(k);
  EXPECT_NE(src.find("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"), std::string::npos)
      << src;
  EXPECT_EQ(src.find("k16.f32"), std::string::npos) << src;
  CudaBinary bin = compile_cuda(k, "");
  EXPECT_FALSE(bin.cubin.empty());
}

TEST(CudaCodegen, SharedMemoryOverTheBlockLimitIsAnError) {
  SimtKernel k = lower(tiled_matmul_kernel());
  k.shared.push_back({"big", DType::F32, {227 * 256}});
  try {
    emit_cuda(k);
    FAIL() << "227 KiB more shared memory emitted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiled_matmul"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
  }
}

TEST(LaunchGeometry, GridsForRaggedSizes) {
  Kernel ew = ragged_elementwise_kernel();
  for (auto [n, blocks] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {255, 1}, {256, 1}, {257, 2}, {1000, 4}, {1024, 4}, {100001, 391}}) {
    LaunchGeometry g = launch_geometry(ew.sig, {n});
    EXPECT_EQ(g.grid, (std::array<int64_t, 3>{blocks, 1, 1})) << n;
    EXPECT_EQ(g.threads, 128);
    EXPECT_FALSE(g.empty());
  }
  Kernel mm = tiled_matmul_kernel();  // dims M, N, K; grid (ceildiv(N, 32), ceildiv(M, 32))
  LaunchGeometry g = launch_geometry(mm.sig, {70, 45, 37});
  EXPECT_EQ(g.grid, (std::array<int64_t, 3>{2, 3, 1}));
  EXPECT_EQ(g.blocks(), 6);
  g = launch_geometry(mm.sig, {33, 1, 1});
  EXPECT_EQ(g.grid, (std::array<int64_t, 3>{1, 2, 1}));
  Kernel red = row_reduction_kernel();  // grid (T)
  EXPECT_EQ(launch_geometry(red.sig, {7, 300}).grid, (std::array<int64_t, 3>{7, 1, 1}));
  EXPECT_EQ(launch_geometry(red.sig, {7, 300}).threads, 128);
}

TEST(LaunchGeometry, DimsAreChecked) {
  Kernel red = row_reduction_kernel();  // D in [1, 65536]
  EXPECT_THROW(launch_geometry(red.sig, {7}), Error);
  EXPECT_THROW(launch_geometry(red.sig, {7, 0}), Error);
  try {
    launch_geometry(red.sig, {7, 70000});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'D'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row_reduction"), std::string::npos) << e.what();
  }
  KernelSignature sig = red.sig;
  sig.dims[1].bounds.divisible_by = 4;
  EXPECT_THROW(launch_geometry(sig, {7, 30}), Error);
  EXPECT_NO_THROW(launch_geometry(sig, {7, 32}));
  // y beyond CUDA's 65535.
  Kernel mm = tiled_matmul_kernel();
  EXPECT_THROW(launch_geometry(mm.sig, {32 * 65536, 1, 1}), Error);
}

TEST(CudaParams, PackingMatchesTheSignature) {
  Kernel ew = ragged_elementwise_kernel();  // buffers x, y, yb; dim N; scalar a (f32)
  alignas(16) static float x[4], y[4];
  alignas(16) static uint16_t yb[4];
  KernelArgs args{{x, y, yb}, {1000}, {0.1}};
  CudaParams p = pack_cuda_params(ew.sig, args);
  ASSERT_EQ(p.slots().size(), 5u);
  const char* names[] = {"x", "y", "yb", "N", "a"};
  size_t offsets[] = {0, 8, 16, 24, 32}, sizes[] = {8, 8, 8, 8, 4};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(p.slots()[i].name, names[i]);
    EXPECT_EQ(p.slots()[i].offset, offsets[i]);
    EXPECT_EQ(p.slots()[i].size, sizes[i]);
  }
  EXPECT_EQ(p.size_bytes(), 36u);
  CudaParams moved = std::move(p);  // the pointers survive a move
  void** kp = moved.kernel_params();
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(kp[i], moved.data() + offsets[i]);
  uint64_t addr;
  std::memcpy(&addr, kp[0], 8);
  EXPECT_EQ(addr, reinterpret_cast<uintptr_t>(x));
  std::memcpy(&addr, kp[2], 8);
  EXPECT_EQ(addr, reinterpret_cast<uintptr_t>(yb));
  int64_t n;
  std::memcpy(&n, kp[3], 8);
  EXPECT_EQ(n, 1000);
  float a;
  std::memcpy(&a, kp[4], 4);
  EXPECT_EQ(a, 0.1f);  // rounded to nearest, as the CPU backend does

  // Mixed sizes: i32 and i64 scalars at their natural alignment.
  KernelBuilder kb("mixed_scalars");
  Dim N = kb.dim("N");
  Buf out = kb.output("out", DType::I64, {N});
  Val s32 = kb.scalar_i32("s32"), s64 = kb.scalar_i64("s64"), f = kb.scalar_f32("f");
  Val s32b = kb.scalar_i32("s32b");
  kb.body({N}, 32, [&](Scope& s) {
    s.parallel(1, [&](Idx) { out(s.block_idx(0)) = to_i64(s32 + s32b) + s64 + to_i64(f); });
  });
  Kernel ms = kb.build();
  alignas(16) static int64_t o[2];
  CudaParams q = pack_cuda_params(ms.sig, {{o}, {2}, {-5, 1e15, 2.5, 7}});
  size_t want[] = {0, 8, 16, 24, 32, 36};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(q.slots()[i].offset, want[i]) << i;
  int32_t i32;
  std::memcpy(&i32, q.kernel_params()[2], 4);
  EXPECT_EQ(i32, -5);
  int64_t i64;
  std::memcpy(&i64, q.kernel_params()[3], 8);
  EXPECT_EQ(i64, 1000000000000000);
  std::memcpy(&i32, q.kernel_params()[5], 4);
  EXPECT_EQ(i32, 7);
  // The source's parameter list is in the same order with the same types.
  std::string src = emit_cuda(lower(ms));
  EXPECT_NE(src.find("long long* __restrict__ out,"), std::string::npos) << src;
  size_t at = src.find("long long N,");
  ASSERT_NE(at, std::string::npos);
  at = src.find("int s32,", at);
  ASSERT_NE(at, std::string::npos);
  at = src.find("long long s64,", at);
  ASSERT_NE(at, std::string::npos);
  at = src.find("float f,", at);
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(src.find("int s32b) {", at), std::string::npos);
}

TEST(CudaParams, BadArgumentsAreErrors) {
  Kernel ew = ragged_elementwise_kernel();
  alignas(16) static float x[8], y[8];
  alignas(16) static uint16_t yb[8];
  EXPECT_THROW(pack_cuda_params(ew.sig, {{x, y}, {10}, {1.0}}), Error);            // count
  EXPECT_THROW(pack_cuda_params(ew.sig, {{x, y, yb}, {0}, {1.0}}), Error);         // dim bounds
  EXPECT_THROW(pack_cuda_params(ew.sig, {{x, nullptr, yb}, {10}, {1.0}}), Error);  // null
  char* misaligned = reinterpret_cast<char*>(y) + 2;
  EXPECT_THROW(pack_cuda_params(ew.sig, {{x, misaligned, yb}, {10}, {1.0}}), Error);
  EXPECT_NO_THROW(pack_cuda_params(ew.sig, {{x, y, reinterpret_cast<char*>(yb) + 2}, {10}, {1.0}}));

  KernelBuilder kb("int_scalar");
  Dim N = kb.dim("N");
  Buf out = kb.output("out", DType::I32, {N});
  Val k = kb.scalar_i32("k");
  kb.body({N}, 32, [&](Scope& s) { s.parallel(1, [&](Idx) { out(s.block_idx(0)) = k; }); });
  Kernel ik = kb.build();
  alignas(16) static int32_t o[4];
  EXPECT_THROW(pack_cuda_params(ik.sig, {{o}, {4}, {2.5}}), Error);
  EXPECT_THROW(pack_cuda_params(ik.sig, {{o}, {4}, {3e9}}), Error);
  EXPECT_NO_THROW(pack_cuda_params(ik.sig, {{o}, {4}, {-2147483648.0}}));
}

// A tma_copy of a [64, 64] box that starts 3 rows before the block's 64 (so block 0's box
// starts at row -3) into tile 1 of a two-tile stack under the 128B swizzle, waited for on
// mbarrier 1, then read back row by row: c[r, j] = a[r - 3, j] inside a, zero outside.
Kernel tma_box_kernel() {
  KernelBuilder kb("tma_box");
  Dim m = kb.dim("M"), k = kb.dim("K", {.min = 0, .max = 64, .divisible_by = 8});
  Val alpha = kb.scalar_f32("alpha");  // unused: the tensor map follows the scalars
  Buf a = kb.input("a", DType::BF16, {m, k});
  Buf c = kb.output("c", DType::BF16, {ceildiv(m, Val(64)) * 64, Val(64)});
  kb.body({ceildiv(m, Val(64))}, 128, [&](Scope& s) {
    Buf as = s.alloc_shared("As", DType::BF16, {2, 64, 64}, tensor_core_swizzle(128, 2));
    Buf full = s.alloc_shared("full", DType::I64, {2});
    Idx r0 = s.block_idx(0) * 64;
    s.mbarrier_init(full, 1);
    s.barrier();
    s.copy_tma(as.region({1, 0, 0}, {1, 64, 64}), a.region({r0 - 3, 0}, {64, 64}), full, Val(1));
    s.mbarrier_wait(full, Val(1), Val(0));
    s.parallel(64, 64, [&](Idx i, Idx j) { c(r0 + i, j) = as(1, i, j) + alpha * 0.0f; });
  });
  return kb.build();
}

TEST(TmaCopy, CpuCopiesTheBoxWithZerosOutside) {
  std::unique_ptr<CpuKernel> cpu = compile_cpu(tma_box_kernel());
  std::mt19937 rng(std::random_device{}());
  for (auto [m, k] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {64, 64}, {100, 40}, {130, 0}}) {
    std::vector<uint16_t> a(static_cast<size_t>(std::max<int64_t>(m * k, 1)));  // never null
    for (uint16_t& v : a) v = static_cast<uint16_t>(rng() & 0x7f7f);            // finite bf16 bits
    const int64_t rows = (m + 63) / 64 * 64;
    std::vector<uint16_t> c(static_cast<size_t>(rows * 64), 0xffff);
    cpu->launch({.buffers = {a.data(), c.data()}, .dims = {m, k}, .scalars = {1.0}});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 64; ++j) {
        const int64_t src = r - 3;
        const uint16_t want =
            src >= 0 && src < m && j < k ? a[static_cast<size_t>(src * k + j)] : 0;
        ASSERT_EQ(c[static_cast<size_t>(r * 64 + j)], want)
            << "M " << m << " K " << k << " at " << r << ", " << j;
      }
  }
}

TEST(TmaCopy, TensorMapsFollowTheScalarsAndEncodeTheShape) {
  SimtKernel k = lower(tma_box_kernel());
  const std::vector<TensorMapParam> maps = tensor_map_params(k);
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].buffer, 0);
  EXPECT_EQ(maps[0].box, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(maps[0].swizzle_bytes, 128);
  const std::string cu = emit_cuda(k);
  EXPECT_NE(cu.find("const __grid_constant__ tr_tensor_map"), std::string::npos);
  EXPECT_NE(cu.find("cp.async.bulk.tensor.2d"), std::string::npos);
  EXPECT_NE(cu.find("mbarrier.try_wait.parity"), std::string::npos);

  alignas(16) static uint16_t a[8], c[64];
  std::vector<int64_t> seen;
  CudaParams p = pack_cuda_params(
      k.sig, {{a, c}, {5, 16}, {0.5}}, maps,
      [&](const TensorMapParam& m, void* address, const std::vector<int64_t>& dims) {
        EXPECT_EQ(address, static_cast<void*>(a));
        EXPECT_EQ(m.box, maps[0].box);
        seen = dims;
        TensorMapBytes out;
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 7 + 1);
        return out;
      });
  EXPECT_EQ(seen, (std::vector<int64_t>{5, 16}));  // a's shape [M, K] at the launch's dims
  ASSERT_EQ(p.slots().size(), 6u);                 // a, c, M, K, alpha, the map
  EXPECT_EQ(p.slots()[5].offset, 64u);             // 64-byte aligned after alpha at 32
  EXPECT_EQ(p.slots()[5].size, 128u);
  EXPECT_EQ(p.size_bytes(), 192u);
  for (size_t i = 0; i < 128; ++i)
    ASSERT_EQ(static_cast<const std::byte*>(p.kernel_params()[5])[i],
              static_cast<std::byte>(i * 7 + 1));
  // A launcher that encodes no maps is refused, naming the kernel.
  try {
    pack_cuda_params(k.sig, {{a, c}, {5, 16}, {0.5}}, maps, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tma_box"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilerun::compiler
