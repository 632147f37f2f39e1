#include "compiler/transforms/lower_copies.h"

#include <algorithm>

#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

class CopyLowerer : public IRMutator {
 public:
  CopyLowerer(const Kernel& k, NameGen* names) : k_(k), names_(names) {}

 protected:
  Stmt mutate_stmt(const Copy* op, const Stmt&) override {
    if (op->async) return lower_async(*op);
    size_t rank = op->dst.extents.size();
    std::vector<std::string> vars;
    std::vector<Expr> extents, dst_idx, src_idx;
    for (size_t d = 0; d < rank; ++d) {
      vars.push_back(names_->fresh("cp"));
      Expr v = Var::make(Type::I64, vars.back());
      extents.push_back(make_i64(op->dst.extents[d]));
      dst_idx.push_back(add(op->dst.origin[d], v));
      src_idx.push_back(add(op->src.origin[d], v));
    }
    const BufferParam* src_global = find_buffer(k_.sig, op->src.buffer);
    const BufferParam* dst_global = find_buffer(k_.sig, op->dst.buffer);
    Type t = compute_type(src_global ? src_global->dtype : find_alloc(k_, op->src.buffer)->dtype);

    Stmt body = Store::make(op->dst.buffer, dst_idx, Load::make(t, op->src.buffer, src_idx));
    if (src_global) {
      Expr zero = t == Type::F32 ? make_f32(0.0f) : make_const(t, 0);
      body = IfThenElse::make(in_bounds(*src_global, src_idx), body,
                              Store::make(op->dst.buffer, dst_idx, zero));
    }
    if (dst_global) body = IfThenElse::make(in_bounds(*dst_global, dst_idx), body);
    return Parallel::make(std::move(vars), std::move(extents), body);
  }

 private:
  // copy_async (verified: a global input into a whole row-major shared tile or a whole panel
  // of one, the innermost extent, origin and row length multiples of the lanes): one 16-byte
  // AsyncCopy per piece of the innermost axis, its valid count the piece's elements inside the
  // tensor (all or none when the rows are multiples of the lanes, which the verifier asks). The
  // side of higher rank leads with extents of 1 (builder.h): those axes stay at their origins.
  // The box's origin is block-uniform (a copy is a block statement), so whether the whole box
  // lies inside the tensor is one block-uniform test: then the pieces copy with no per-piece
  // test (valid = lanes), else each piece tests its own bounds. In a K loop every box but the
  // edges' is whole, and the per-piece 64-bit bounds were most of a step's instructions.
  Stmt lower_async(const Copy& op) {
    const BufferParam* src = find_buffer(k_.sig, op.src.buffer);
    const int lanes = static_cast<int>(16 / dtype_bytes(src->dtype, 1));
    const size_t rank = std::min(op.dst.extents.size(), op.src.extents.size());
    const size_t dst_lead = op.dst.extents.size() - rank, src_lead = op.src.extents.size() - rank;
    Expr whole = make_bool(true);
    for (size_t d = 0; d < op.src.extents.size(); ++d) {
      const Expr& at = op.src.origin[d];
      whole = logical_and(whole, Binary::make(BinaryOp::Le, make_i64(0), at));
      whole = logical_and(
          whole, Binary::make(BinaryOp::Le, add(at, make_i64(op.src.extents[d])), src->shape[d]));
    }
    Stmt fast = pieces(op, lanes, rank, dst_lead, src_lead, true);
    return IfThenElse::make(whole, fast, pieces(op, lanes, rank, dst_lead, src_lead, false));
  }

  // The box's pieces; `whole`: the box is known inside, so every piece is valid.
  Stmt pieces(const Copy& op, int lanes, size_t rank, size_t dst_lead, size_t src_lead,
              bool whole) {
    const BufferParam* src = find_buffer(k_.sig, op.src.buffer);
    std::vector<std::string> vars;
    std::vector<Expr> extents;
    std::vector<Expr> dst_idx(op.dst.origin.begin(), op.dst.origin.begin() + dst_lead);
    std::vector<Expr> src_idx(op.src.origin.begin(), op.src.origin.begin() + src_lead);
    Expr outer_ok = make_bool(true), inner_ok;
    for (size_t d = 0; d < src_lead; ++d) {
      outer_ok = logical_and(outer_ok, Binary::make(BinaryOp::Le, make_i64(0), src_idx[d]));
      outer_ok = logical_and(outer_ok, lt(src_idx[d], src->shape[d]));
    }
    for (size_t d = 0; d < rank; ++d) {
      const bool last = d + 1 == rank;
      vars.push_back(names_->fresh("cp"));
      Expr v = Var::make(Type::I64, vars.back());
      extents.push_back(
          make_i64(last ? op.dst.extents[dst_lead + d] / lanes : op.dst.extents[dst_lead + d]));
      Expr e = last ? mul(v, make_i64(lanes)) : v;
      dst_idx.push_back(add(op.dst.origin[dst_lead + d], e));
      src_idx.push_back(add(op.src.origin[src_lead + d], e));
      const Expr& at = src_idx.back();
      if (!last) {
        outer_ok = logical_and(outer_ok, Binary::make(BinaryOp::Le, make_i64(0), at));
        outer_ok = logical_and(outer_ok, lt(at, src->shape[src_lead + d]));
      } else {
        outer_ok = logical_and(outer_ok, Binary::make(BinaryOp::Le, make_i64(0), at));
        inner_ok = lt(at, src->shape[src_lead + d]);
      }
    }
    // The verifier asks the source's rows and the box's innermost origin to be multiples of the
    // lanes, so a piece is all inside or all outside: one comparison, not a clamp.
    Expr valid = whole
                     ? make_i64(lanes)
                     : Select::make(logical_and(outer_ok, inner_ok), make_i64(lanes), make_i64(0));
    return Parallel::make(
        std::move(vars), std::move(extents),
        AsyncCopy::make(op.dst.buffer, dst_idx, op.src.buffer, src_idx, lanes, valid));
  }

  static Expr in_bounds(const BufferParam& b, const std::vector<Expr>& idx) {
    Expr ok = make_bool(true);
    for (size_t d = 0; d < idx.size(); ++d) {
      ok = logical_and(ok, Binary::make(BinaryOp::Le, make_i64(0), idx[d]));
      ok = logical_and(ok, lt(idx[d], b.shape[d]));
    }
    return ok;
  }

  const Kernel& k_;
  NameGen* names_;
};

}  // namespace

Kernel lower_copies(const Kernel& kernel) {
  NameGen names(kernel);
  Kernel out = kernel;
  out.body = CopyLowerer(kernel, &names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
