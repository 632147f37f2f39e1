// The C++ builder for Tile IR: how kernels/ writes tile programs. See compiler/README.md for a
// walkthrough. A KernelBuilder declares the signature (dims, buffers, scalars), body() records
// the block's program through a Scope, and build() returns a verified Kernel.
//
//   KernelBuilder kb("rmsnorm_fwd");
//   Dim T = kb.dim("T"), D = kb.dim("D", {.min = 1, .max = 1 << 16});
//   Buf x = kb.input("x", DType::F32, {T, D}), g = kb.input("gamma", DType::F32, {D});
//   Buf y = kb.output("y", DType::F32, {T, D});
//   Val eps = kb.scalar_f32("eps");
//   kb.body(/*grid=*/{T}, /*threads=*/128, [&](Scope& s) {
//     Idx row = s.block_idx(0);
//     Val ss = s.reduce_sum(D, [&](Idx j) { Val v = x(row, j); return v * v; });
//     Val r = rsqrt(ss / to_f32(D) + eps);
//     s.parallel(D, [&](Idx j) { y(row, j) = x(row, j) * r * g(j); });
//   });
//   Kernel k = kb.build();
//
// Vals are pure expression trees evaluated where they are used: a Val that reads a buffer sees
// the buffer as it is at the point of use, so pin it with s.let() before overwriting its source.
// Builder misuse (type mismatch, wrong index count, ...) throws tilerun::Error.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"
#include "compiler/ir/kernel.h"
#include "tilerun/dtype.h"

namespace tilerun::compiler {

// Tile programs name element types constantly; `using namespace tilerun::compiler` brings it.
using ::tilerun::DType;

struct BuilderState;

// A scalar expression: i64 index math, f32 values, i32, or Bool conditions. Integer literals
// make i64 constants and floating literals f32 constants; mixed with a Val, a C++ number takes
// the Val's type (`v * 2` with f32 v is `v * 2.0f`). No other implicit conversions.
class Val {
 public:
  Val() = default;
  Val(Expr e) : expr_(std::move(e)) {}  // NOLINT: IR expressions are Vals
  template <std::integral T>
  requires(!std::same_as<T, bool>) Val(T v)
      : Val(int_literal(static_cast<int64_t>(v))) {}  // NOLINT
  template <std::floating_point T>
  Val(T v) : Val(float_literal(static_cast<double>(v))) {}  // NOLINT
  const Expr& expr() const { return expr_; }
  Type type() const { return expr_.type(); }
  bool defined() const { return expr_.defined(); }

