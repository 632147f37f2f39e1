// over 600 lines: every IR node of both levels, each with the comment that defines its meaning;
// the node list is the one place a reader learns the language from.
// The compiler's IR nodes, shared by Tile IR (level 1) and SIMT IR (level 4), Halide-style:
// plain immutable structs with a static make() that checks invariants, held by Expr / Stmt
// handles. Which node kinds may appear at which level is the verifiers' business
// (tile_verifier.h, simt_verifier.h), not the nodes'.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/layout.h"
#include "tilerun/dtype.h"

namespace tilerun::compiler {

// Types of values in registers. Memory holds tilerun::DType elements; Tile IR loads widen them
// to compute_type() and stores narrow back, SIMT IR loads/stores move raw storage_type() bits.
enum class Type : uint8_t { Bool, I8, I16, I32, I64, F32 };

const char* type_name(Type t);
bool is_int(Type t);  // I8..I64 (not Bool)
bool is_float(Type t);
int type_bits(Type t);
// The register type a Tile IR load of `dtype` yields (f32 for bf16/f16, i32 for u8).
Type compute_type(DType dtype);
// The raw bits type a SIMT IR load of `dtype` moves (i16 for bf16/f16, i8 for u8).
Type storage_type(DType dtype);
// Whether the compiler can load/store this dtype yet (fp8/fp4/e8m0 come with their issue).
bool dtype_supported(DType dtype);

// ---------------------------------------------------------------------------------------------
// Handles.

// clang-format off
enum class ExprKind : uint8_t {
  IntImm, FloatImm, Var, Binary, Unary, Select, Cast, Bitcast, Call, Let, Load,
};
enum class StmtKind : uint8_t {
  Seq, LetStmt, For, Parallel, Reduce, IfThenElse, Store, Assign, Copy, Barrier, VectorMove,
  WarpShuffle, WarpBallot, Gemm, GemmWait, AsyncCopy, AsyncCommit, AsyncWait, TmaCopy, MbarrierInit,
  MbarrierWait,
};
// clang-format on

struct ExprNode {
  ExprNode(ExprKind k, Type t) : kind(k), type(t) {}
  virtual ~ExprNode() = default;
  const ExprKind kind;
  const Type type;
};

struct StmtNode {
  explicit StmtNode(StmtKind k) : kind(k) {}
  virtual ~StmtNode() = default;
  const StmtKind kind;
};

class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> n) : node_(std::move(n)) {}
  bool defined() const { return node_ != nullptr; }
  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  Type type() const { return node_->type; }
  // The node as T, or nullptr when it is another kind.
  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  bool same_as(const Expr& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(std::shared_ptr<const StmtNode> n) : node_(std::move(n)) {}
  bool defined() const { return node_ != nullptr; }
  const StmtNode* get() const { return node_.get(); }
  const StmtNode* operator->() const { return node_.get(); }
  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  bool same_as(const Stmt& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<const StmtNode> node_;
};

// ---------------------------------------------------------------------------------------------
// Expressions.

struct IntImm : ExprNode {
  static constexpr ExprKind kKind = ExprKind::IntImm;
  int64_t value;  // already wrapped to the type's width; Bool is 0 or 1
  IntImm(Type t, int64_t v) : ExprNode(kKind, t), value(v) {}
  static Expr make(Type t, int64_t value);
};

struct FloatImm : ExprNode {
  static constexpr ExprKind kKind = ExprKind::FloatImm;
  float value;  // f32 only: the IR has no wider float
  explicit FloatImm(float v) : ExprNode(kKind, Type::F32), value(v) {}
  static Expr make(float value);
};

// A name bound by a dim, scalar parameter, loop, let, reduce, mutable local, or one of the
// reserved thread-geometry names (kBlockIdx*, kThreadIdx).
struct Var : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Var;
  std::string name;
  Var(Type t, std::string n) : ExprNode(kKind, t), name(std::move(n)) {}
  static Expr make(Type t, const std::string& name);
};

// Reserved names; the dot keeps them apart from user identifiers.
inline constexpr const char* kBlockIdx[3] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
inline constexpr const char* kThreadIdx = "threadIdx.x";

