#include "cuda/cuda_test_kernels.h"

#include "compiler/ir/builder.h"

namespace tilerun::compiler::cudatest {

Kernel ragged_elementwise_kernel() {
  KernelBuilder kb("ragged_elementwise");
  Dim N = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {N});
  Buf y = kb.output("y", DType::F32, {N});
  Buf yb = kb.output("yb", DType::BF16, {N});
  Val a = kb.scalar_f32("a");
  kb.body({ceildiv(N, 256)}, 128, [&](Scope& s) {
    Idx base = s.block_idx(0) * 256;
    s.parallel(256, [&](Idx i) {
      s.if_then(base + i < N, [&] {
        Val v = s.let(x(base + i), "v");
        Val r = s.let(v * sigmoid(1.702f * v) + a * tanh(v), "r");
        y(base + i) = r;
        yb(base + i) = r;
      });
    });
  });
  return kb.build();
}

Kernel row_reduction_kernel() {
  KernelBuilder kb("row_reduction");
  Dim T = kb.dim("T"), D = kb.dim("D", {.min = 1, .max = 1 << 16});
  Buf x = kb.input("x", DType::F32, {T, D});
  Buf stats = kb.output("stats", DType::F32, {T, 3});
  Buf y = kb.output("y", DType::F32, {T, D});
  kb.body({T}, 128, [&](Scope& s) {
    Idx row = s.block_idx(0);
    Val sum = s.reduce_sum(D, [&](Idx j) { return x(row, j); });
    Val mx = s.reduce_max(D, [&](Idx j) { return x(row, j); });
    Val mn = s.reduce_min(D, [&](Idx j) { return x(row, j); });
    Val inv = s.let(1.0f / sum, "inv");
    s.parallel(1, [&](Idx) {
      stats(row, 0) = sum;
      stats(row, 1) = mx;
      stats(row, 2) = mn;
    });
    s.parallel(D, [&](Idx j) { y(row, j) = x(row, j) * inv; });
  });
  return kb.build();
}

Kernel tiled_matmul_kernel() {
  constexpr int BM = 32, BN = 32, BK = 8;
  KernelBuilder kb("tiled_matmul");
  Dim M = kb.dim("M"), N = kb.dim("N"), K = kb.dim("K");
  Buf A = kb.input("A", DType::F32, {M, K}), B = kb.input("B", DType::F32, {K, N});
  Buf C = kb.output("C", DType::F32, {M, N});
  kb.body({ceildiv(N, BN), ceildiv(M, BM)}, 128, [&](Scope& s) {
    Idx bn = s.block_idx(0), bm = s.block_idx(1);
    Buf As = s.alloc_shared("As", DType::F32, {BM, BK});
    Buf Bs = s.alloc_shared("Bs", DType::F32, {BK, BN});
    Buf acc = s.alloc_fragment("acc", DType::F32, {BM, BN});
    s.parallel(BM, BN, [&](Idx i, Idx j) { acc(i, j) = 0.0f; });
    s.serial(ceildiv(K, BK), [&](Idx ko) {
      s.copy(As, A.region({bm * BM, ko * BK}, {BM, BK}));
      s.copy(Bs, B.region({ko * BK, bn * BN}, {BK, BN}));
      s.barrier();
      s.parallel(BM, BN, [&](Idx i, Idx j) {
        s.serial(BK, [&](Idx kk) { acc(i, j) = fma(As(i, kk), Bs(kk, j), acc(i, j)); });
      });
      s.barrier();
    });
    s.copy(C.region({bm * BM, bn * BN}, {BM, BN}), acc);
  });
  return kb.build();
}

Kernel bit_ops_kernel() {
  KernelBuilder kb("bit_ops");
  Dim N = kb.dim("N");
  Buf xf = kb.input("xf", DType::F32, {N});
  Buf xi = kb.input("xi", DType::I32, {N});
  Buf xl = kb.input("xl", DType::I64, {N});
  Buf oi = kb.output("oi", DType::I32, {N, 11});
  Buf ol = kb.output("ol", DType::I64, {N, 4});
  Buf of = kb.output("of", DType::F32, {N, 8});
  Buf ob = kb.output("ob", DType::U8, {N});
  kb.body({ceildiv(N, 64)}, 64, [&](Scope& s) {
    Idx n = s.block_idx(0) * 64;
    s.parallel(64, [&](Idx t) {
      Idx i = n + t;
      s.if_then(i < N, [&] {
        Val f = s.let(xf(i), "f");
        Val k = s.let(xi(i), "k");
        Val l = s.let(xl(i), "l");
        oi(i, 0) = to_i32(f);                                  // saturating, NaN → 0
        oi(i, 1) = to_i32(cast(Type::I8, f));                  // saturates at i8
        oi(i, 2) = to_i32(cast(Type::I16, f * 1000.0f));       // saturates at i16
        oi(i, 3) = k / -7 + k % 5;                             // floor division / modulo
        oi(i, 4) = k * 65537 + shl(k, literal(Type::I32, 7));  // wrapping
        oi(i, 5) = shr_logical(k, literal(Type::I32, 3)) ^ shr(k, literal(Type::I32, 5));
        oi(i, 6) = bitcast(Type::I32, f) ^ literal(Type::I32, 0x1234);
        oi(i, 7) = to_i32(shr_logical(cast(Type::I16, k), cast(Type::I16, 3)) * cast(Type::I16, 3));
        oi(i, 8) = to_i32(cast(Type::I8, k) / cast(Type::I8, -3));  // i8 floor division
        oi(i, 9) = to_i32(l % 1000003) - to_i32(l / -1000003 % 1000);
        // A lazy && whose right side reads memory inside a let (exp's expansion).
        oi(i, 10) = select(k > 0 && exp(xf(i)) > 2.0f, k, -k);
        ol(i, 0) = to_i64(f * 1e10f);  // saturates at i64
        ol(i, 1) =
            l * Val(int64_t{6364136223846793005}) + Val(int64_t{1442695040888963407});  // wraps
        ol(i, 2) = shr_logical(l, 11) - shr(l, 13) + to_i64(k);
        ol(i, 3) = l / 12345 * 7 + l % -99;
        of(i, 0) = min(f, -f);  // NaN, signed zeros
        of(i, 1) = max(f, 0.0f);
        of(i, 2) = -f;
        of(i, 3) = to_f32(k) + to_f32(l);  // int → f32 rounding
        of(i, 4) = bitcast(Type::F32, k);  // any bits, NaN canonicalised
        of(i, 5) = sqrt(f) / (f - 1.0f);
        of(i, 6) = fma(f, f, -1.0f) * 0.5f;
        of(i, 7) = select(f > 0.0f, exp(xf(i)), log(-f));  // an arm reads memory in a let
        ob(i) = k + 300;                                   // u8 truncation
      });
    });
  });
  return kb.build();
}

Kernel sin_cos_kernel() {
  KernelBuilder kb("sin_cos");
  Dim N = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {N});
  Buf sn = kb.output("s", DType::F32, {N}), cs = kb.output("c", DType::F32, {N});
  kb.body({ceildiv(N, 128)}, 128, [&](Scope& s) {
    Idx base = s.block_idx(0) * 128;
    s.parallel(128, [&](Idx j) {
      Idx i = base + j;
      s.if_then(i < N, [&] {
        Val hashed = bitcast(Type::F32, to_i32(i) * -1640531535);  // Knuth's 2654435761
        Val v = s.let(select(i % 2 == 0, x(i), hashed), "v");
        sn(i) = sin(v);
        cs(i) = cos(v);
      });
    });
  });
  return kb.build();
}

}  // namespace tilerun::compiler::cudatest
