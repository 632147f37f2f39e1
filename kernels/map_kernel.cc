#include "kernels/map_kernel.h"

#include "kernels/whole_or_guarded.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

// 256 threads per block. A tensor of fewer than kManyElements elements takes one element per
// thread, so that even a small one spreads over many blocks (and SMs); a larger one takes 4 per
// thread (1024 per block), enough work to amortise a block's start-up. Either way each element
// is computed alone, so the choice never changes a result.
constexpr int kThreads = 256;
constexpr int64_t kManyElements = int64_t{1} << 16;
int64_t per_thread(int64_t n) { return n < kManyElements ? 1 : 4; }

std::string map_name(const MapOp& op, int64_t ept) {
  return ept == 1 ? op.name : op.name + "_x" + std::to_string(ept);
}

// out[e] = fn(in0[e], in1[e], ..., scalars) for e in [0, N), `ept` elements per thread. N, the
// flat element count, may pass 2^31 (its index arithmetic is 64-bit): up to the 2^40 elements
// graph/expand.cc allows a tensor.
cc::Kernel build_map(const MapOp& op, const std::vector<DType>& in_dtypes, DType out_dtype,
                     int64_t ept, const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim n = kb.dim("N", {.min = 1, .max = int64_t{1} << 40});
  std::vector<cc::Buf> in;
  for (int i = 0; i < op.arity; ++i)
    in.push_back(kb.input("in" + std::to_string(i), in_dtypes[i], {n}));
  cc::Buf out = kb.output("out", out_dtype, {n});
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

// The same map over N = 8·NV elements (NV vectors): kVectorsPerBlock vectors a block, 8
// consecutive elements a thread at a time, so that every operand loads and the output stores as
// 16 bytes of bf16 (the element kernel's guard inside the loop kept its accesses scalar: on the
// H200 V4-mini's bf16 sums of [T, 1024] rows went 11.1 -> 6.2 us at T = 4096). Whole blocks go
// unguarded, the last one guarded. For operands of at most 2 bytes (narrow_elements).
constexpr int64_t kVectorsPerBlock = 512;

cc::Kernel build_map_vectors(const MapOp& op, const std::vector<DType>& in_dtypes, DType out_dtype,
                             const std::string& name) {
  cc::KernelBuilder kb(name);
  cc::Dim nv = kb.dim("NV", {.min = 1, .max = int64_t{1} << 37});
  std::vector<cc::Buf> in;
  for (int i = 0; i < op.arity; ++i)
    in.push_back(kb.input("in" + std::to_string(i), in_dtypes[i], {nv * 8}));
  cc::Buf out = kb.output("out", out_dtype, {nv * 8});
  std::vector<cc::Val> scalars;
  for (const std::string& a : op.scalar_attrs) scalars.push_back(kb.scalar_f32(a));
  kb.body({cc::ceildiv(nv, kVectorsPerBlock)}, kThreads, [&](cc::Scope& s) {
    cc::Idx v0 = s.let(s.block_idx(0) * kVectorsPerBlock, "v0");
    whole_or_guarded(s, v0 + kVectorsPerBlock <= nv, [&](bool guarded) {
      s.annotate_layout(8);
      s.parallel(kVectorsPerBlock, 8, [&](cc::Idx v, cc::Idx l) {
        guard_if(s, guarded, v0 + v < nv, [&] {
          cc::Val e = s.let((v0 + v) * 8 + l, "e");
          std::vector<cc::Val> vals;
          for (const cc::Buf& b : in) vals.push_back(s.let(b(e), "v"));
          out(e) = op.fn(s, vals, scalars);
        });
      });
    });
  });
  return kb.build();
}

}  // namespace

bool narrow_elements(const std::vector<TensorType>& in, DType out) {
  bool narrow = dtype_bytes(out, 1) <= 2;
  for (const TensorType& t : in) narrow = narrow && dtype_bytes(t.dtype, 1) <= 2;
  return narrow;
}

std::string dtypes_suffix(const std::vector<TensorType>& in, DType out) {
  bool same = true;
  for (const TensorType& t : in) same = same && t.dtype == out;
  std::string s;
  if (!same)
    for (const TensorType& t : in) s += "_" + std::string(dtype_name(t.dtype));
  return s + "_" + std::string(dtype_name(out));
}

ExpandFn expand_map(std::shared_ptr<KernelCache> cache, MapOp op) {
  return [cache, op](const std::vector<TensorType>& in, const std::vector<TensorType>& out,
                     const Attrs& attrs) {
    int64_t n = numel(out[0]), ept = per_thread(n);
    std::vector<DType> in_dtypes;
    for (const TensorType& t : in) in_dtypes.push_back(t.dtype);
    KernelCall call;
    if (n >= kManyElements && n % 8 == 0 && narrow_elements(in, out[0].dtype)) {
      const std::string name = op.name + "_v8" + dtypes_suffix(in, out[0].dtype);
      call = {.kernel = cache->get(
                  name, [&] { return build_map_vectors(op, in_dtypes, out[0].dtype, name); }),
              .dims = {n / 8}};
    } else {
      const std::string name = map_name(op, ept) + dtypes_suffix(in, out[0].dtype);
      call = {.kernel = cache->get(
                  name, [&] { return build_map(op, in_dtypes, out[0].dtype, ept, name); }),
              .dims = {n}};
    }
    for (int i = 0; i < op.arity; ++i) call.buffers.push_back(input_slot(i));
    call.buffers.push_back(output_slot(0));
    for (const std::string& a : op.scalar_attrs) call.scalars.push_back(attr_float(attrs, a));
    return OpExpansion{.calls = {call}};
  };
}

}  // namespace tilerun::kernels