// Div is IEEE division on f32 and floor division (Python's //) on ints; Mod is int-only floor
// modulo (the sign of the divisor). Min/Max on f32 are defined on NaN and signed zero by
// strict_math.h. And/Or/Xor are bitwise on ints and logical on Bool. Shift amounts must lie in
// [0, bits). Comparisons give Bool: ints compare signed (LtU unsigned, for bit tricks), floats
// ordered (false on NaN, except Ne which is true).
// clang-format off
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Mod, Min, Max,
  And, Or, Xor, Shl, ShrL, ShrA,
  Eq, Ne, Lt, Le, Gt, Ge, LtU,
};
// clang-format on
const char* binary_op_name(BinaryOp op);
bool is_comparison(BinaryOp op);

struct Binary : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Binary;
  BinaryOp op;
  Expr a, b;
  Binary(Type t, BinaryOp o, Expr x, Expr y)
      : ExprNode(kKind, t), op(o), a(std::move(x)), b(std::move(y)) {}
  static Expr make(BinaryOp op, Expr a, Expr b);
};

enum class UnaryOp : uint8_t { Neg, Not };  // Neg flips a float's sign bit; Not is bitwise/logical
const char* unary_op_name(UnaryOp op);

struct Unary : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Unary;
  UnaryOp op;
  Expr a;
  Unary(Type t, UnaryOp o, Expr x) : ExprNode(kKind, t), op(o), a(std::move(x)) {}
  static Expr make(UnaryOp op, Expr a);
};

struct Select : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Select;
  Expr cond, true_value, false_value;
  Select(Type t, Expr c, Expr tv, Expr fv)
      : ExprNode(kKind, t),
        cond(std::move(c)),
        true_value(std::move(tv)),
        false_value(std::move(fv)) {}
  static Expr make(Expr cond, Expr true_value, Expr false_value);
};

// Numeric conversion: ints sign-extend/truncate, Bool zero-extends, int→f32 rounds to nearest
// even, f32→int truncates toward zero saturating (NaN → 0; expanded by strict_math.h).
struct Cast : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Cast;
  Expr value;
  Cast(Type t, Expr v) : ExprNode(kKind, t), value(std::move(v)) {}
  static Expr make(Type t, Expr value);
};

// Reinterprets the bits between types of equal width (f32 ↔ i32).
struct Bitcast : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Bitcast;
  Expr value;
  Bitcast(Type t, Expr v) : ExprNode(kKind, t), value(std::move(v)) {}
  static Expr make(Type t, Expr value);
};

// Math on f32. Fma and Sqrt are IEEE operations every backend has; the rest are expanded into
// +,−,×,÷,fma,sqrt and bit operations by expand_strict_math before code generation, except
// Bf16Bits: an f32 rounded to bf16 (to nearest even; a NaN to 0x7fc0), its bits as an i16 — the
// store of a bf16 (lower_storage_types). Every backend has it too: the CPU as integer operations
// on the bits, CUDA as one cvt.rn.bf16.f32 (the same bits for every non-NaN f32) and a select.
enum class CallOp : uint8_t { Fma, Sqrt, Exp, Log, Tanh, Sigmoid, Rsqrt, Sin, Cos, Erf, Bf16Bits };
const char* call_op_name(CallOp op);
int call_op_arity(CallOp op);

struct Call : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Call;
  CallOp op;
  std::vector<Expr> args;
  Call(Type t, CallOp o, std::vector<Expr> a) : ExprNode(kKind, t), op(o), args(std::move(a)) {}
  static Expr make(CallOp op, std::vector<Expr> args);
};

// `let name = value in body`: names a value once so expansions don't duplicate trees.
struct Let : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Let;
  std::string name;
  Expr value, body;
  Let(Type t, std::string n, Expr v, Expr b)
      : ExprNode(kKind, t), name(std::move(n)), value(std::move(v)), body(std::move(b)) {}
  static Expr make(const std::string& name, Expr value, Expr body);
};

// A read of buffer `buffer`. Tile IR: one index per dimension, type = compute type.
// SIMT IR: one flat element index, type = storage type.
struct Load : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Load;
  std::string buffer;
  std::vector<Expr> indices;
  Load(Type t, std::string buf, std::vector<Expr> idx)
      : ExprNode(kKind, t), buffer(std::move(buf)), indices(std::move(idx)) {}
  static Expr make(Type t, const std::string& buffer, std::vector<Expr> indices);
};

// ---------------------------------------------------------------------------------------------
// Statements.

