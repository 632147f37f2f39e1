#include "test_kernels.h"

#include "compiler/ir/builder.h"
#include "compiler/transforms/narrow_float.h"

namespace tilerun::compiler::testing {

Kernel axpb_kernel() {
  KernelBuilder kb("axpb");
  Dim N = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {N});
  Buf y = kb.output("y", DType::F32, {N});
  Val a = kb.scalar_f32("a"), b = kb.scalar_f32("b");
  kb.body({ceildiv(N, 256)}, 128, [&](Scope& s) {
    Idx base = s.block_idx(0) * 256;
    s.parallel(256,
               [&](Idx i) { s.if_then(base + i < N, [&] { y(base + i) = a * x(base + i) + b; }); });
  });
  return kb.build();
}

Kernel math_kernel() {
  KernelBuilder kb("math");
  Dim N = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {N});
  Buf y = kb.output("y", DType::F32, {N});
  kb.body({ceildiv(N, 64)}, 64, [&](Scope& s) {
    Idx i = s.block_idx(0) * 64;
    s.parallel(64, [&](Idx j) {
      s.if_then(i + j < N, [&] {
        Val v = s.let(x(i + j), "v");
        y(i + j) = sigmoid(v) * tanh(v) + exp(-abs(v)) + log(abs(v) + 1.0f) + rsqrt(abs(v) + 1.0f) +
                   max(v, 0.0f) - min(v, 0.5f);
      });
    });
  });
  return kb.build();
}

Kernel mixed_dtype_kernel() {
  KernelBuilder kb("mixed_dtype");
  Dim N = kb.dim("N", {.min = 1, .max = 1 << 20, .divisible_by = 4});
  Buf x = kb.input("x", DType::BF16, {N});
  Buf h = kb.input("h", DType::F16, {N});
  Buf y = kb.output("y", DType::BF16, {N});
  Buf z = kb.output("z", DType::F16, {N});
  Val sc = kb.scalar_f32("scale");
  kb.body({ceildiv(N, 32)}, 32, [&](Scope& s) {
    Idx base = s.block_idx(0) * 32;
    s.parallel(32, [&](Idx i) {
      s.if_then(base + i < N, [&] {
        y(base + i) = x(base + i) * sc + h(base + i);
        z(base + i) = x(base + i) - h(base + i) * sc;
      });
    });
  });
  return kb.build();
}

Kernel narrow_float_kernel() {
  KernelBuilder kb("narrow_float");
  Dim N = kb.dim("N");
  Buf c4 = kb.input("c4", DType::F8E4M3, {N}), c5 = kb.input("c5", DType::F8E5M2, {N});
  Buf cs = kb.input("cs", DType::E8M0, {N}), x = kb.input("x", DType::F32, {N});
  Buf d4 = kb.output("d4", DType::F32, {N}), d5 = kb.output("d5", DType::F32, {N});
  Buf ds = kb.output("ds", DType::F32, {N});
  Buf q4 = kb.output("q4", DType::F8E4M3, {N}), q5 = kb.output("q5", DType::F8E5M2, {N});
  Buf qs = kb.output("qs", DType::E8M0, {N});
  kb.body({ceildiv(N, 128)}, 128, [&](Scope& s) {
    Idx base = s.block_idx(0) * 128;
    s.parallel(128, [&](Idx i) {
      s.if_then(base + i < N, [&] {
        d4(base + i) = c4(base + i);
        d5(base + i) = c5(base + i);
        ds(base + i) = cs(base + i);
        q4(base + i) = x(base + i);
        q5(base + i) = x(base + i);
        qs(base + i) = x(base + i);
      });
    });
  });
  return kb.build();
}

Kernel fp4_kernel() {
  KernelBuilder kb("fp4_codes");
  Dim N = kb.dim("N");
  Buf c = kb.input("c", DType::I32, {N}), x = kb.input("x", DType::F32, {N});
  Buf d = kb.output("d", DType::F32, {N}), q = kb.output("q", DType::I32, {N});
  kb.body({ceildiv(N, 128)}, 128, [&](Scope& s) {
    Idx base = s.block_idx(0) * 128;
    s.parallel(128, [&](Idx i) {
      s.if_then(base + i < N, [&] {
        d(base + i) = Val(narrow_float_to_f32(DType::FP4E2M1, c(base + i).expr(), "dec"));
        q(base + i) = Val(f32_to_narrow_float(DType::FP4E2M1, x(base + i).expr(), "enc"));
      });
    });
  });
  return kb.build();
}

