#include "compiler/ir/tile_verifier.h"

#include <algorithm>

#include <map>

#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

class TileVerifier : public IRVisitor {
 public:
  explicit TileVerifier(const Kernel& k) : k_(k) {}

  void run() {
    const KernelSignature& sig = k_.sig;
    if (sig.grid.empty() || sig.grid.size() > 3) fail("the grid needs 1 to 3 dims");
    if (sig.threads < 1 || sig.threads > 1024 || (sig.threads & (sig.threads - 1)) != 0)
      fail("threads per block must be a power of two in [1, 1024], got " +
           std::to_string(sig.threads));
    for (const DimParam& d : sig.dims) define(d.name, Type::I64);
    // Shapes and the grid may use dims only.
    for (const BufferParam& b : sig.buffers)
      for (const Expr& e : b.shape) check_expr(e, "the shape of '" + b.name + "'");
    for (const Expr& g : sig.grid) check_expr(g, "the grid");
    for (const ScalarParam& s : sig.scalars) define(s.name, s.type);
    for (size_t i = 0; i < sig.grid.size(); ++i) define(kBlockIdx[i], Type::I64);
    if (!k_.body.defined()) fail("no body");
    visit(k_.body);
    if (has_async_copy_ && !has_async_wait_)
      fail("copy_async whose copies are never waited for (no async_wait in the kernel)");
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error("kernel '" + k_.sig.name + "': " + msg);
  }

  void define(const std::string& name, Type t) {
    if (!scope_.emplace(name, t).second) fail("name '" + name + "' is bound twice");
  }
  void undefine(const std::string& name) { scope_.erase(name); }

  void check_expr(const Expr& e, const std::string& where) {
    where_ = where;
    visit(e);
  }

  struct Decl {
    DType dtype;
    int rank;
    bool is_global, is_output, is_fragment;
  };
  Decl decl(const std::string& name) const {
    if (const BufferParam* b = find_buffer(k_.sig, name))
      return {b->dtype, static_cast<int>(b->shape.size()), true, b->is_output, false};
    if (const TileAlloc* a = find_alloc(k_, name))
      return {a->dtype, static_cast<int>(a->shape.size()), false, true,
              a->scope == MemScope::Fragment};
    fail("no buffer named '" + name + "'");
  }

  void check_access(const std::string& buffer, size_t nidx, const char* what) {
    Decl d = decl(buffer);
    if (static_cast<int>(nidx) != d.rank)
      fail(std::string(what) + " of '" + buffer + "' with " + std::to_string(nidx) +
           " indices, it has " + std::to_string(d.rank) + " dims");
    if (d.is_fragment && parallel_depth_ == 0)
      fail(std::string(what) + " of fragment '" + buffer +
           "' outside a parallel loop (fragments live in the threads' registers)");
  }

  void visit_expr(const Var* op) override {
    auto it = scope_.find(op->name);
    if (it == scope_.end()) fail("'" + op->name + "' is used in " + where_ + " outside its scope");
    if (it->second != op->type) fail("'" + op->name + "' used with the wrong type");
  }
  void visit_expr(const Let* op) override {
    visit(op->value);
    define(op->name, op->value.type());
    lets_[op->name] = op->value;
    visit(op->body);
    lets_.erase(op->name);
    undefine(op->name);
  }
  void visit_expr(const Load* op) override {
    check_access(op->buffer, op->indices.size(), "read");
    if (op->type != compute_type(decl(op->buffer).dtype))
      fail("load of '" + op->buffer + "' with the wrong type");
    if (in_reduce_value_ && decl(op->buffer).is_fragment)
      fail("reduction over fragment '" + op->buffer +
           "' (not supported by the fixed thread mapping)");
    IRVisitor::visit_expr(op);
  }