 private:
  static Expr int_literal(int64_t v);
  static Expr float_literal(double v);
  Expr expr_;
};
using Idx = Val;  // an i64 index; the alias documents intent

// A named size; behaves as an i64 Val.
struct Dim : Val {
  Dim() = default;
  Dim(Val v, std::string n) : Val(std::move(v)), name(std::move(n)) {}
  std::string name;
};

// A literal of the given type, or a Bool.
Val literal(Type t, double value);
Val boolean(bool value);

// Arithmetic: operands must have the same type. `/` and `%` on ints are floor division and
// floor modulo (Python's // and %); on f32 `/` is IEEE division and `%` is not allowed.
Val operator+(const Val& a, const Val& b);
Val operator-(const Val& a, const Val& b);
Val operator*(const Val& a, const Val& b);
Val operator/(const Val& a, const Val& b);
Val operator%(const Val& a, const Val& b);
Val operator-(const Val& a);
// Comparisons give Bool; && || ! combine Bools; & | ^ are bitwise on ints.
Val operator==(const Val& a, const Val& b);
Val operator!=(const Val& a, const Val& b);
Val operator<(const Val& a, const Val& b);
Val operator<=(const Val& a, const Val& b);
Val operator>(const Val& a, const Val& b);
Val operator>=(const Val& a, const Val& b);
Val operator&&(const Val& a, const Val& b);
Val operator||(const Val& a, const Val& b);
Val operator!(const Val& a);
Val operator&(const Val& a, const Val& b);
Val operator|(const Val& a, const Val& b);
Val operator^(const Val& a, const Val& b);

// A C++ number beside a Val becomes a literal of the Val's type.
Val like(const Val& v, double number);
template <class T>
concept Number = std::is_arithmetic_v<T>;
#define TILERUN_MIXED_OP(op)                     \
  template <Number T>                            \
  Val operator op(const Val& a, T b) {           \
    return a op like(a, static_cast<double>(b)); \
  }                                              \
  template <Number T>                            \
  Val operator op(T a, const Val& b) {           \
    return like(b, static_cast<double>(a)) op b; \
  }
TILERUN_MIXED_OP(+)
TILERUN_MIXED_OP(-)
TILERUN_MIXED_OP(*)
TILERUN_MIXED_OP(/)
TILERUN_MIXED_OP(%)
TILERUN_MIXED_OP(==)
TILERUN_MIXED_OP(!=)
TILERUN_MIXED_OP(<)
TILERUN_MIXED_OP(<=)
TILERUN_MIXED_OP(>)
TILERUN_MIXED_OP(>=)
#undef TILERUN_MIXED_OP

Val ceildiv(const Val& a, const Val& b);  // ints: ceil(a / b) for b > 0
Val min(const Val& a, const Val& b);      // f32: NaN if either is NaN; min(-0, +0) = -0
Val max(const Val& a, const Val& b);      // f32: NaN if either is NaN; max(-0, +0) = +0
Val select(const Val& cond, const Val& if_true, const Val& if_false);
Val shl(const Val& a, const Val& bits);
Val shr(const Val& a, const Val& bits);  // arithmetic (sign-filling)
Val shr_logical(const Val& a, const Val& bits);

// f32 math. Strict: the same bits on every backend (see strict_math.h).
Val fma(const Val& a, const Val& b, const Val& c);  // a * b + c, one rounding
Val sqrt(const Val& a);                             // IEEE
Val rsqrt(const Val& a);
Val exp(const Val& a);
Val sin(const Val& a);  // radians, any f32: argument reduction is exact (strict_math.h)
Val cos(const Val& a);
Val erf(const Val& a);  // the error function (strict_math.h)
Val log(const Val& a);
Val tanh(const Val& a);
Val sigmoid(const Val& a);
Val abs(const Val& a);  // ints too
// The number of set bits among the low 32 of an i32 or i64 (an i64 in [0, 32]): a ballot's
// count, or with the mask of the lanes below a thread's (lane_mask_below), its rank among the
// flagged lanes. Plain shifts, masks and one multiply in i64 (no overflow, no intrinsic), which
// LLVM and NVRTC recognise as one population count.
Val popcount(const Val& a);
// The bits of the lanes below `lane` (an i64 in [0, 32)) as an i64: (1 << lane) - 1.
Val lane_mask_below(const Val& lane);

// Conversions: int → f32 rounds to nearest even; f32 → int truncates toward zero, saturating,
// NaN → 0. bitcast reinterprets bits between f32 and i32.
Val cast(Type t, const Val& a);
inline Val to_f32(const Val& a) { return cast(Type::F32, a); }
inline Val to_i32(const Val& a) { return cast(Type::I32, a); }
inline Val to_i64(const Val& a) { return cast(Type::I64, a); }
Val bitcast(Type t, const Val& a);

class Buf;

// An element of a buffer: reads as a Val, and assigning to it records a store. Elements of
// bf16/f16 buffers read as f32 and are rounded to nearest even when stored.
class Ref : public Val {
 public:
  Ref(BuilderState* state, std::string buffer, std::vector<Expr> indices, Expr load);
  Ref& operator=(const Val& v);
  Ref& operator=(const Ref& r);  // a store of r's value, not a rebinding
  Ref& operator+=(const Val& v);
  Ref& operator-=(const Val& v);
  Ref& operator*=(const Val& v);
  template <Number T>
  Ref& operator=(T v) {
    return *this = like(*this, static_cast<double>(v));
  }
  template <Number T>
  Ref& operator+=(T v) {
    return *this += like(*this, static_cast<double>(v));
  }

