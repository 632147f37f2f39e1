// Layout inference (infer_layouts.h) and vector moves (vectorize_accesses.h): which width each
// parallel gets and why, that proved accesses move as vectors in the SIMT IR, the LLVM IR and
// the CUDA C++, and that every layout still computes the same values as a plain loop here.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/layout.h"
#include "compiler/lower.h"
#include "compiler/transforms/infer_layouts.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// y[e] = a * x[e] + 1 over N elements, `per_block` per block of 256 threads, tail guarded.
// `annotate` > 0 pins the parallel's width; `offset` shifts the read (x[e + offset]).
Kernel axpy(DType dtype, int64_t per_block, int annotate = 0, int64_t offset = 0) {
  KernelBuilder kb("axpy_" + std::string(dtype_name(dtype)));
  Dim n = kb.dim("N");
  Buf x = kb.input("x", dtype, {n + offset});
  Buf y = kb.output("y", dtype, {n});
  Val a = kb.scalar_f32("a");
  kb.body({ceildiv(n, per_block)}, 256, [&](Scope& s) {
    Idx base = s.block_idx(0) * per_block;
    if (annotate) s.annotate_layout(annotate);
    s.parallel(per_block, [&](Idx i) {
      Idx e = base + i;
      s.if_then(e < n, [&] { y(e) = a * x(e + offset) + 1.0f; });
    });
  });
  return kb.build();
}

struct Lowered {
  SimtKernel simt;
  std::vector<std::string> layouts;
  std::string text, ll, cu;
};

Lowered lower_at(const Kernel& k, std::map<std::string, int64_t> concrete) {
  Lowered l;
  LowerOptions o;
  o.analysis.concrete = std::move(concrete);
  o.layouts = &l.layouts;
  l.simt = lower(k, o);
  l.text = print(l.simt);
  l.ll = emit_llvm_ir(l.simt);
  l.cu = emit_cuda(l.simt);
  return l;
}

// Runs the lowered kernel on random inputs and compares with y = a*x + 1 computed here
// (through the same dtype rounding: f32 math, one rounding per operation).
void expect_axpy_values(const Lowered& l, DType dtype, int64_t n, int64_t offset = 0) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-4, 4);
  const float a = u(rng);
  std::vector<float> xf(n + offset);
  for (float& v : xf) v = u(rng);
  auto cpu = compile_cpu(l.simt);
  if (dtype == DType::F32) {
    std::vector<float> y(n, -7.0f);
    cpu->launch({.buffers = {xf.data(), y.data()}, .dims = {n}, .scalars = {a}});
    for (int64_t i = 0; i < n; ++i) {
      volatile float ax = a * xf[i + offset];
      ASSERT_EQ(y[i], ax + 1.0f) << i;
    }
    return;
  }
  // bf16: round x to bf16 bits (truncation is a valid bf16 value), compute in f32, round the
  // result to nearest even.
  auto to_bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return static_cast<uint16_t>(b >> 16);
  };
  auto from_bits = [](uint16_t h) {
    uint32_t b = uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  auto round_bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    b += 0x7fff + ((b >> 16) & 1);
    return static_cast<uint16_t>(b >> 16);
  };
  std::vector<uint16_t> x(n + offset), y(n, 0xffff);
  for (size_t i = 0; i < x.size(); ++i) x[i] = to_bits(xf[i]);
  cpu->launch({.buffers = {x.data(), y.data()}, .dims = {n}, .scalars = {a}});
  for (int64_t i = 0; i < n; ++i) {
    volatile float ax = a * from_bits(x[i + offset]);
    ASSERT_EQ(y[i], round_bits(ax + 1.0f)) << i;
  }
}