  void visit_stmt(const LetStmt* op) override {
    where_ = "a let";
    visit(op->value);
    define(op->name, op->value.type());
    lets_[op->name] = op->value;
    visit(op->body);
    lets_.erase(op->name);
    undefine(op->name);
  }
  void visit_stmt(const For* op) override {
    where_ = "a serial loop's bounds";
    visit(op->min);
    visit(op->extent);
    define(op->var, Type::I64);
    visit(op->body);
    undefine(op->var);
  }
  void visit_stmt(const Parallel* op) override {
    if (parallel_depth_ > 0)
      fail("parallel inside parallel (write one parallel over both extents)");
    where_ = "a parallel loop's extents";
    for (const Expr& e : op->extents) visit(e);
    for (const std::string& v : op->vars) define(v, Type::I64);
    ++parallel_depth_;
    visit(op->body);
    --parallel_depth_;
    for (const std::string& v : op->vars) undefine(v);
  }
  void visit_stmt(const Reduce* op) override {
    if (parallel_depth_ > 0) fail("reduce inside parallel (a reduction needs the whole block)");
    if (if_depth_ > 0) fail("reduce inside if (a reduction needs every thread of the block)");
    where_ = "a reduction";
    visit(op->extent);
    define(op->var, Type::I64);
    in_reduce_value_ = true;
    visit(op->value);
    in_reduce_value_ = false;
    undefine(op->var);
    define(op->name, op->value.type());
    visit(op->body);
    undefine(op->name);
  }
  void visit_stmt(const IfThenElse* op) override {
    where_ = "an if condition";
    visit(op->cond);
    ++if_depth_;
    visit(op->then_case);
    if (op->else_case.defined()) visit(op->else_case);
    --if_depth_;
  }
  void visit_stmt(const Store* op) override {
    check_access(op->buffer, op->indices.size(), "write");
    Decl d = decl(op->buffer);
    if (d.is_global && !d.is_output) fail("write to input '" + op->buffer + "'");
    if (op->value.type() != compute_type(d.dtype))
      fail("storing " + std::string(type_name(op->value.type())) + " into '" + op->buffer + "'");
    where_ = "a store to '" + op->buffer + "'";
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const Assign* op) override { fail("Assign is SIMT IR, not Tile IR"); }
  void visit_stmt(const Copy* op) override {
    Decl dst = decl(op->dst.buffer), src = decl(op->src.buffer);
    if (static_cast<int>(op->dst.origin.size()) != dst.rank ||
        static_cast<int>(op->src.origin.size()) != src.rank)
      fail("copy from '" + op->src.buffer + "' to '" + op->dst.buffer + "' with the wrong rank");
    if (dst.is_global && !dst.is_output) fail("copy into input '" + op->dst.buffer + "'");
    if (compute_type(dst.dtype) != compute_type(src.dtype))
      fail("copy between '" + op->src.buffer + "' and '" + op->dst.buffer + "' of different types");
    if (parallel_depth_ > 0) fail("copy inside parallel (a copy is itself a parallel loop)");
    for (int64_t e : op->dst.extents)
      if (e <= 0) fail("copy with a non-positive extent");
    if (op->async) check_async_copy(*op);
    where_ = "a copy";
    IRVisitor::visit_stmt(op);
  }
  // copy_async moves 16-byte pieces of a global input straight into a shared tile
  // (cp.async.cg): the pieces must be whole and aligned on both sides, and the program must wait.
  void check_async_copy(const Copy& op) {
    const std::string what = "copy_async from '" + op.src.buffer + "' to '" + op.dst.buffer + "'";
    const BufferParam* src = find_buffer(k_.sig, op.src.buffer);
    const TileAlloc* dst = find_alloc(k_, op.dst.buffer);
    if (!src || src->is_output) fail(what + ": the source must be a global input");
    if (!dst || dst->scope != MemScope::Shared)
      fail(what + ": the destination must be a shared tile");
    if (dst->dtype != src->dtype) fail(what + ": it moves bits, so both need one dtype");
    // The whole tile, or a whole panel of it: leading axes of extent 1 (builder.h copy_async;
    // the source's matching axes, where it has them, are of extent 1 too, as the extents match),
    // every later axis whole. A panel's origin is a constant inside the tile or, for a stack of
    // tiles, a run-time stage that analyze_accesses proves inside it.
    bool leading = true;
    for (size_t d = 0; d < op.dst.origin.size(); ++d) {
      int64_t o;
      const bool constant = const_int(op.dst.origin[d], &o);
      const bool whole = constant && o == 0 && op.dst.extents[d] == dst->shape[d];
      const bool panel =
          leading && (!constant || (o >= 0 && o < dst->shape[d])) && op.dst.extents[d] == 1;
      if (!whole && !panel) fail(what + ": the destination is the whole tile or a whole panel");
      leading = leading && panel;
    }
    const int64_t lanes = 16 / dtype_bytes(src->dtype, 1);
    if (op.src.extents.back() % lanes != 0)
      fail(what + ": the innermost extent must be a multiple of " + std::to_string(lanes) +
           " (16-byte pieces)");
    if (dst->layout.rank() > 0 && !(dst->layout == compact_row_major(dst->shape)))
      fail(what + ": the tile must be row-major (under an optional swizzle)");
    if (!dst->swizzle.none() && (int64_t{1} << dst->swizzle.base) % lanes != 0)
      fail(what + ": " + to_string(dst->swizzle) + " splits a 16-byte piece");
    if (!multiple_of(src->shape.back(), lanes) || !multiple_of(op.src.origin.back(), lanes))
      fail(what +
           ": the source's rows and the box's innermost origin must be provably multiples"
           " of " +
           std::to_string(lanes) + " elements (16-byte aligned pieces)");
    has_async_copy_ = true;
  }
  // A constant, a dim declared divisible, a let bound to one, or a sum/product/min/max built
  // from them.
  bool multiple_of(const Expr& e, int64_t n) const {
    int64_t c;
    if (const_int(e, &c)) return c % n == 0;
    if (const Var* v = e.as<Var>()) {
      for (const DimParam& d : k_.sig.dims)
        if (d.name == v->name)  // declared so, or pinned to one value (analyze_accesses)
          return d.bounds.divisible_by % n == 0 ||
                 (d.bounds.min == d.bounds.max && d.bounds.min % n == 0);
      auto let = lets_.find(v->name);
      return let != lets_.end() && multiple_of(let->second, n);
    }
    if (const Binary* b = e.as<Binary>()) {
      if (b->op == BinaryOp::Mul) return multiple_of(b->a, n) || multiple_of(b->b, n);
      // a / c of a multiple of n·c is exact and a multiple of n (FP4 codes: bytes = K / 2).
      int64_t c;
      if (b->op == BinaryOp::Div && const_int(b->b, &c) && c > 0) return multiple_of(b->a, n * c);
      if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub || b->op == BinaryOp::Min ||
          b->op == BinaryOp::Max)
        return multiple_of(b->a, n) && multiple_of(b->b, n);
    }
    return false;
  }
  void visit_stmt(const AsyncCopy* op) override {
    const BufferParam* src = find_buffer(k_.sig, op->src);
    const TileAlloc* dst = find_alloc(k_, op->dst);
    if (!src || src->is_output || !dst || dst->scope != MemScope::Shared)
      fail("async copy from '" + op->src + "' to '" + op->dst +
           "': from a global input into a shared tile");
    if (op->lanes * dtype_bytes(src->dtype, 1) != 16) fail("async copy of other than 16 bytes");
    auto text = [](const std::string& name, const std::vector<Expr>& idx) {
      std::string out = name + "[";
      for (size_t d = 0; d < idx.size(); ++d) out += (d ? ", " : "") + to_string(idx[d]);
      return out + "]";
    };
    const std::string what = "async copy from " + text(op->src, op->src_indices) + " to " +
                             text(op->dst, op->dst_indices);
    if (dst->dtype != src->dtype) fail(what + ": it moves bits, so both need one dtype");
    if (op->dst_indices.size() != dst->shape.size() || op->src_indices.size() != src->shape.size())
      fail(what + " with the wrong rank");
    // 16-byte pieces, aligned on both sides and wholly inside or outside the source: its rows
    // and the piece's column multiples of the lanes; the tile row-major (under a swizzle that
    // moves 16-byte chunks whole) with rows of whole pieces.
    if (!multiple_of(src->shape.back(), op->lanes) ||
        !multiple_of(op->src_indices.back(), op->lanes) || dst->shape.back() % op->lanes != 0 ||
        !multiple_of(op->dst_indices.back(), op->lanes))
      fail(what + ": the source's rows and both innermost indices must be provably multiples of " +
           std::to_string(op->lanes) + " elements (16-byte aligned pieces)");
    if (dst->layout.rank() > 0 && !(dst->layout == compact_row_major(dst->shape)))
      fail(what + ": the tile must be row-major (under an optional swizzle)");
    if (!dst->swizzle.none() && (int64_t{1} << dst->swizzle.base) % op->lanes != 0)
      fail(what + ": " + to_string(dst->swizzle) + " splits a 16-byte piece");
    has_async_copy_ = true;
    where_ = "an async copy";
    IRVisitor::visit_stmt(op);
  }
  // The copy the tensor memory accelerator makes of a box: a tensor map describes the source
  // (rows 16-byte multiples, at most 5 axes, box extents up to 256), and the hardware swizzles
  // the destination by address, so the tile must be row-major under the tensor core's swizzle
  // for rows of the box's innermost bytes, each tile or panel whole periods of it (1024-byte
  // aligned: shared_offsets aligns swizzled arrays so).
  void visit_stmt(const TmaCopy* op) override {
    if (parallel_depth_ > 0) fail("tma_copy inside parallel (thread 0 issues it for the block)");
    const BufferParam* src = find_buffer(k_.sig, op->src);
    const TileAlloc* dst = find_alloc(k_, op->dst);
    const std::string what = "tma_copy from '" + op->src + "' to '" + op->dst + "'";
    if (!src || src->is_output) fail(what + ": the source must be a global input");
    if (!dst || dst->scope != MemScope::Shared)
      fail(what + ": the destination must be a shared tile");
    if (dst->dtype != src->dtype) fail(what + ": it moves bits, so both need one dtype");
    if (op->src_indices.size() != src->shape.size() || op->box.size() != src->shape.size() ||
        op->dst_indices.size() != dst->shape.size())
      fail(what + " with the wrong rank");
    // The destination: leading panel axes, then the box's extents whole, less its 1s but the
    // innermost (they place nothing: the box lands row-major).
    std::vector<int64_t> box(op->box.begin(), op->box.end() - 1);
    std::erase(box, int64_t{1});
    box.push_back(op->box.back());
    if (dst->shape.size() < box.size())
      fail(what + ": the box has more axes than the tile (past its leading extents of 1)");
    const size_t lead = dst->shape.size() - box.size();
    for (size_t d = 0; d < dst->shape.size(); ++d) {
      int64_t o;
      const bool constant = const_int(op->dst_indices[d], &o);
      const bool whole = d >= lead && constant && o == 0 && box[d - lead] == dst->shape[d];
      const bool panel = d < lead && (!constant || (o >= 0 && o < dst->shape[d]));
      if (!whole && !panel) fail(what + ": the destination is the whole tile or a whole panel");
    }
    const int64_t elem = dtype_bytes(src->dtype, 1), row = op->box.back() * elem;
    if (dst->layout.rank() > 0 && !(dst->layout == compact_row_major(dst->shape)))
      fail(what + ": the tile must be row-major (under the tensor core's swizzle)");
    if ((row != 32 && row != 64 && row != 128) ||
        dst->swizzle != tensor_core_swizzle(static_cast<int>(row), static_cast<int>(elem)) ||
        box_elems(op->box) %
                (int64_t{1} << (dst->swizzle.bits + dst->swizzle.base + dst->swizzle.shift)) !=
            0)
      fail(what + ": the tile must be swizzled as the tensor core's " + std::to_string(row) +
           "-byte rows are (the box's innermost extent times the element: 32, 64 or 128 bytes)");
    if (!multiple_of(src->shape.back(), 16 / elem))
      fail(what +
           ": the source's rows must be provably multiples of 16 bytes (a dim declared"
           " divisible)");
    // The hardware refuses a box whose innermost coordinate is not a whole 16 bytes (an illegal
    // instruction on the H200, negative multiples allowed); the CPU model would copy it anyway.
    if (!multiple_of(op->src_indices.back(), 16 / elem))
      fail(what + ": the box's innermost origin must be provably a multiple of 16 bytes (" +
           std::to_string(16 / elem) + " elements)");
    check_mbarrier(op->barrier, what);
    where_ = "a tma_copy";
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const MbarrierInit* op) override {
    if (parallel_depth_ > 0 || if_depth_ > 0) fail("mbarrier_init inside parallel or if");
    check_mbarrier(op->barrier, "mbarrier_init");
  }
  void visit_stmt(const MbarrierWait* op) override {
    if (parallel_depth_ > 0) fail("mbarrier_wait inside parallel");
    check_mbarrier(op->barrier, "mbarrier_wait");
    where_ = "an mbarrier_wait";
    IRVisitor::visit_stmt(op);
  }
  static int64_t box_elems(const std::vector<int64_t>& box) {
    int64_t n = 1;
    for (int64_t e : box) n *= e;
    return n;
  }
  void check_mbarrier(const std::string& name, const std::string& what) const {
    const TileAlloc* b = find_alloc(k_, name);
    if (!b || b->scope != MemScope::Shared || b->dtype != DType::I64 || b->shape.size() != 1 ||
        !b->swizzle.none())
      fail(what + ": '" + name + "' must be a 1-d shared i64 array (the mbarriers)");
  }
  void visit_stmt(const AsyncCommit*) override {
    if (parallel_depth_ > 0) fail("async_commit inside parallel (it closes the thread's group)");
  }
  void visit_stmt(const AsyncWait*) override {
    if (parallel_depth_ > 0) fail("async_wait inside parallel");
    has_async_wait_ = true;
  }
  void visit_stmt(const Barrier*) override {
    if (parallel_depth_ > 0)
      fail("barrier inside parallel (barriers need every thread of the block)");
    if (if_depth_ > 0) fail("barrier inside if (barriers need every thread of the block)");
  }
  // A fragment of shape [threads] (element t held by thread t), the operand of a warp step;
  // null otherwise.
  const TileAlloc* per_thread_fragment(const std::string& name) const {
    const TileAlloc* a = find_alloc(k_, name);
    if (!a || a->scope != MemScope::Fragment || a->shape != std::vector<int64_t>{k_.sig.threads})
      return nullptr;
    return a;
  }
  void visit_stmt(const WarpShuffle* op) override {
    if (parallel_depth_ > 0 || if_depth_ > 0)
      fail("shuffle inside parallel or if (a shuffle needs every thread of the block)");
    const TileAlloc* d = per_thread_fragment(op->dst);
    const TileAlloc* s = per_thread_fragment(op->src);
    if (!d || !s || d->dtype != s->dtype)
      fail("shuffle between '" + op->dst + "' and '" + op->src +
           "': both must be fragments of one dtype and shape [threads]");
    if (op->lane_xor >= std::min(k_.sig.threads, 32))
      fail("shuffle lane_xor " + std::to_string(op->lane_xor) + " leaves the warp");
  }

  void visit_stmt(const WarpBallot* op) override {
    if (parallel_depth_ > 0 || if_depth_ > 0)
      fail("ballot inside parallel or if (a ballot needs every thread of the block)");
    const TileAlloc* d = per_thread_fragment(op->dst);
    const TileAlloc* s = per_thread_fragment(op->src);
    if (!d || !s || d->dtype != DType::I32 || s->dtype != DType::I32)
      fail("ballot of '" + op->src + "' into '" + op->dst +
           "': both must be i32 fragments of shape [threads]");
  }

  // The operands' scopes, dtypes and shapes against the tile extents, and the shapes the tensor
  // core's instruction takes (m64nNk16 per warpgroup, N a multiple of 8 up to 256).
  void visit_stmt(const GemmWait*) override {
    if (parallel_depth_ > 0 || if_depth_ > 0)
      fail("gemm_wait inside parallel or if (it needs every thread of the block)");
  }
  void visit_stmt(const Gemm* op) override {
    if (parallel_depth_ > 0 || if_depth_ > 0)
      fail("gemm inside parallel or if (a gemm needs every thread of the block)");
    const std::string what = "gemm into '" + op->c + "'";
    const TileAlloc* a = find_alloc(k_, op->a);
    const TileAlloc* b = find_alloc(k_, op->b);
    const TileAlloc* c = find_alloc(k_, op->c);
    if (!a || !b || a->scope != MemScope::Shared || b->scope != MemScope::Shared)
      fail(what + ": '" + op->a + "' and '" + op->b + "' must be shared tiles");
    if (!c || c->scope != MemScope::Fragment || c->dtype != DType::F32)
      fail(what + ": the accumulator must be an f32 fragment");
    const bool eight = dtype_is_fp8(a->dtype) && dtype_is_fp8(b->dtype);
    const bool tf32 = a->dtype == DType::F32 && b->dtype == DType::F32;
    if (!eight && !tf32 &&
        (a->dtype != b->dtype || (a->dtype != DType::BF16 && a->dtype != DType::F16)))
      fail(what +
           ": the operands must both be bf16, both f16, both FP8 (e4m3/e5m2) or both f32 (read "
           "as tf32)");
    // FP8 and tf32 wgmma read both operands K-major from shared memory, 32 (FP8) or 8 (tf32) of
    // k an instruction.
    if (eight && (op->trans_a || !op->trans_b || op->k % 32 != 0))
      fail(what +
           ": FP8 operands must both be K-major (a [m, k], b [n, k]: trans_b) with k a "
           "multiple of 32");
    if (tf32 && (op->trans_a || !op->trans_b || op->k % 8 != 0))
      fail(what +
           ": f32 (tf32) operands must both be K-major (a [m, k], b [n, k]: trans_b) with k a "
           "multiple of 8");
    auto shape = [](bool t, int64_t rows, int64_t cols) {
      return t ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
    };
    // At a stage: one tile of each stack, past its leading (stage) axis; the stacks row-major and
    // each tile whole periods of the swizzle (a tile is one contiguous run, swizzled alike).
    const bool staged = op->stage.defined();
    auto tile = [&](const TileAlloc* t, bool stack) {
      if (!stack) return t->shape;
      if (t->shape.size() < 3 || t->shape[0] < 1 ||
          (t->layout.rank() && !(t->layout == compact_row_major(t->shape))))
        fail(what + ": '" + t->name + "' is not a row-major stack of tiles [S, ..tile]");
      if (!tiles_whole_swizzle_periods(t->shape, t->swizzle))
        fail(what + ": the tiles of '" + t->name + "' are not whole periods of " +
             to_string(t->swizzle) + " (each tile must swizzle alike)");
      return std::vector<int64_t>(t->shape.begin() + 1, t->shape.end());
    };
    if (staged && !is_int(op->stage.type())) fail(what + ": the stage is not an integer");
    const std::vector<int64_t> a_tile = tile(a, op->a_staged()), b_tile = tile(b, op->b_staged());
    const bool panels = op->trans_a && a_tile.size() == 3 && op->m % 64 == 0 &&
                        a_tile == std::vector<int64_t>{op->m / 64, op->k, 64} &&
                        (a->layout.rank() == 0 || a->layout == compact_row_major(a->shape));
    if (!panels && a_tile != shape(op->trans_a, op->m, op->k))
      fail(what + ": '" + op->a + "' is not the " + std::to_string(op->m) + " x " +
           std::to_string(op->k) + " tile" + (op->trans_a ? " (transposed)" : ""));
    const bool b_panels = !op->trans_b && b_tile.size() == 3 && op->n % 64 == 0 &&
                          b_tile == std::vector<int64_t>{op->n / 64, op->k, 64} &&
                          (b->layout.rank() == 0 || b->layout == compact_row_major(b->shape));
    if (!b_panels && b_tile != shape(op->trans_b, op->k, op->n))
      fail(what + ": '" + op->b + "' is not the " + std::to_string(op->k) + " x " +
           std::to_string(op->n) + " tile" + (op->trans_b ? " (transposed)" : ""));
    if (c->shape != std::vector<int64_t>{op->m, op->n})
      fail(what + ": the accumulator is not the " + std::to_string(op->m) + " x " +
           std::to_string(op->n) + " tile");
    const int64_t groups = k_.sig.threads / 128;
    if (groups < 1 || op->m % (64 * groups) != 0)
      fail(what + ": " + std::to_string(k_.sig.threads) + " threads (" +
           "warpgroups of 128, each 64 rows at a time) cannot share " + std::to_string(op->m) +
           " rows");
    if (op->n % 8 != 0 || op->n > 256 || op->k % (tf32 ? 8 : 16) != 0)
      fail(what + ": the tile needs n a multiple of 8 up to 256 and k a multiple of " +
           (tf32 ? "8" : "16"));
    IRVisitor::visit_stmt(op);  // the stage's names in scope
  }

  const Kernel& k_;
  std::map<std::string, Type> scope_;
  std::map<std::string, Expr> lets_;  // in scope, for multiple_of
  std::string where_ = "the kernel";
  int parallel_depth_ = 0, if_depth_ = 0;
  bool in_reduce_value_ = false;
  bool has_async_copy_ = false, has_async_wait_ = false;
};

}  // namespace