struct Seq : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Seq;
  std::vector<Stmt> stmts;
  explicit Seq(std::vector<Stmt> s) : StmtNode(kKind), stmts(std::move(s)) {}
  // Flattens nested Seqs; a single statement comes back as itself.
  static Stmt make(std::vector<Stmt> stmts);
};

// Binds an immutable value for `body`.
struct LetStmt : StmtNode {
  static constexpr StmtKind kKind = StmtKind::LetStmt;
  std::string name;
  Expr value;
  Stmt body;
  LetStmt(std::string n, Expr v, Stmt b)
      : StmtNode(kKind), name(std::move(n)), value(std::move(v)), body(std::move(b)) {}
  static Stmt make(const std::string& name, Expr value, Stmt body);
};

// A sequential loop `for var in [min, min + extent)` (i64). In Tile IR: `serial`. Every thread
// runs every iteration; barriers may sit inside only when the trip count is block-uniform.
// SIMT IR `vectorized`: the lanes of one vector (lower_parallel): min 0, a constant extent, no
// barriers; backends unroll it, and vectorize_accesses moves its global accesses as vectors.
struct For : StmtNode {
  static constexpr StmtKind kKind = StmtKind::For;
  std::string var;
  Expr min, extent;
  Stmt body;
  bool vectorized = false;
  For(std::string v, Expr mn, Expr ext, Stmt b, bool vec)
      : StmtNode(kKind),
        var(std::move(v)),
        min(std::move(mn)),
        extent(std::move(ext)),
        body(std::move(b)),
        vectorized(vec) {}
  static Stmt make(const std::string& var, Expr min, Expr extent, Stmt body,
                   bool vectorized = false);
};

// How a Parallel's elements are dealt to the block's threads: the fragment layout
// (thread, local) → element of the flattened nest (innermost fastest), CuTe-style
//   (T, (W, R)) : (W, (1, T·W))      T threads, W = width, R = ceil(n / (T·W))
// so thread t holds W consecutive elements, then the W after the next T·W, and so on. Width 1
// is the plain cyclic layout (T, R):(1, T). Every Parallel touching one fragment must share a
// width (the fragment's elements stay with their threads). Per-thread work, including a
// reduction's per-thread fold, runs over the local index in order, so the layout fixes it.
struct ParallelLayout {
  int width = 0;           // 0: not decided yet (infer_layouts decides)
  bool annotated = false;  // the author's annotate_layout: inference keeps the width
  // analyze_accesses' finding: the largest width at which every global access that moves with
  // the innermost var is proved in bounds, contiguous and aligned to width·bytes, with no
  // guard or loop between it and the Parallel; 1 when none, 0 when nothing moves with it. A
  // Parallel touching a gemm accumulator is asked for pairs (width 2) only, and there a guard
  // with one value over each pair does not count (infer_layouts, lower_parallel lower_general).
  int provable = -1;       // -1: not analysed
  bool vectorize = false;  // infer_layouts: width >= 2 and provable >= width
  // infer_layouts: the thread-value layout lower_parallel follows (layout.h
  // thread_value_layout); empty until then, and read as the default of `width` when empty.
  Layout tv;
};

// Tile IR only: an element-wise loop nest over [0, extents) distributed over the block's
// threads, innermost var fastest. No barriers, reductions or nested Parallels inside.
struct Parallel : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Parallel;
  std::vector<std::string> vars;
  std::vector<Expr> extents;
  Stmt body;
  ParallelLayout layout;
  Parallel(std::vector<std::string> v, std::vector<Expr> e, Stmt b, ParallelLayout l)
      : StmtNode(kKind), vars(std::move(v)), extents(std::move(e)), body(std::move(b)), layout(l) {}
  static Stmt make(std::vector<std::string> vars, std::vector<Expr> extents, Stmt body,
                   ParallelLayout layout = {});
};

enum class ReduceOp : uint8_t { Sum, Max, Min };
const char* reduce_op_name(ReduceOp op);