TEST(LayoutInference, ProvedAccessesMoveAsVectorsAtTheLaunchShape) {
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 1024 * std::uniform_int_distribution<int64_t>(1, 8)(rng);
  Lowered l = lower_at(axpy(DType::F32, 1024), {{"N", n}});
  ASSERT_EQ(l.layouts.size(), 1u);
  EXPECT_TRUE(has(l.layouts[0], "width 4, vector moves")) << l.layouts[0];
  EXPECT_TRUE(has(l.layouts[0], "(256,4,1):(4,1,1024)")) << l.layouts[0];
  EXPECT_TRUE(has(l.text, "for lane.0 in [0, 4) vectorized")) << l.text;
  EXPECT_TRUE(has(l.text, "+: 4]  // vector")) << l.text;
  EXPECT_TRUE(has(l.ll, "load <4 x float>")) << l.ll;
  EXPECT_TRUE(has(l.ll, "store <4 x float>")) << l.ll;
  EXPECT_TRUE(has(l.cu, "reinterpret_cast<const uint4*>(&x[")) << l.cu;
  // A register-to-global vector is an explicit 16-byte store (cuda_codegen's VectorMove).
  EXPECT_TRUE(has(l.cu, "st.global.v4.u32")) << l.cu;
  EXPECT_TRUE(has(l.cu, "\"l\"(&y[")) << l.cu;
  EXPECT_TRUE(has(l.cu, "#pragma unroll")) << l.cu;
  expect_axpy_values(l, DType::F32, n);
}

TEST(LayoutInference, NarrowTypesTakeTheWidestVectorThatFitsTheThreads) {
  // bf16 could move 8 lanes (16 bytes), but 1024 elements over 256 threads give each thread
  // 4: the width halves to 4 (8-byte moves) rather than leave threads idle.
  const int64_t n = 2048;
  Lowered l = lower_at(axpy(DType::BF16, 1024), {{"N", n}});
  EXPECT_TRUE(has(l.layouts[0], "width 4, vector moves, provable 8")) << l.layouts[0];
  EXPECT_TRUE(has(l.cu, "reinterpret_cast<const uint2*>(&x[")) << l.cu;
  expect_axpy_values(l, DType::BF16, n);
}

TEST(LayoutInference, UnprovedAccessesStayScalarAndCyclic) {
  // Symbolic N: the tail guard stays, so nothing can be hoisted: width 1, scalar.
  Lowered sym = lower_at(axpy(DType::F32, 1024), {});
  EXPECT_TRUE(has(sym.layouts[0], "width 1, scalar moves, provable 1")) << sym.layouts[0];
  EXPECT_FALSE(has(sym.text, "// vector")) << sym.text;
  expect_axpy_values(sym, DType::F32, 1000);
  // A read shifted by one element is never aligned: the parallel stays scalar.
  Lowered shifted = lower_at(axpy(DType::F32, 1024, 0, 1), {{"N", 2048}});
  EXPECT_FALSE(has(shifted.layouts[0], "vector moves")) << shifted.layouts[0];
  EXPECT_FALSE(has(shifted.cu, "reinterpret_cast<const uint4*>(&x[")) << shifted.cu;
  expect_axpy_values(shifted, DType::F32, 2048, 1);
}

TEST(LayoutInference, AnnotateLayoutOverridesInference) {
  // Width 1 although 4 is provable: cyclic, scalar.
  Lowered one = lower_at(axpy(DType::F32, 1024, 1), {{"N", 4096}});
  EXPECT_TRUE(has(one.layouts[0], "width 1 (annotated), scalar moves")) << one.layouts[0];
  EXPECT_FALSE(has(one.text, "// vector"));
  expect_axpy_values(one, DType::F32, 4096);
  // Width 2: 8-byte moves.
  Lowered two = lower_at(axpy(DType::F32, 1024, 2), {{"N", 4096}});
  EXPECT_TRUE(has(two.layouts[0], "width 2 (annotated), vector moves")) << two.layouts[0];
  EXPECT_TRUE(has(two.cu, "reinterpret_cast<const uint2*>(&x[")) << two.cu;
  expect_axpy_values(two, DType::F32, 4096);
  // Width 4 on a symbolic, unproved parallel: the layout is taken, the moves stay scalar.
  Lowered four = lower_at(axpy(DType::F32, 1024, 4), {});
  EXPECT_TRUE(has(four.layouts[0], "width 4 (annotated), scalar moves")) << four.layouts[0];
  EXPECT_TRUE(has(four.text, "for lane.0 in [0, 4) {")) << four.text;
  expect_axpy_values(four, DType::F32, 3001);
  // A width that does not divide the parallel is an error naming the kernel.
  try {
    lower(axpy(DType::F32, 6, 4));
    ADD_FAILURE() << "width 4 over 6 elements accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "axpy_f32")) << e.what();
    EXPECT_TRUE(has(e.what(), "does not divide")) << e.what();
  }
  EXPECT_THROW(
      {
        KernelBuilder kb("bad");
        kb.body({make_i64(1)}, 32, [&](Scope& s) { s.annotate_layout(3); });
      },
      Error);
}