// A stated tile layout must cover the tile's shape and send distinct coordinates to distinct
// offsets (checked by enumeration: shared tiles are small), or two elements would share a slot.
void verify_tile_layout(const Kernel& kernel, const TileAlloc& a) {
  const Layout& l = a.layout;
  auto fail = [&](const std::string& why) {
    throw Error("kernel '" + kernel.sig.name + "': tile '" + a.name + "' layout " + to_string(l) +
                ": " + why);
  };
  if (a.scope != MemScope::Shared) fail("only shared tiles take a layout");
  if (l.shape != a.shape) fail("its shape is not the tile's");
  for (int64_t d : l.stride)
    if (d < 0) fail("negative strides are not supported");
  if (l.cosize() > (int64_t{1} << 24)) fail("its footprint is over 2^24 elements");
  std::vector<bool> used(static_cast<size_t>(l.cosize()));
  for (int64_t i = 0; i < l.size(); ++i) {
    const int64_t at = l(i);
    if (used[static_cast<size_t>(at)]) fail("two coordinates share offset " + std::to_string(at));
    used[static_cast<size_t>(at)] = true;
  }
  // A swizzle permutes the offsets: proved a bijection of [0, size) point by point, so the
  // swizzled tile still gives every element its own slot inside the allocation.
  if (!a.swizzle.none() && (l.cosize() != l.size() || !is_bijection({a.swizzle, l}, l.size())))
    fail(to_string(a.swizzle) + " is not a bijection of the tile's offsets");
}

void verify_tile(const Kernel& kernel) {
  for (const TileAlloc& a : kernel.allocs) {
    if (find_buffer(kernel.sig, a.name))
      throw Error("kernel '" + kernel.sig.name + "': '" + a.name + "' declared twice");
    if (!a.swizzle.none() && a.layout.rank() == 0)
      throw Error("kernel '" + kernel.sig.name + "': tile '" + a.name +
                  "' is swizzled without a stated layout");
    if (a.layout.rank() > 0) verify_tile_layout(kernel, a);
  }
  TileVerifier(kernel).run();
}

}  // namespace tilerun::compiler