 private:
  BuilderState* state_;
  std::string buffer_;
  std::vector<Expr> indices_;
};

// A box of a buffer for Scope::copy: origin per dim (any Val) and constant extents.
struct BufRegion {
  std::string buffer;
  std::vector<Val> origin;
  std::vector<int64_t> extents;
};

// A handle to a global tensor parameter, a shared tile or a fragment.
class Buf {
 public:
  Buf() = default;
  Buf(BuilderState* state, std::string name, DType dtype, int rank);
  template <class... I>
  Ref operator()(const I&... idx) const {
    return at({Val(idx)...});
  }
  Ref at(const std::vector<Val>& idx) const;
  // The box [origin, origin + extents).
  BufRegion region(std::vector<Val> origin, std::vector<int64_t> extents) const;
  // The whole tile (shared/fragment buffers only).
  operator BufRegion() const;  // NOLINT
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }

 private:
  BuilderState* state_ = nullptr;
  std::string name_;
  DType dtype_ = DType::F32;
  int rank_ = 0;
};

// Records the block's program. Statements are appended where the innermost open body is, so
// nested lambdas may use the enclosing Scope freely.
class Scope {
 public:
  explicit Scope(BuilderState* state) : state_(state) {}

  // This block's index along grid axis `axis` (0 = x), i64.
  Val block_idx(int axis) const;
  // The block's threads (KernelBuilder::body's `threads`).
  int threads() const;

  Buf alloc_shared(const std::string& name, DType dtype, std::vector<int64_t> shape);
  // A shared tile whose coordinates map to offsets by `layout` (layout.h; same shape as the
  // tile, injective; e.g. padded rows against bank conflicts, or a transposed tile), followed
  // by lowering; the verifier refuses a layout that maps two coordinates to one offset.
  Buf alloc_shared(const std::string& name, DType dtype, std::vector<int64_t> shape, Layout layout);
  // A row-major shared tile with its offsets swizzled (layout.h Swizzle; the tensor core's
  // 128B/64B/32B patterns are tensor_core_swizzle), proved a bijection by the verifier.
  Buf alloc_shared(const std::string& name, DType dtype, std::vector<int64_t> shape,
                   Swizzle swizzle);
  Buf alloc_fragment(const std::string& name, DType dtype, std::vector<int64_t> shape);

  // Element-wise loop over [0, extent) (innermost argument fastest) spread over the threads.
  // No barriers, reductions or nested parallels inside; fragments are indexed by exactly the
  // loop's indices over a loop whose extents equal the fragment's shape.
  void parallel(const Val& extent, const std::function<void(Idx)>& body);
  void parallel(const Val& e0, const Val& e1, const std::function<void(Idx, Idx)>& body);
  void parallel(const Val& e0, const Val& e1, const Val& e2,
                const std::function<void(Idx, Idx, Idx)>& body);

  // Overrides layout inference for the next parallel: its elements are dealt to threads
  // `width` consecutive elements at a time, the fragment layout (T,(W,R)):(W,(1,T·W)) of
  // ir.h's ParallelLayout (width 1: cyclic, one element per thread at a time). Every parallel
  // sharing a fragment with it follows. Accesses still move as vectors only where proved.
  void annotate_layout(int width);

  // A sequential loop over [0, extent) run by every thread; barriers may sit inside when the
  // extent is block-uniform (a GEMM's K loop). Inside a parallel it is a per-thread loop.
  void serial(const Val& extent, const std::function<void(Idx)>& body);

  // A block-wide reduction of value(i) for i in [0, extent): a block-uniform result. Fixed
  // order: each thread folds its elements in order, then a shuffle tree inside each warp, then
  // the warps in order. Not inside parallel or if.
  Val reduce(ReduceOp op, const Val& extent, const std::function<Val(Idx)>& value);
  Val reduce_sum(const Val& extent, const std::function<Val(Idx)>& value) {
    return reduce(ReduceOp::Sum, extent, value);
  }
  Val reduce_max(const Val& extent, const std::function<Val(Idx)>& value) {
    return reduce(ReduceOp::Max, extent, value);
  }
  Val reduce_min(const Val& extent, const std::function<Val(Idx)>& value) {
    return reduce(ReduceOp::Min, extent, value);
  }