Kernel narrow_round_kernel() {
  KernelBuilder kb("narrow_round");
  Dim N = kb.dim("N");
  Buf x = kb.input("x", DType::F32, {N});
  const DType formats[] = {DType::F8E4M3, DType::F8E5M2, DType::FP4E2M1};
  std::vector<Buf> fast, slow;
  for (int f = 0; f < 3; ++f) {
    fast.push_back(kb.output("fast" + std::to_string(f), DType::F32, {N}));
    slow.push_back(kb.output("slow" + std::to_string(f), DType::F32, {N}));
  }
  kb.body({ceildiv(N, 128)}, 128, [&](Scope& s) {
    Idx base = s.block_idx(0) * 128;
    s.parallel(128, [&](Idx i) {
      s.if_then(base + i < N, [&] {
        for (int f = 0; f < 3; ++f) {
          fast[f](base + i) = Val(round_to_narrow_float(formats[f], x(base + i).expr(), "r"));
          Val code(f32_to_narrow_float(formats[f], x(base + i).expr(), "enc"));
          slow[f](base + i) = Val(narrow_float_to_f32(formats[f], code.expr(), "dec"));
        }
      });
    });
  });
  return kb.build();
}

Kernel softmax_kernel() {
  KernelBuilder kb("softmax");
  Dim T = kb.dim("T"), D = kb.dim("D", {.min = 1, .max = 1 << 16});
  Buf x = kb.input("x", DType::F32, {T, D});
  Buf y = kb.output("y", DType::F32, {T, D});
  kb.body({T}, 64, [&](Scope& s) {
    Idx row = s.block_idx(0);
    Val m = s.reduce_max(D, [&](Idx j) { return x(row, j); });
    Val sum = s.reduce_sum(D, [&](Idx j) { return exp(x(row, j) - m); });
    Val inv = s.let(1.0f / sum, "inv");
    s.parallel(D, [&](Idx j) { y(row, j) = exp(x(row, j) - m) * inv; });
  });
  return kb.build();
}

Kernel rmsnorm_kernel() {
  KernelBuilder kb("rmsnorm_fwd");
  Dim T = kb.dim("T"), D = kb.dim("D", {.min = 1, .max = 1 << 16});
  Buf x = kb.input("x", DType::F32, {T, D}), g = kb.input("gamma", DType::F32, {D});
  Buf y = kb.output("y", DType::F32, {T, D});
  Val eps = kb.scalar_f32("eps");
  kb.body(/*grid=*/{T}, /*threads=*/128, [&](Scope& s) {
    Idx row = s.block_idx(0);
    Val ss = s.reduce_sum(D, [&](Idx j) {
      Val v = x(row, j);
      return v * v;
    });
    Val r = rsqrt(ss / to_f32(D) + eps);
    s.parallel(D, [&](Idx j) { y(row, j) = x(row, j) * r * g(j); });
  });
  return kb.build();
}

Kernel dgamma_kernel() {
  constexpr int BD = 64;
  KernelBuilder kb("rmsnorm_dgamma");
  Dim T = kb.dim("T"), D = kb.dim("D");
  Buf dy = kb.input("dy", DType::F32, {T, D}), x = kb.input("x", DType::F32, {T, D});
  Buf rstd = kb.input("rstd", DType::F32, {T});
  Buf dg = kb.output("dgamma", DType::F32, {D});
  kb.body({ceildiv(D, BD)}, 32, [&](Scope& s) {
    Idx c0 = s.block_idx(0) * BD;
    Buf acc = s.alloc_fragment("acc", DType::F32, {BD});
    s.parallel(BD, [&](Idx j) { acc(j) = 0.0f; });
    s.serial(T, [&](Idx t) {
      s.parallel(BD, [&](Idx j) {
        s.if_then(c0 + j < D, [&] { acc(j) = fma(dy(t, c0 + j) * x(t, c0 + j), rstd(t), acc(j)); });
      });
    });
    s.parallel(BD, [&](Idx j) { s.if_then(c0 + j < D, [&] { dg(c0 + j) = acc(j); }); });
  });
  return kb.build();
}