// Tile IR only: `name` = op over var in [0, extent) of value, a block-uniform result bound for
// `body`. Fixed order: each thread folds its elements in iteration order, then a shuffle tree
// inside each warp and the warps in order (see lower_reductions.cc), whatever the grid.
struct Reduce : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Reduce;
  std::string name;
  ReduceOp op;
  std::string var;
  Expr extent, value;
  Stmt body;
  Reduce(std::string n, ReduceOp o, std::string v, Expr ext, Expr val, Stmt b)
      : StmtNode(kKind),
        name(std::move(n)),
        op(o),
        var(std::move(v)),
        extent(std::move(ext)),
        value(std::move(val)),
        body(std::move(b)) {}
  static Stmt make(const std::string& name, ReduceOp op, const std::string& var, Expr extent,
                   Expr value, Stmt body);
};

struct IfThenElse : StmtNode {
  static constexpr StmtKind kKind = StmtKind::IfThenElse;
  Expr cond;
  Stmt then_case, else_case;  // else_case may be undefined
  IfThenElse(Expr c, Stmt t, Stmt e)
      : StmtNode(kKind), cond(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
  static Stmt make(Expr cond, Stmt then_case, Stmt else_case = Stmt());
};

// A write to `buffer` (indices as in Load). Tile IR value: compute type; SIMT: storage type.
struct Store : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Store;
  std::string buffer;
  std::vector<Expr> indices;
  Expr value;
  Store(std::string buf, std::vector<Expr> idx, Expr v)
      : StmtNode(kKind), buffer(std::move(buf)), indices(std::move(idx)), value(std::move(v)) {}
  static Stmt make(const std::string& buffer, std::vector<Expr> indices, Expr value);
};

// SIMT IR only: writes a mutable per-thread scalar local (declared in SimtKernel::locals).
struct Assign : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Assign;
  std::string name;
  Expr value;
  Assign(std::string n, Expr v) : StmtNode(kKind), name(std::move(n)), value(std::move(v)) {}
  static Stmt make(const std::string& name, Expr value);
};

// A rectangular box of a buffer: element origin + i for i in [0, extents).
struct Region {
  std::string buffer;
  std::vector<Expr> origin;
  std::vector<int64_t> extents;
};

// Tile IR only: dst[box] = src[box], element by element in the compute type. Global elements
// outside the tensor read as 0 and are not written — the guard that makes ragged tiles safe.
// `async` (text `copy_async`): a global input's box into a whole shared tile, moved as 16-byte
// AsyncCopy pieces that complete later: the program commits them (AsyncCommit) and waits
// (AsyncWait) before a barrier and the tile's readers. tile_verifier states what it accepts.
// An async copy's side of higher rank may lead with extents of 1 (copy_extents_match): the
// source one matrix of a 3-d tensor, the destination one panel of a tile.
struct Copy : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Copy;
  Region dst, src;
  bool async = false;
  Copy(Region d, Region s, bool a)
      : StmtNode(kKind), dst(std::move(d)), src(std::move(s)), async(a) {}
  static Stmt make(Region dst, Region src, bool async = false);
};

// Whether a copy's boxes fit: equal extents, or (async) equal after the leading 1s of the side of
// higher rank.
bool copy_extents_match(const std::vector<int64_t>& dst, const std::vector<int64_t>& src,
                        bool async);

// Both levels, from lower_copies of a `copy_async` on: dst[di + l] = l < valid ? src[si + l] : 0
// for l in [0, lanes), storage bits, one 16-byte piece (lanes = 16 / element bytes) of a global
// input (src) into a shared tile (dst) that completes asynchronously (cp.async.cg with a source
// size of valid elements on sm_90a; the CPU backend copies at once). Indices as in Load/Store
// (one flat index each from flatten_buffers on); `valid` (i64, 0..lanes) counts the elements
// inside the tensor, the rest are zero-filled; with valid = 0 nothing is read.
struct AsyncCopy : StmtNode {
  static constexpr StmtKind kKind = StmtKind::AsyncCopy;
  std::string dst;
  std::vector<Expr> dst_indices;
  std::string src;
  std::vector<Expr> src_indices;
  int lanes;
  Expr valid;
  AsyncCopy(std::string d, std::vector<Expr> di, std::string s, std::vector<Expr> si, int l, Expr v)
      : StmtNode(kKind),
        dst(std::move(d)),
        dst_indices(std::move(di)),
        src(std::move(s)),
        src_indices(std::move(si)),
        lanes(l),
        valid(std::move(v)) {}
  static Stmt make(const std::string& dst, std::vector<Expr> dst_indices, const std::string& src,
                   std::vector<Expr> src_indices, int lanes, Expr valid);
};

