// Matrix multiplication, with optional transposes of either operand.
#include "compiler/builder.h"
#include "kernels/expand_util.h"
#include "kernels/families.h"
#include "kernels/kernel_cache.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// c[M,N] = op(a)[M,K] * op(b)[K,N], op = optional transpose.
std::vector<TensorType> infer_matmul(const std::vector<TensorType>& in, const Attrs& attrs) {
  expect_float(in[0], "a");
  expect_rank(in[0], 2, "a");
  expect_float(in[1], "b");
  expect_rank(in[1], 2, "b");
  if (in[1].dtype != in[0].dtype)
    throw ShapeError("input 'b' is " + to_string(in[1]) + ", expected dtype " +
                     std::string(dtype_name(in[0].dtype)) + " like 'a'");
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  int64_t m = ta ? in[0].shape[1] : in[0].shape[0];
  int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
  int64_t kb = tb ? in[1].shape[1] : in[1].shape[0];
  int64_t n = tb ? in[1].shape[0] : in[1].shape[1];
  if (k != kb)
    throw ShapeError("input 'b' is " + to_string(in[1]) + ", expected " + std::to_string(k) +
                     (tb ? " columns" : " rows") + " to match the inner dim of 'a' " +
                     to_string(in[0]));
  return {TensorType{in[0].dtype, {m, n}}};
}

// Element (i, j) of op(t) for a row-major matrix t.
double at(const RefTensor& t, bool transposed, int64_t i, int64_t j) {
  return transposed ? t.data[j * t.shape[1] + i] : t.data[i * t.shape[1] + j];
}

