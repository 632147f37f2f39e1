#include "compiler/transforms/flatten_buffers.h"

#include "compiler/base/check.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/layout_index.h"

namespace tilerun::compiler {
namespace {

class Flattener : public IRMutator {
 public:
  explicit Flattener(const SimtKernel& k) : k_(k) {}

 protected:
  Expr mutate_expr(const Load* op, const Expr&) override {
    bool changed = false;
    std::vector<Expr> idx = mutate_all(op->indices, &changed);
    return Load::make(op->type, op->buffer, {flat(op->buffer, idx)});
  }
  Stmt mutate_stmt(const Store* op, const Stmt&) override {
    bool changed = false;
    std::vector<Expr> idx = mutate_all(op->indices, &changed);
    return Store::make(op->buffer, {flat(op->buffer, idx)}, mutate(op->value));
  }
  // The destination's 16-byte piece stays contiguous under its swizzle (tile_verifier), so the
  // swizzled offset of its first element is the piece's.
  Stmt mutate_stmt(const AsyncCopy* op, const Stmt&) override {
    bool changed = false;
    std::vector<Expr> di = mutate_all(op->dst_indices, &changed);
    std::vector<Expr> si = mutate_all(op->src_indices, &changed);
    return AsyncCopy::make(op->dst, {flat(op->dst, di)}, op->src, {flat(op->src, si)}, op->lanes,
                           mutate(op->valid));
  }
  // The destination tile (or panel) starts at whole periods of its swizzle (tile_verifier),
  // where the swizzle is the identity: the flat offset of its origin. The source keeps its
  // coordinates for the tensor map.
  Stmt mutate_stmt(const TmaCopy* op, const Stmt&) override {
    bool changed = false;
    std::vector<Expr> di = mutate_all(op->dst_indices, &changed);
    std::vector<Expr> si = mutate_all(op->src_indices, &changed);
    return TmaCopy::make(op->dst, {flat(op->dst, di)}, op->src, std::move(si), op->box, op->barrier,
                         mutate(op->barrier_index));
  }

 private:
  Expr flat(const std::string& buffer, const std::vector<Expr>& idx) const {
    std::vector<Expr> shape;
    if (const BufferParam* b = find_buffer(k_.sig, buffer)) {
      shape = b->shape;
    } else if (const SimtArray* s = find_shared(k_, buffer)) {
      // A shared tile follows its layout; row-major when it states none.
      const Layout l = s->layout.rank() > 0 ? s->layout : compact_row_major(s->shape);
      TR_CHECK(l.rank() == static_cast<int>(idx.size()), "index rank of '" + buffer + "'");
      if (s->swizzle.none()) return layout_index(l, idx);
      // layout.h Swizzle: x ^ ((x & (((1 << B) - 1) << (M + S))) >> S). It reads and writes
      // the bits below its period P = 2^(B + M + S) only, so a mode whose stride is a multiple
      // of P (a stack's stage, a tile's panel) adds its term outside: swizzle(o + i) =
      // o + swizzle(i) for o ≡ 0 mod P and i >= 0. The swizzled part is then the same for
      // every stage, which hoist_copy_invariants computes once per thread.
      const Swizzle& sw = s->swizzle;
      const int64_t period = int64_t{1} << (sw.bits + sw.base + sw.shift);
      std::vector<int64_t> in_shape, in_stride;
      std::vector<Expr> in_idx;
      Expr outer;
      for (size_t d = 0; d < idx.size(); ++d) {
        if (l.shape[d] > 1 && l.stride[d] % period == 0) {
          Expr term = mul(idx[d], make_i64(l.stride[d]));
          outer = outer.defined() ? add(outer, term) : term;
        } else {
          in_shape.push_back(l.shape[d]);
          in_stride.push_back(l.stride[d]);
          in_idx.push_back(idx[d]);
        }
      }
      Expr offset =
          in_idx.empty() ? make_i64(0) : layout_index(make_layout(in_shape, in_stride), in_idx);
      Expr mask = make_i64(((int64_t{1} << sw.bits) - 1) << (sw.base + sw.shift));
      Expr moved = Binary::make(BinaryOp::ShrL, Binary::make(BinaryOp::And, offset, mask),
                                make_i64(sw.shift));
      Expr swizzled = Binary::make(BinaryOp::Xor, offset, moved);
      return outer.defined() ? add(outer, swizzled) : swizzled;
    } else {
      TR_CHECK(find_local_array(k_, buffer), "unknown buffer '" + buffer + "'");
      TR_CHECK(idx.size() == 1, "local arrays are 1-d");
      return idx[0];
    }
    TR_CHECK(shape.size() == idx.size(), "index rank of '" + buffer + "'");
    Expr out = idx[0];
    for (size_t d = 1; d < idx.size(); ++d) out = add(mul(out, shape[d]), idx[d]);
    return out;
  }

  const SimtKernel& k_;
};

}  // namespace

SimtKernel flatten_buffers(const SimtKernel& kernel) {
  SimtKernel out = kernel;
  out.body = Flattener(kernel).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