// Both levels: closes the group of this thread's async copies issued since the last commit
// (cp.async.commit_group). Text `async_commit`.
struct AsyncCommit : StmtNode {
  static constexpr StmtKind kKind = StmtKind::AsyncCommit;
  AsyncCommit() : StmtNode(kKind) {}
  static Stmt make();
};

// Both levels: waits until at most `pending` (0..7) of this thread's committed groups are
// still running (cp.async.wait_group). Other threads' copies are visible only after a barrier
// that follows their waits. Text `async_wait N`.
struct AsyncWait : StmtNode {
  static constexpr StmtKind kKind = StmtKind::AsyncWait;
  int pending;
  explicit AsyncWait(int p) : StmtNode(kKind), pending(p) {}
  static constexpr int kMaxPending = 7;
  static Stmt make(int pending);
};

// Both levels: the tensor memory accelerator's box copy (cp.async.bulk.tensor on sm_90a),
// issued for the whole block by its thread 0. dst[dst_indices + i] = src[src_indices + i] for i
// in the box, zeros where src_indices + i lies outside the tensor (any coordinate, negative
// ones too). `dst` is a shared tile and the destination a whole tile of it or a whole panel at
// leading indices (as copy_async's), row-major under the tensor core's 32B/64B/128B swizzle
// whose rows are the box's innermost extent, so that the hardware's address swizzle and the
// tile's agree; `src` a global input of the same dtype whose rows are 16-byte multiples; `box`
// src's extents (a destination of higher rank leads with extents of 1). The copy completes
// asynchronously on mbarrier `barrier[barrier_index]` (a shared i64 array): it adds the box's
// bytes to the barrier's expected transactions and arrives once, and the barrier's phase ends
// when every arrival the init counted has come and every byte landed; readers mbarrier_wait on
// that phase first. Block-uniform (the block's thread 0 issues it; it may sit under an if).
// SIMT IR (flatten_buffers on): dst_indices is the tile's one flat offset; src_indices stay the
// box's coordinates (the tensor map takes coordinates, not addresses). The CPU backend copies at
// once. Text `tma_copy dst[..] <- src[..] box [..] on bar[i]`.
struct TmaCopy : StmtNode {
  static constexpr StmtKind kKind = StmtKind::TmaCopy;
  std::string dst;
  std::vector<Expr> dst_indices;
  std::string src;
  std::vector<Expr> src_indices;
  std::vector<int64_t> box;
  std::string barrier;
  Expr barrier_index;
  TmaCopy(std::string d, std::vector<Expr> di, std::string s, std::vector<Expr> si,
          std::vector<int64_t> bx, std::string bar, Expr bi)
      : StmtNode(kKind),
        dst(std::move(d)),
        dst_indices(std::move(di)),
        src(std::move(s)),
        src_indices(std::move(si)),
        box(std::move(bx)),
        barrier(std::move(bar)),
        barrier_index(std::move(bi)) {}
  static constexpr int kMaxRank = 5, kMaxBox = 256;  // the tensor map's limits
  static Stmt make(const std::string& dst, std::vector<Expr> dst_indices, const std::string& src,
                   std::vector<Expr> src_indices, std::vector<int64_t> box,
                   const std::string& barrier, Expr barrier_index);
};

// Both levels: thread 0 initialises every mbarrier of the shared i64 array `barrier` to expect
// `count` arrivals a phase (the tma_copys that fill one stage), phase parity 0. The program
// passes a block barrier before any thread uses them. With `invalidate` (count 0), thread 0
// invalidates them instead, so that a later init starts their phases afresh (a loop that runs
// a pipeline again): only once every copy has landed and every thread is past its last wait. A
// no-op on the CPU. Text `mbarrier_init bar count N`, `mbarrier_inval bar`.
struct MbarrierInit : StmtNode {
  static constexpr StmtKind kKind = StmtKind::MbarrierInit;
  std::string barrier;
  int count;
  bool invalidate = false;
  MbarrierInit(std::string b, int c, bool inval)
      : StmtNode(kKind), barrier(std::move(b)), count(c), invalidate(inval) {}
  static Stmt make(const std::string& barrier, int count, bool invalidate = false);
};