std::vector<RefTensor> ref_matmul(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const RefTensor &a = in[0], &b = in[1];
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  int64_t n = tb ? b.shape[0] : b.shape[1];
  RefTensor c = ref_zeros({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at(a, ta, i, p) * at(b, tb, p, j);
      c.data[i * n + j] = s;
    }
  return {c};
}

GradOp matmul_op(std::string a, std::string b, bool ta, bool tb, std::string out) {
  return {"matmul",
          {std::move(a), std::move(b)},
          {std::move(out)},
          {{"transpose_a", ta}, {"transpose_b", tb}}};
}

// With A' = op(a), B' = op(b) and C = A'B':  dA' = dC B'^T,  dB' = A'^T dC. A transposed operand
// gets the transpose of its gradient, (dA')^T = B' dC^T and (dB')^T = dC^T A', so every case is
// one matmul whose transpose flags absorb op().
std::vector<GradOp> grad_matmul(const std::vector<TensorType>&, const Attrs& attrs,
                                const std::vector<bool>& needs) {
  bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  std::vector<GradOp> ops;
  if (needs[0])
    ops.push_back(ta ? matmul_op("x1", "dy0", tb, true, "dx0")      // a = A'^T: B' dC^T
                     : matmul_op("dy0", "x1", false, !tb, "dx0"));  // a = A': dC B'^T
  if (needs[1])
    ops.push_back(tb ? matmul_op("dy0", "x0", true, ta, "dx1")      // b = B'^T: dC^T A'
                     : matmul_op("x0", "dy0", !ta, false, "dx1"));  // b = B': A'^T dC
  return ops;
}

// ---- Tile kernel ---------------------------------------------------------------------------

// A 32x32 output tile per block of 128 threads (8 outputs each), K in steps of 8.
constexpr int64_t kBM = 32, kBN = 32, kBK = 8;
constexpr int kThreads = 128;

// "matmul_nt": transposes of a and b as BLAS spells them (n: as stored, t: transposed).
std::string matmul_name(bool ta, bool tb) {
  return std::string("matmul_") + (ta ? "t" : "n") + (tb ? "t" : "n");
}

// c = op(a) op(b) for one pair of transpose flags. Parameters: a, b, c; M, N, K. Each K step
// copies a tile of a and of b into shared memory in their stored orientation (so the global
// reads run along memory rows whatever the flags) and the fma loop indexes them transposed.
// Ragged edges need no guard: copies read zeros outside the tensors and never write outside c.
// Every c element is one fma chain in k order: the same bits whatever the grid.
cc::Kernel build_matmul(DType dtype, bool ta, bool tb) {
  cc::KernelBuilder kb(matmul_name(ta, tb) + "_" + std::string(dtype_name(dtype)));
  cc::Dim m = kb.dim("M"), n = kb.dim("N"), k = kb.dim("K");
  cc::Buf a = kb.input("a", dtype, ta ? std::vector<cc::Val>{k, m} : std::vector<cc::Val>{m, k});
  cc::Buf b = kb.input("b", dtype, tb ? std::vector<cc::Val>{n, k} : std::vector<cc::Val>{k, n});
  cc::Buf c = kb.output("c", dtype, {m, n});
  kb.body({cc::ceildiv(n, kBN), cc::ceildiv(m, kBM)}, kThreads, [&](cc::Scope& s) {
    cc::Idx bn = s.block_idx(0), bm = s.block_idx(1);
    cc::Buf as =
        s.alloc_shared("As", DType::F32, ta ? std::vector{kBK, kBM} : std::vector{kBM, kBK});
    cc::Buf bs =
        s.alloc_shared("Bs", DType::F32, tb ? std::vector{kBN, kBK} : std::vector{kBK, kBN});
    cc::Buf acc = s.alloc_fragment("acc", DType::F32, {kBM, kBN});
    s.parallel(kBM, kBN, [&](cc::Idx i, cc::Idx j) { acc(i, j) = 0.0f; });
    s.serial(cc::ceildiv(k, kBK), [&](cc::Idx ko) {
      s.copy(as, ta ? a.region({ko * kBK, bm * kBM}, {kBK, kBM})
                    : a.region({bm * kBM, ko * kBK}, {kBM, kBK}));
      s.copy(bs, tb ? b.region({bn * kBN, ko * kBK}, {kBN, kBK})
                    : b.region({ko * kBK, bn * kBN}, {kBK, kBN}));
      s.barrier();
      s.parallel(kBM, kBN, [&](cc::Idx i, cc::Idx j) {
        s.serial(kBK, [&](cc::Idx kk) {
          cc::Val av = ta ? as(kk, i) : as(i, kk), bv = tb ? bs(j, kk) : bs(kk, j);
          acc(i, j) = cc::fma(av, bv, acc(i, j));
        });
      });
      s.barrier();  // the next step's copies overwrite the tiles
    });
    s.copy(c.region({bm * kBM, bn * kBN}, {kBM, kBN}), acc);
  });
  return kb.build();
}

ExpandFn expand_matmul(std::shared_ptr<KernelCache> cache) {
  return [cache](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                 const Attrs& attrs) {
    DType dt = out[0].dtype;
    bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
    int64_t k = ta ? in[0].shape[0] : in[0].shape[1];
    KernelCall call{.kernel = cache->get(kernel_key(matmul_name(ta, tb), dt),
                                         [&] { return build_matmul(dt, ta, tb); }),
                    .buffers = {input_slot(0), input_slot(1), output_slot(0)},
                    .dims = {out[0].shape[0], out[0].shape[1], k}};
    return OpExpansion{.calls = {call}};
  };
}

}  // namespace

void register_matmul(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "matmul",
                .doc = "c = op(a) @ op(b), op = optional transpose",
                .inputs = {"a", "b"},
                .outputs = {"c"},
                .attrs = {{.name = "transpose_a",
                           .kind = AttrKind::Bool,
                           .default_value = AttrValue{false},
                           .doc = "use a^T"},
                          {.name = "transpose_b",
                           .kind = AttrKind::Bool,
                           .default_value = AttrValue{false},
                           .doc = "use b^T"}},
                .infer = infer_matmul,
                .reference = ref_matmul,
                .gradient = grad_matmul,
                .expand = expand_matmul(cache)});
}

}  // namespace tilerun::kernels
