// Malformed programs must be rejected with a message that says what is wrong: Tile IR by
// tilerun::Error (a kernel author's mistake), SIMT IR by simt_problem (a compiler bug).
#include <gtest/gtest.h>

#include <functional>

#include "compiler/ir/builder.h"
#include "compiler/ir/simt_verifier.h"
#include "compiler/lower.h"
#include "test_kernels.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

// Builds a 1-d kernel over N with the given body and expects an Error containing `message`,
// from the builder, the verifier, or lowering.
void expect_rejected(const std::function<void(Scope&, Buf& x, Buf& y, Val N)>& body,
                     const std::string& message, int threads = 32) {
  try {
    KernelBuilder kb("bad");
    Dim N = kb.dim("N");
    Buf x = kb.input("x", DType::F32, {N});
    Buf y = kb.output("y", DType::F32, {N});
    kb.body({1}, threads, [&](Scope& s) { body(s, x, y, N); });
    lower(kb.build());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "got: " << e.what();
    EXPECT_NE(std::string(e.what()).find("kernel 'bad'"), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "accepted a kernel that should fail with: " << message;
}

// FP8 wgmma reads both operands K-major: an N-major b (no trans_b), or a k that is no multiple of
// the instruction's 32, is refused with the reason; FP8 by bf16 is refused too.
TEST(TileVerifier, Fp8GemmOperandsMustBeKMajor) {
  auto gemm = [](DType a_dt, DType b_dt, std::vector<int64_t> b_shape, bool trans_b) {
    return [=](Scope& s, Buf&, Buf&, Val) {
      const Swizzle sw = tensor_core_swizzle(128, 1);
      Buf a = s.alloc_shared("a", a_dt, {64, 128}, sw), b = s.alloc_shared("b", b_dt, b_shape, sw);
      Buf acc = s.alloc_fragment("acc", DType::F32, {64, 64});
      s.parallel(64, 64, [&](Idx i, Idx j) { acc(i, j) = 0.0f; });
      s.gemm(acc, a, b, /*trans_a=*/false, trans_b);
    };
  };
  expect_rejected(gemm(DType::F8E4M3, DType::F8E4M3, {128, 64}, false),
                  "FP8 operands must both be K-major", 128);
  expect_rejected(gemm(DType::F8E4M3, DType::BF16, {64, 128}, true),
                  "must both be bf16, both f16, both FP8", 128);
}

// tf32 (f32 operands) likewise: both K-major, k a multiple of the instruction's 8; f32 by bf16
// is refused.
TEST(TileVerifier, Tf32GemmOperandsMustBeKMajor) {
  auto gemm = [](DType b_dt, std::vector<int64_t> b_shape, bool trans_a, bool trans_b) {
    return [=](Scope& s, Buf&, Buf&, Val) {
      const Swizzle sw = tensor_core_swizzle(128, 4);
      Buf a =
          s.alloc_shared("a", DType::F32,
                         trans_a ? std::vector<int64_t>{32, 64} : std::vector<int64_t>{64, 32}, sw);
      Buf b = s.alloc_shared("b", b_dt, b_shape, sw);
      Buf acc = s.alloc_fragment("acc", DType::F32, {64, 64});
      s.parallel(64, 64, [&](Idx i, Idx j) { acc(i, j) = 0.0f; });
      s.gemm(acc, a, b, trans_a, trans_b);
    };
  };
  expect_rejected(gemm(DType::F32, {32, 64}, false, false),
                  "f32 (tf32) operands must both be K-major", 128);
  expect_rejected(gemm(DType::F32, {64, 32}, true, true),
                  "f32 (tf32) operands must both be K-major", 128);
  expect_rejected(gemm(DType::BF16, {64, 32}, false, true), "or both f32 (read as tf32)", 128);
}

TEST(TileVerifier, BarrierInsideParallel) {
  expect_rejected([](Scope& s, Buf&, Buf& y, Val N) { s.parallel(N, [&](Idx i) { s.barrier(); }); },
                  "barrier inside parallel");
}

TEST(TileVerifier, BarrierInsideIf) {
  expect_rejected([](Scope& s, Buf&, Buf&, Val N) { s.if_then(N > 4, [&] { s.barrier(); }); },
                  "barrier inside if");
}

TEST(TileVerifier, ReduceInsideParallel) {
  expect_rejected(
      [](Scope& s, Buf& x, Buf& y, Val N) {
        s.parallel(N, [&](Idx i) { y(i) = s.reduce_sum(N, [&](Idx j) { return x(j); }); });
      },
      "reduce inside parallel");
}

TEST(TileVerifier, WriteToInput) {
  expect_rejected([](Scope& s, Buf& x, Buf&, Val N) { s.parallel(N, [&](Idx i) { x(i) = 1.0f; }); },
                  "write to input 'x'");
}

TEST(TileVerifier, FragmentOutsideParallel) {
  expect_rejected(
      [](Scope& s, Buf&, Buf&, Val) {
        Buf acc = s.alloc_fragment("acc", DType::F32, {32});
        acc(0) = 1.0f;
      },
      "fragment 'acc' outside a parallel loop");
}

TEST(TileVerifier, FragmentAtANonIdentityIndex) {
  expect_rejected(
      [](Scope& s, Buf&, Buf& y, Val) {
        Buf acc = s.alloc_fragment("acc", DType::F32, {32});
        s.parallel(32, [&](Idx i) { acc(i) = 1.0f; });
        s.parallel(32, [&](Idx i) { y(i) = acc(31 - i); });
      },
      "fragment 'acc' accessed at [(31 - i.");
}

TEST(Builder, IntegerConstantsFoldSoFragmentExtentsAreRecognised) {
  KernelBuilder kb("folded");
  Dim N = kb.dim("N");
  Buf y = kb.output("y", DType::F32, {N});
  kb.body({1}, 32, [&](Scope& s) {
    Buf acc = s.alloc_fragment("acc", DType::F32, {16});
    s.parallel(Val(8) * 2, [&](Idx i) { acc(i) = 1.0f; });
    s.parallel(16 + Val(0), [&](Idx i) { s.if_then(i < N, [&] { y(i) = acc(i); }); });
  });
  EXPECT_NO_THROW(lower(kb.build()));
}

TEST(TileVerifier, LoopIndexUsedOutsideItsLoop) {
  expect_rejected(
      [](Scope& s, Buf& x, Buf& y, Val N) {
        Val leaked;
        s.parallel(N, [&](Idx i) { leaked = i; });
        s.parallel(N, [&](Idx i) { y(i) = x(leaked); });
      },
      "outside its scope");
}

TEST(TileVerifier, ThreadsNotAPowerOfTwo) {
  expect_rejected([](Scope&, Buf&, Buf&, Val) {}, "power of two", 48);
}

TEST(Builder, TypeMismatchAndRank) {
  expect_rejected(
      [](Scope& s, Buf& x, Buf& y, Val N) { s.parallel(N, [&](Idx i) { y(i) = x(i) + N; }); },
      "operands of '+' have types f32 and i64");
  expect_rejected(
      [](Scope& s, Buf& x, Buf& y, Val N) { s.parallel(N, [&](Idx i) { y(i) = x(i, i); }); },
      "'x' has 1 dims, indexed with 2");
  expect_rejected(
      [](Scope& s, Buf& x, Buf& y, Val N) { s.parallel(N, [&](Idx i) { y(i) = to_i32(x(i)); }); },
      "storing i32 into 'y' of f32");
}

TEST(Builder, DuplicateNames) {
  try {
    KernelBuilder kb("dup");
    kb.dim("N");
    kb.input("N", DType::F32, {1});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'N' is already used"), std::string::npos) << e.what();
  }
}

// A minimal hand-made SIMT kernel: one output, 32 threads, grid [1].
SimtKernel simt_with_body(Stmt body) {
  SimtKernel k;
  k.sig.name = "hand";
  k.sig.threads = 32;
  k.sig.grid = {make_i64(1)};
  k.sig.buffers = {{"x", DType::F32, {make_i64(32)}, false},
                   {"y", DType::F32, {make_i64(32)}, true}};
  k.body = std::move(body);
  return k;
}

Expr tid() { return Var::make(Type::I64, kThreadIdx); }

TEST(SimtVerifier, AcceptsBarrierAtTopLevelAndInUniformLoops) {
  Stmt store = Store::make("y", {tid()}, Load::make(Type::F32, "x", {tid()}));
  Stmt body =
      Seq::make({store, Barrier::make(),
                 For::make("k", make_i64(0), make_i64(4), Seq::make({store, Barrier::make()}))});
  EXPECT_EQ(simt_problem(simt_with_body(body), SimtForm::Complete), "");
}

TEST(SimtVerifier, RejectsBarrierInPerThreadBranch) {
  Stmt body = IfThenElse::make(lt(tid(), make_i64(5)), Barrier::make());
  EXPECT_NE(simt_problem(simt_with_body(body), SimtForm::Complete).find("barrier inside if"),
            std::string::npos);
}

TEST(SimtVerifier, RejectsBarrierInLoopWithPerThreadTripCount) {
  Stmt body = For::make("k", make_i64(0), tid(), Barrier::make());
  EXPECT_NE(simt_problem(simt_with_body(body), SimtForm::Complete).find("trip count is per-thread"),
            std::string::npos);
}

TEST(SimtVerifier, RejectsPerThreadLetAcrossBarrier) {
  Stmt use = Store::make("y", {Var::make(Type::I64, "t")}, make_f32(1.0f));
  Stmt body = LetStmt::make("t", add(tid(), make_i64(1)), Seq::make({Barrier::make(), use}));
  EXPECT_NE(simt_problem(simt_with_body(body), SimtForm::Complete).find("lives across a barrier"),
            std::string::npos);
  // The same let with a block-uniform value is fine.
  Stmt uniform = LetStmt::make("t", make_i64(3), Seq::make({Barrier::make(), use}));
  EXPECT_EQ(simt_problem(simt_with_body(uniform), SimtForm::Complete), "");
}

TEST(SimtVerifier, RejectsStoreToInputAndUnexpandedMath) {
  Stmt to_input = Store::make("x", {tid()}, make_f32(1.0f));
  EXPECT_NE(simt_problem(simt_with_body(to_input), SimtForm::Complete).find("store to input 'x'"),
            std::string::npos);
  Stmt with_exp = Store::make("y", {tid()}, Call::make(CallOp::Exp, {make_f32(1.0f)}));
  EXPECT_NE(simt_problem(simt_with_body(with_exp), SimtForm::Complete)
                .find("survived expand_strict_math"),
            std::string::npos);
  EXPECT_EQ(simt_problem(simt_with_body(with_exp), SimtForm::Lowered), "");
}

TEST(SimtVerifier, RejectsUnboundNamesAndTileNodes) {
  Stmt unbound = Store::make("y", {Var::make(Type::I64, "nowhere")}, make_f32(1.0f));
  EXPECT_NE(simt_problem(simt_with_body(unbound), SimtForm::Complete)
                .find("'nowhere' used outside its scope"),
            std::string::npos);
  Stmt par = Parallel::make({"i"}, {make_i64(4)}, Barrier::make());
  EXPECT_NE(simt_problem(simt_with_body(par), SimtForm::Complete).find("parallel loop in SIMT IR"),
            std::string::npos);
}

TEST(SimtVerifier, EveryTestKernelLowersToValidSimt) {
  for (Kernel (*make)() :
       {testing::axpb_kernel, testing::softmax_kernel, testing::matmul_kernel,
        testing::dgamma_kernel, testing::mixed_dtype_kernel, testing::int_kernel}) {
    EXPECT_EQ(simt_problem(lower(make()), SimtForm::Complete), "");
  }
}

// copy_async needs a global input, a whole shared tile, 16-byte pieces and an async_wait.
TEST(TileVerifier, CopyAsyncMisuse) {
  auto build = [](bool from_output, int64_t cols, bool wait) {
    KernelBuilder kb("bad");
    Dim N = kb.dim("N", {.divisible_by = 8});
    Buf x = kb.input("x", DType::BF16, {N, N});
    Buf y = kb.output("y", DType::BF16, {N, N});
    kb.body({1}, 32, [&](Scope& s) {
      Buf t = s.alloc_shared("t", DType::BF16, {8, cols});
      s.copy_async(t, (from_output ? y : x).region({Val(int64_t{0}), Val(int64_t{0})}, {8, cols}));
      s.async_commit();
      if (wait) s.async_wait(0);
      s.barrier();
      s.parallel(8, cols, [&](Idx i, Idx j) { y(i, j) = t(i, j); });
    });
    return kb.build();
  };
  auto expect = [](const std::function<void()>& f, const std::string& message) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "got: " << e.what();
      return;
    }
    ADD_FAILURE() << "accepted: " << message;
  };
  EXPECT_NO_THROW(build(false, 16, true));
  expect([&] { build(true, 16, true); },
         "copy_async from 'y' to 't': the source must be a global input");
  expect([&] { build(false, 12, true); }, "the innermost extent must be a multiple of 8");
  expect([&] { build(false, 16, false); }, "copy_async whose copies are never waited for");
  expect(
      [&] {
        KernelBuilder kb("bad");
        kb.body({1}, 32, [&](Scope& s) { s.async_wait(8); });
      },
      "async_wait pending count 8 is outside 0..7");
}

}  // namespace
}  // namespace tilerun::compiler