// Both levels: every thread waits until the phase of mbarrier `barrier[index]` whose parity is
// `parity` (0 or 1: the phase's number modulo 2) has completed; the tma_copys that phase counted
// are then visible to the thread. Block-uniform. A no-op on the CPU, where copies complete at
// once. Text `mbarrier_wait bar[i] parity P`.
struct MbarrierWait : StmtNode {
  static constexpr StmtKind kKind = StmtKind::MbarrierWait;
  std::string barrier;
  Expr index, parity;
  MbarrierWait(std::string b, Expr i, Expr p)
      : StmtNode(kKind), barrier(std::move(b)), index(std::move(i)), parity(std::move(p)) {}
  static Stmt make(const std::string& barrier, Expr index, Expr parity);
};

// Every thread of the block waits here until all arrive; shared-memory writes before it are
// visible after it. Only in block-uniform control flow.
struct Barrier : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Barrier;
  Barrier() : StmtNode(kKind) {}
  static Stmt make();
};

// SIMT IR only (vectorize_accesses): dst[dst_index + l] = src[src_index + l] for l in
// [0, lanes), storage bits, as one memory transaction. One side is a global buffer whose index
// is proved a multiple of lanes (so lanes·bytes-aligned, lanes·bytes <= 16), the other a local
// array of the thread.
struct VectorMove : StmtNode {
  static constexpr StmtKind kKind = StmtKind::VectorMove;
  std::string dst;
  Expr dst_index;
  std::string src;
  Expr src_index;
  int lanes;
  VectorMove(std::string d, Expr di, std::string s, Expr si, int l)
      : StmtNode(kKind),
        dst(std::move(d)),
        dst_index(std::move(di)),
        src(std::move(s)),
        src_index(std::move(si)),
        lanes(l) {}
  static Stmt make(const std::string& dst, Expr dst_index, const std::string& src, Expr src_index,
                   int lanes);
};

// Both levels (lower_reductions' warp tree): every thread t of the block sets its element of
// `dst` to the element of `src` held by thread t ^ lane_xor, a lane of its own warp
// (0 < lane_xor < min(threads, 32)). Tile IR: fragments of shape {threads} (element t with
// thread t); SIMT IR: element 0 of the threads' local arrays. Every thread takes part, so, like
// a barrier, only in block-uniform control flow; the CPU backend runs it as its own loop over
// the threads between two barrier-free stretches, CUDA as __shfl_xor_sync.
struct WarpShuffle : StmtNode {
  static constexpr StmtKind kKind = StmtKind::WarpShuffle;
  std::string dst, src;
  int lane_xor;
  WarpShuffle(std::string d, std::string s, int x)
      : StmtNode(kKind), dst(std::move(d)), src(std::move(s)), lane_xor(x) {}
  static Stmt make(const std::string& dst, const std::string& src, int lane_xor);
};

// Both levels: every thread t sets its element of `dst` (i32) to the ballot of its warp: bit l
// is set when the element of `src` (i32) held by lane l of t's warp is nonzero (lanes past a
// block smaller than a warp count as zero). Fragments / local arrays as for WarpShuffle; every
// thread takes part, so only in block-uniform control flow. CUDA: __ballot_sync; the CPU
// backend: its own loop over the threads, like a shuffle. With a popcount of the mask below a
// lane (builder.h popcount) it ranks a warp's flagged lanes in lane order: the step of a
// stream compaction or a count without a shuffle tree.
struct WarpBallot : StmtNode {
  static constexpr StmtKind kKind = StmtKind::WarpBallot;
  std::string dst, src;
  WarpBallot(std::string d, std::string s)
      : StmtNode(kKind), dst(std::move(d)), src(std::move(s)) {}
  static Stmt make(const std::string& dst, const std::string& src);
};