  void if_then(const Val& cond, const std::function<void()>& then_body);
  void if_then_else(const Val& cond, const std::function<void()>& then_body,
                    const std::function<void()>& else_body);

  // Evaluates `value` here, once, and names it (the name is a readability hint).
  Val let(const Val& value, const std::string& hint = "t");

  // dst[box] = src[box] element by element; the boxes' extents must match. Global elements
  // outside the tensor read as 0 and are not written. No implicit barrier: call barrier().
  void copy(const BufRegion& dst, const BufRegion& src);
  // A global input's box into a whole shared tile as asynchronous 16-byte copies (cp.async on
  // sm_90a; ir.h Copy::async), zeros outside the tensor. The tile may be read only after this
  // thread's async_commit() and async_wait(p) leaving that group done, and a barrier. Either
  // side may have extra leading extents of 1 at constant origins: the source box one matrix of
  // a 3-d tensor (w[e]), the destination one panel of a tile ([p, rows, cols], panel p whole).
  void copy_async(const BufRegion& dst, const BufRegion& src);
  // One 16-byte asynchronous piece (ir.h AsyncCopy), for gathers a box cannot describe: the
  // elements dst[.., j + l] = src[.., i + l] for l < 16 / element bytes, where dst is a shared
  // tile and src a global input of the same dtype; a piece outside src (any index out of range)
  // is zero-filled and reads nothing. Inside parallel (each iteration one piece), waited for as
  // copy_async is. The verifier asks both innermost indices and rows to be provably multiples of
  // the lanes (so a piece is wholly inside or wholly outside), and analyze_accesses proves the
  // source in bounds wherever the piece reads.
  void copy_async_piece(const Buf& dst, const std::vector<Val>& dst_idx, const Buf& src,
                        const std::vector<Val>& src_idx);
  // The tensor memory accelerator's copy (ir.h TmaCopy): a global input's box into a whole
  // tile (or a whole panel) of a shared tile swizzled for the tensor core, issued by thread 0,
  // zeros outside the tensor, completing on mbarrier `barrier[index]` (a shared i64 array that
  // mbarrier_init set up). Readers mbarrier_wait on the barrier's phase first. May sit under
  // a block-uniform if.
  void copy_tma(const BufRegion& dst, const BufRegion& src, const Buf& barrier, const Val& index);
  // Thread 0 readies every mbarrier of `barrier` for `count` arrivals a phase (the copy_tmas
  // of one stage); pass a barrier() before their first use.
  void mbarrier_init(const Buf& barrier, int count);
  // Thread 0 invalidates them, so that a later mbarrier_init starts afresh: only after every
  // copy on them landed and a barrier() after every thread's last wait.
  void mbarrier_inval(const Buf& barrier);
  // Every thread waits until the phase of `barrier[index]` of parity `parity` (0 or 1) ended.
  void mbarrier_wait(const Buf& barrier, const Val& index, const Val& parity);
  // Closes the group of this thread's async copies since the last commit.
  void async_commit();
  // Waits until at most `pending` (0..7) of this thread's committed groups are still running.
  void async_wait(int pending);

  // All threads of the block wait; shared writes before are visible after. Only outside
  // parallel and if.
  void barrier();

  // Warp primitives over fragments of shape [threads] (element t held by thread t, as a
  // parallel over [0, threads) deals them). Block-uniform, like barrier(): outside parallel and
  // if. shuffle_xor: dst[t] = src[t ^ lane_xor] (0 < lane_xor < min(threads, 32)), one dtype.
  // ballot: dst[t] (i32) = the mask of the lanes l of t's warp whose src (i32) is nonzero, bit l
  // for lane l. Read a ballot's bits with popcount and lane_mask_below.
  void shuffle_xor(const Buf& dst, const Buf& src, int lane_xor);
  void ballot(const Buf& dst, const Buf& src);