Kernel matmul_kernel() {
  constexpr int BM = 16, BN = 16, BK = 8;
  KernelBuilder kb("matmul");
  Dim M = kb.dim("M"), N = kb.dim("N"), K = kb.dim("K");
  Buf A = kb.input("a", DType::F32, {M, K}), B = kb.input("b", DType::F32, {K, N});
  Buf C = kb.output("c", DType::F32, {M, N});
  kb.body({ceildiv(N, BN), ceildiv(M, BM)}, 64, [&](Scope& s) {
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

Kernel tensor_core_gemm_kernel(DType da, DType db) {
  // A K-major tile row is one 128-byte swizzle row: 64 elements of 16 bits, 128 of FP8.
  const int64_t eb = dtype_bytes(da, 1), kt = 128 / eb;
  KernelBuilder kb("tc_gemm_" + std::string(dtype_name(da)) + "_" + std::string(dtype_name(db)));
  Dim m = kb.dim("M"), n = kb.dim("N"), k = kb.dim("K");
  Buf a = kb.input("a", da, {m, k}), b = kb.input("b", db, {n, k});
  Buf c = kb.output("c", DType::F32, {m, n});
  kb.body({ceildiv(n, 128), ceildiv(m, 128)}, 256, [&](Scope& s) {
    Idx bx = s.block_idx(0), by = s.block_idx(1);
    const Swizzle sw = tensor_core_swizzle(128, static_cast<int>(eb));
    Buf as = s.alloc_shared("As", da, {128, kt}, sw), bs = s.alloc_shared("Bs", db, {128, kt}, sw);
    Buf acc = s.alloc_fragment("acc", DType::F32, {128, 128});
    s.parallel(128, 128, [&](Idx i, Idx j) { acc(i, j) = 0.0f; });
    s.serial(ceildiv(k, Val(kt)), [&](Idx ko) {
      s.copy(as, a.region({by * 128, ko * kt}, {128, kt}));
      s.copy(bs, b.region({bx * 128, ko * kt}, {128, kt}));
      s.barrier();
      s.gemm(acc, as, bs, /*trans_a=*/false, /*trans_b=*/true);
      s.barrier();
    });
    s.copy(c.region({by * 128, bx * 128}, {128, 128}), acc);
  });
  return kb.build();
}

Kernel transpose_kernel() {
  constexpr int B = 32;
  KernelBuilder kb("transpose");
  Dim R = kb.dim("R"), C = kb.dim("C");
  Buf x = kb.input("x", DType::F32, {R, C});
  Buf y = kb.output("y", DType::F32, {C, R});
  kb.body({ceildiv(C, B), ceildiv(R, B)}, 128, [&](Scope& s) {
    Idx c0 = s.block_idx(0) * B, r0 = s.block_idx(1) * B;
    Buf tile = s.alloc_shared("tile", DType::F32, {B, B});
    Buf frag = s.alloc_fragment("frag", DType::F32, {B, B});
    s.copy(tile, x.region({r0, c0}, {B, B}));
    s.barrier();
    // Thread t holds element (i, j) of the transposed tile: tile[j, i].
    s.parallel(B, B, [&](Idx i, Idx j) { frag(i, j) = tile(j, i); });
    s.parallel(B, B, [&](Idx i, Idx j) {
      s.if_then(c0 + i < C && r0 + j < R, [&] { y(c0 + i, r0 + j) = frag(i, j); });
    });
  });
  return kb.build();
}

Kernel int_kernel() {
  KernelBuilder kb("int_ops");
  Dim T = kb.dim("T"), D = kb.dim("D");
  Buf x = kb.input("x", DType::I32, {T, D});
  Buf y = kb.output("y", DType::I32, {T, D});
  Buf q = kb.output("q", DType::I64, {T, D});
  kb.body({T}, 32, [&](Scope& s) {
    Idx row = s.block_idx(0);
    Val total = s.reduce_sum(D, [&](Idx j) { return x(row, j); });
    Val lo = s.reduce_min(D, [&](Idx j) { return x(row, j); });
    s.parallel(D, [&](Idx j) {
      y(row, j) = x(row, j) * 3 + total - lo;
      q(row, j) = to_i64(x(row, j)) / 7 + to_i64(x(row, j)) % 5 * 1000;
    });
  });
  return kb.build();
}

}  // namespace tilerun::compiler::testing