// Both levels: the tensor-core tile product c[i, j] += sum_k op(a)[i, k] * op(b)[k, j] over
// an m x n x k tile, op = optional transpose (a is [m, k], or [k, m] when trans_a; b is [k, n],
// or [n, k] when trans_b). A transposed a may also come as m's 64-wide panels, [m / 64, k, 64]
// (panel p holds a's columns [64 p, 64 p + 64)): the MN-major tiles wgmma reads, one 128-byte
// row of 16-bit elements per k; likewise a b that is not transposed may come as n's panels,
// [n / 64, k, 64], so that one gemm spans n = 128 or more of an N-major b. a and b are shared tiles
// of one dtype (bf16 or f16), c an f32 fragment (Tile IR) or local array (SIMT IR) laid out as the
// tensor core's accumulator (layout.h wgmma_accumulator_layout): the gemm fixes who holds which
// element, so every parallel touching c follows that layout. The inner products follow the Hopper
// MMA's arithmetic (codegen/mma_model.h), in k order, so the bits depend on (m, n, k) and the data
// only. Every thread takes part, so, like a barrier, only in block-uniform control flow; the
// shared tiles must be written (and a barrier passed) before.
// `pending` (0..7): how many of this thread's newest gemms may still be running when it moves
// on (wgmma.wait_group pending on sm_90a; the CPU model finishes every gemm at once). 0, the
// default, waits for all. With pending p > 0 the program must neither read the accumulator nor
// overwrite a tile that one of the last p + 1 gemms reads before a later gemm with pending 0:
// a pipeline rotates at least p + 2 tile buffers when one barrier per step orders its stores
// (the barrier proves the other warpgroups' waits of the step before, one step later).
// `stage` (defined or not): a and b are stacks of S tiles ([S, ..tile], row-major under a
// swizzle whose period divides one tile) and the gemm reads tile `stage` of each, a
// block-uniform integer proved in [0, S). One gemm at a run-time stage, not one per buffer
// under a branch: a pipeline's code is then written once. `stage_a` / `stage_b` say which
// operands are stacks (both by default; text `stage(E)`, `stage_a(E)`, `stage_b(E)`): one
// operand streamed through a pipeline, the other a tile that stays (a gather's rows times a
// token's probabilities).
struct Gemm : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Gemm;
  std::string c, a, b;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int pending = 0;
  Expr stage;
  bool stage_a = true, stage_b = true;  // which operands `stage` indexes (when defined)
  Gemm(std::string c_, std::string a_, std::string b_, bool ta, bool tb, int64_t m_, int64_t n_,
       int64_t k_, int pending_, Expr stage_, bool sa, bool sb)
      : StmtNode(kKind),
        c(std::move(c_)),
        a(std::move(a_)),
        b(std::move(b_)),
        trans_a(ta),
        trans_b(tb),
        m(m_),
        n(n_),
        k(k_),
        pending(pending_),
        stage(std::move(stage_)),
        stage_a(sa),
        stage_b(sb) {}
  static constexpr int kMaxPending = 7;
  static Stmt make(const std::string& c, const std::string& a, const std::string& b, bool trans_a,
                   bool trans_b, int64_t m, int64_t n, int64_t k, int pending = 0,
                   Expr stage = Expr(), bool stage_a = true, bool stage_b = true);
  // Whether operand a (or b) is read as tile `stage` of a stack.
  bool a_staged() const { return stage.defined() && stage_a; }
  bool b_staged() const { return stage.defined() && stage_b; }
};

// Both levels: waits until at most `pending` (0..7) of this thread's newest gemms are still
// running (wgmma.wait_group on sm_90a; the CPU model finishes every gemm at once): a gemm left
// running (Gemm::pending > 0) ends here, so that its accumulator may be read after. Every
// thread takes part, like a gemm: only in block-uniform control flow. Text `gemm_wait N`.
struct GemmWait : StmtNode {
  static constexpr StmtKind kKind = StmtKind::GemmWait;
  int pending;
  explicit GemmWait(int p) : StmtNode(kKind), pending(p) {}
  static constexpr int kMaxPending = Gemm::kMaxPending;
  static Stmt make(int pending);
};

// ---------------------------------------------------------------------------------------------
// Small constructors used by the passes (no folding beyond the obvious constant cases).

Expr make_const(Type t, int64_t value);
Expr make_f32(float value);
Expr make_bool(bool value);
inline Expr make_i64(int64_t value) { return make_const(Type::I64, value); }
inline Expr make_i32(int64_t value) { return make_const(Type::I32, value); }
// Integer constant value, if `e` is one.
bool const_int(const Expr& e, int64_t* value);

// Arithmetic helpers that fold constants so generated index math stays readable.
Expr add(Expr a, Expr b);
Expr sub(Expr a, Expr b);
Expr mul(Expr a, Expr b);
Expr floordiv(Expr a, Expr b);
Expr floormod(Expr a, Expr b);
Expr ceildiv(Expr a, Expr b);
Expr lt(Expr a, Expr b);
Expr logical_and(Expr a, Expr b);

}  // namespace tilerun::compiler
