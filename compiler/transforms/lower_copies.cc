#include "compiler/transforms/lower_copies.h"

#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

class CopyLowerer : public IRMutator {
 public:
  CopyLowerer(const Kernel& k, NameGen* names) : k_(k), names_(names) {}

 protected:
  Stmt mutate_stmt(const Copy* op, const Stmt&) override {
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