TEST(LayoutInference, ParallelsSharingAFragmentShareAWidth) {
  // x → fragment (provable 4) then fragment → y under a guard on the element (not provable):
  // one width for both, or a thread would read a fragment element another thread holds.
  KernelBuilder kb("two_step");
  Dim n = kb.dim("N", {.min = 1, .max = 1 << 20, .divisible_by = 1024});
  Buf x = kb.input("x", DType::F32, {n});
  Buf y = kb.output("y", DType::F32, {n});
  kb.body({ceildiv(n, 1024)}, 256, [&](Scope& s) {
    Buf f = s.alloc_fragment("f", DType::F32, {1024});
    Idx base = s.block_idx(0) * 1024;
    s.parallel(1024, [&](Idx i) { f(i) = x(base + i) * 2.0f; });
    s.parallel(1024, [&](Idx i) { s.if_then(i % 3 != 1, [&] { y(base + i) = f(i) + 1.0f; }); });
  });
  Kernel k = kb.build();
  Lowered l = lower_at(k, {});
  ASSERT_EQ(l.layouts.size(), 3u);  // two parallels and the fragment
  EXPECT_TRUE(has(l.layouts[0], "width 4, vector moves")) << l.layouts[0];
  EXPECT_TRUE(has(l.layouts[1], "width 4, scalar moves")) << l.layouts[1];
  EXPECT_TRUE(has(l.layouts[2], "fragment f: width 4")) << l.layouts[2];
  const int64_t count = 3072;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> xs(count), ys(count, -9.0f);
  for (float& v : xs) v = u(rng);
  compile_cpu(l.simt)->launch({.buffers = {xs.data(), ys.data()}, .dims = {count}, .scalars = {}});
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(ys[i], i % 1024 % 3 != 1 ? xs[i] * 2.0f + 1.0f : -9.0f) << i;
}

TEST(LayoutInference, EveryWidthsLayoutDealsEachElementToOneThreadSlot) {
  // The printed layout is the mapping lower_parallel implements: a bijection from (thread,
  // local) slots onto [0, n) when T·W divides n, each thread's W elements consecutive.
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t threads = int64_t{1} << std::uniform_int_distribution<int>(0, 8)(rng);
    const int64_t width = int64_t{1} << std::uniform_int_distribution<int>(0, 4)(rng);
    const int64_t n = threads * width * std::uniform_int_distribution<int64_t>(1, 5)(rng);
    Layout l = fragment_layout(n, threads, width);
    ASSERT_EQ(l.size(), n);
    std::set<int64_t> seen;
    for (int64_t t = 0; t < threads; ++t) {
      for (int64_t local = 0; local < n / threads; ++local) {
        int64_t e = l(t + threads * local);  // colexicographic: thread fastest
        ASSERT_EQ(e, ((local / width) * threads + t) * width + local % width);
        seen.insert(e);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
}

}  // namespace
}  // namespace tilerun::compiler