  // acc[m, n] += op(a) op(b) on the tensor cores (ir.h Gemm): a, b shared bf16/f16 tiles
  // ([m, k] or, transposed, [k, m] or m's panels [m / 64, k, 64]; [k, n] or [n, k]), acc an f32
  // fragment whose layout the
  // gemm fixes. Block-uniform, like barrier(); write the tiles and pass a barrier first.
  // `pending` > 0 leaves that many of the newest gemms running (ir.h Gemm says what the program
  // must then not touch until a gemm with pending 0).
  void gemm(const Buf& acc, const Buf& a, const Buf& b, bool trans_a = false, bool trans_b = false,
            int pending = 0);
  // Waits until at most `pending` of the newest gemms still run (ir.h GemmWait): a gemm left
  // running by `pending` ends here. Block-uniform, like gemm().
  void gemm_wait(int pending = 0);
  // The gemm on tile `stage` of stacks a [S, ..tile] and b [S, ..tile] (ir.h Gemm::stage).
  void gemm_at(const Val& stage, const Buf& acc, const Buf& a, const Buf& b, bool trans_a = false,
               bool trans_b = false, int pending = 0);
  // The same with only a (or only b) a stack: the other operand one tile that stays.
  void gemm_at_a(const Val& stage, const Buf& acc, const Buf& a, const Buf& b, bool trans_a = false,
                 bool trans_b = false, int pending = 0);
  void gemm_at_b(const Val& stage, const Buf& acc, const Buf& a, const Buf& b, bool trans_a = false,
                 bool trans_b = false, int pending = 0);

 private:
  void staged_gemm(const Val& stage, bool stage_a, bool stage_b, const Buf& acc, const Buf& a,
                   const Buf& b, bool trans_a, bool trans_b, int pending);

 public:
 private:
  BuilderState* state_;
};

class KernelBuilder {
 public:
  explicit KernelBuilder(std::string name);
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  // Signature, in parameter order (KernelArgs follows this order per kind).
  Dim dim(const std::string& name, DimBounds bounds = {});
  Buf input(const std::string& name, DType dtype, const std::vector<Val>& shape);
  Buf output(const std::string& name, DType dtype, const std::vector<Val>& shape);
  // An i32 input of indices with a contract: every element lies in [0, below) (BufferParam::
  // values_below). The caller establishes it before the launch; the index analysis assumes it of
  // values let-bound to its loads, so bound checks on them are proved instead of kept.
  Buf index_input(const std::string& name, const std::vector<Val>& shape, const Val& below);
  // The same with distinct values (BufferParam::values_distinct: a permutation, such as
  // counting_sort's positions): a store through a value let-bound to one of its loads, y[perm[i]],
  // is proved unique when the loads' indices are, so scatters need no atomics.
  Buf permutation_input(const std::string& name, const std::vector<Val>& shape, const Val& below);
  // A 1-d index input whose values also do not decrease (BufferParam::values_sorted: segment
  // starts such as counting_sort's offsets): a store into rows [b[e], b[e + 1]) owned by e is
  // proved unique across e.
  Buf sorted_input(const std::string& name, const Val& length, const Val& below);
  Val scalar_f32(const std::string& name) { return scalar(name, Type::F32); }
  Val scalar_i32(const std::string& name) { return scalar(name, Type::I32); }
  Val scalar_i64(const std::string& name) { return scalar(name, Type::I64); }
  Val scalar(const std::string& name, Type type);

  // The block program: `grid` holds 1..3 block counts over the dims (x first), `threads` the
  // block size (a power of two, at most 1024).
  void body(const std::vector<Val>& grid, int threads, const std::function<void(Scope&)>& fn);

  // The verified kernel (tilerun::Error naming the kernel if it is malformed).
  Kernel build();

 private:
  std::unique_ptr<BuilderState> state_;
};

}  // namespace tilerun::compiler