namespace tilerun::compiler {
namespace {

// y[b, t] = sum over c of sh[t * 4 * stride + c + offset] * (c + 1), sh filled from x: four
// loads of consecutive shared elements per thread, aligned when offset is a multiple of 4.
Kernel dot4(int64_t offset) {
  KernelBuilder kb("dot4_" + std::to_string(offset));
  Dim n = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {n, 2048});
  Buf y = kb.output("y", DType::F32, {n, 256});
  kb.body({n}, 256, [&](Scope& s) {
    Buf sh = s.alloc_shared("sh", DType::F32, {2048});
    Idx b = s.block_idx(0);
    s.parallel(2048, [&](Idx i) { sh(i) = x(b, i); });
    s.barrier();
    s.parallel(256, [&](Idx t) {
      Idx base = t * 4 + offset;
      Val v0 = s.let(sh(base), "v"), v1 = s.let(sh(base + 1), "v");
      Val v2 = s.let(sh(base + 2), "v"), v3 = s.let(sh(base + 3), "v");
      y(b, t) = v0 + v1 * 2.0f + v2 * 3.0f + v3 * 4.0f;
    });
  });
  return kb.build();
}

TEST(VectorizeSharedLoads, AlignedRunsOfSharedLoadsBecomeOneMove) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-2, 2);
  for (int64_t offset : {0, 4, 1, 2}) {
    SimtKernel simt = lower(dot4(offset));
    std::string text = print(simt), cu = emit_cuda(simt);
    // Loads at base + offset + {0, 1, 2, 3}: one 16-byte move when that is a multiple of 4;
    // otherwise 8-byte moves for the aligned pairs inside it (offset 1: lanes 1-2, offset 2:
    // lanes 0-1 and 2-3).
    const bool four = offset % 4 == 0;
    const int pairs = four ? 0 : offset % 2 == 0 ? 2 : 1;
    auto count = [](const std::string& text, const std::string& what) {
      int n = 0;
      for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
      return n;
    };
    EXPECT_EQ(count(text, "[0 +: 4] = sh["), four ? 1 : 0) << offset << "\n" << text;
    EXPECT_EQ(count(text, "[0 +: 2] = sh["), pairs) << offset << "\n" << text;
    EXPECT_EQ(count(cu, "ld.shared.v4.u32"), four ? 1 : 0) << offset << "\n" << cu;
    EXPECT_EQ(count(cu, "ld.shared.v2.u32"), pairs) << offset;
    // The values, against the same sums computed here in the same order.
    const int64_t n = 3;
    std::vector<float> x(n * 2048), y(n * 256, -1.0f);
    for (float& v : x) v = u(rng);
    compile_cpu(simt)->launch({.buffers = {x.data(), y.data()}, .dims = {n}, .scalars = {}});
    for (int64_t b = 0; b < n; ++b)
      for (int64_t t = 0; t < 256; ++t) {
        const float* r = &x[b * 2048 + t * 4 + offset];
        volatile float p1 = r[1] * 2.0f, p2 = r[2] * 3.0f, p3 = r[3] * 4.0f;
        volatile float s1 = r[0] + p1;
        volatile float s2 = s1 + p2;
        ASSERT_EQ(y[b * 256 + t], s2 + p3) << offset << " " << b << " " << t;
      }
  }
}

}  // namespace
}  // namespace tilerun::compiler

namespace tilerun::compiler {
namespace {

// A store into the tile between the second and third load: the third must see it, so the four
// loads may not become one move; the pair before the store and the pair after it still may.
TEST(VectorizeSharedLoads, AStoreBetweenLoadsSplitsTheRun) {
  KernelBuilder kb("fenced");
  Dim n = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {n, 1024});
  Buf y = kb.output("y", DType::F32, {n, 256});
  kb.body({n}, 256, [&](Scope& s) {
    Buf sh = s.alloc_shared("sh", DType::F32, {1024});
    Idx b = s.block_idx(0);
    s.parallel(1024, [&](Idx i) { sh(i) = x(b, i); });
    s.barrier();
    s.parallel(256, [&](Idx t) {
      Idx base = t * 4;
      Val v0 = s.let(sh(base), "v"), v1 = s.let(sh(base + 1), "v");
      sh(base + 2) = v0 + v1;
      Val v2 = s.let(sh(base + 2), "v"), v3 = s.let(sh(base + 3), "v");
      y(b, t) = v2 * v3;
    });
  });
  SimtKernel simt = lower(kb.build());
  std::string text = print(simt);
  EXPECT_FALSE(has(text, "[0 +: 4] = sh[")) << text;
  EXPECT_TRUE(has(text, "sh.v.0[0 +: 2] = sh[")) << text;
  EXPECT_TRUE(has(text, "sh.v.1[0 +: 2] = sh[")) << text;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-2, 2);
  const int64_t count = 2;
  std::vector<float> xs(count * 1024), ys(count * 256, -1.0f);
  for (float& v : xs) v = u(rng);
  compile_cpu(simt)->launch({.buffers = {xs.data(), ys.data()}, .dims = {count}, .scalars = {}});
  for (int64_t b = 0; b < count; ++b)
    for (int64_t t = 0; t < 256; ++t) {
      const float* r = &xs[b * 1024 + t * 4];
      volatile float stored = r[0] + r[1];
      ASSERT_EQ(ys[b * 256 + t], stored * r[3]) << b << " " << t;
    }
}

}  // namespace
}  // namespace tilerun::compiler
