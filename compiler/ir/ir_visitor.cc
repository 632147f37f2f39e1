#include "compiler/ir/ir_visitor.h"

#include "compiler/base/check.h"

namespace tilerun::compiler {

void IRVisitor::visit(const Expr& e) {
  TR_CHECK(e.defined(), "visiting an undefined Expr");
  switch (e->kind) {
    case ExprKind::IntImm:
      return visit_expr(e.as<IntImm>());
    case ExprKind::FloatImm:
      return visit_expr(e.as<FloatImm>());
    case ExprKind::Var:
      return visit_expr(e.as<Var>());
    case ExprKind::Binary:
      return visit_expr(e.as<Binary>());
    case ExprKind::Unary:
      return visit_expr(e.as<Unary>());
    case ExprKind::Select:
      return visit_expr(e.as<Select>());
    case ExprKind::Cast:
      return visit_expr(e.as<Cast>());
    case ExprKind::Bitcast:
      return visit_expr(e.as<Bitcast>());
    case ExprKind::Call:
      return visit_expr(e.as<Call>());
    case ExprKind::Let:
      return visit_expr(e.as<Let>());
    case ExprKind::Load:
      return visit_expr(e.as<Load>());
  }
}

void IRVisitor::visit(const Stmt& s) {
  TR_CHECK(s.defined(), "visiting an undefined Stmt");
  switch (s->kind) {
    case StmtKind::Seq:
      return visit_stmt(s.as<Seq>());
    case StmtKind::LetStmt:
      return visit_stmt(s.as<LetStmt>());
    case StmtKind::For:
      return visit_stmt(s.as<For>());
    case StmtKind::Parallel:
      return visit_stmt(s.as<Parallel>());
    case StmtKind::Reduce:
      return visit_stmt(s.as<Reduce>());
    case StmtKind::IfThenElse:
      return visit_stmt(s.as<IfThenElse>());
    case StmtKind::Store:
      return visit_stmt(s.as<Store>());
    case StmtKind::Assign:
      return visit_stmt(s.as<Assign>());
    case StmtKind::Copy:
      return visit_stmt(s.as<Copy>());
    case StmtKind::Barrier:
      return visit_stmt(s.as<Barrier>());
    case StmtKind::VectorMove:
      return visit_stmt(s.as<VectorMove>());
    case StmtKind::WarpShuffle:
      return visit_stmt(s.as<WarpShuffle>());
    case StmtKind::WarpBallot:
      return visit_stmt(s.as<WarpBallot>());
    case StmtKind::Gemm:
      return visit_stmt(s.as<Gemm>());
    case StmtKind::GemmWait:
      return visit_stmt(s.as<GemmWait>());
    case StmtKind::AsyncCopy:
      return visit_stmt(s.as<AsyncCopy>());
    case StmtKind::AsyncCommit:
      return visit_stmt(s.as<AsyncCommit>());
    case StmtKind::AsyncWait:
      return visit_stmt(s.as<AsyncWait>());
    case StmtKind::TmaCopy:
      return visit_stmt(s.as<TmaCopy>());
    case StmtKind::MbarrierInit:
      return visit_stmt(s.as<MbarrierInit>());
    case StmtKind::MbarrierWait:
      return visit_stmt(s.as<MbarrierWait>());
  }
}

void IRVisitor::visit_expr(const Binary* op) {
  visit(op->a);
  visit(op->b);
}
void IRVisitor::visit_expr(const Unary* op) { visit(op->a); }
void IRVisitor::visit_expr(const Select* op) {
  visit(op->cond);
  visit(op->true_value);
  visit(op->false_value);
}
void IRVisitor::visit_expr(const Cast* op) { visit(op->value); }
void IRVisitor::visit_expr(const Bitcast* op) { visit(op->value); }
void IRVisitor::visit_expr(const Call* op) {
  for (const Expr& a : op->args) visit(a);
}
void IRVisitor::visit_expr(const Let* op) {
  visit(op->value);
  visit(op->body);
}
void IRVisitor::visit_expr(const Load* op) {
  for (const Expr& i : op->indices) visit(i);
}

void IRVisitor::visit_stmt(const Seq* op) {
  for (const Stmt& s : op->stmts) visit(s);
}
void IRVisitor::visit_stmt(const LetStmt* op) {
  visit(op->value);
  visit(op->body);
}
void IRVisitor::visit_stmt(const For* op) {
  visit(op->min);
  visit(op->extent);
  visit(op->body);
}
void IRVisitor::visit_stmt(const Parallel* op) {
  for (const Expr& e : op->extents) visit(e);
  visit(op->body);
}
void IRVisitor::visit_stmt(const Reduce* op) {
  visit(op->extent);
  visit(op->value);
  visit(op->body);
}
void IRVisitor::visit_stmt(const IfThenElse* op) {
  visit(op->cond);
  visit(op->then_case);
  if (op->else_case.defined()) visit(op->else_case);
}
void IRVisitor::visit_stmt(const Store* op) {
  for (const Expr& i : op->indices) visit(i);
  visit(op->value);
}
void IRVisitor::visit_stmt(const Assign* op) { visit(op->value); }
void IRVisitor::visit_stmt(const Copy* op) {
  for (const Expr& e : op->dst.origin) visit(e);
  for (const Expr& e : op->src.origin) visit(e);
}
void IRVisitor::visit_stmt(const VectorMove* op) {
  visit(op->dst_index);
  visit(op->src_index);
}
void IRVisitor::visit_stmt(const Gemm* op) {
  if (op->stage.defined()) visit(op->stage);
}
void IRVisitor::visit_stmt(const AsyncCopy* op) {
  for (const Expr& e : op->dst_indices) visit(e);
  for (const Expr& e : op->src_indices) visit(e);
  visit(op->valid);
}
void IRVisitor::visit_stmt(const TmaCopy* op) {
  for (const Expr& e : op->dst_indices) visit(e);
  for (const Expr& e : op->src_indices) visit(e);
  visit(op->barrier_index);
}
void IRVisitor::visit_stmt(const MbarrierWait* op) {
  visit(op->index);
  visit(op->parity);
}

// ---------------------------------------------------------------------------------------------

Expr IRMutator::mutate(const Expr& e) {
  TR_CHECK(e.defined(), "mutating an undefined Expr");
  switch (e->kind) {
    case ExprKind::IntImm:
      return mutate_expr(e.as<IntImm>(), e);
    case ExprKind::FloatImm:
      return mutate_expr(e.as<FloatImm>(), e);
    case ExprKind::Var:
      return mutate_expr(e.as<Var>(), e);
    case ExprKind::Binary:
      return mutate_expr(e.as<Binary>(), e);
    case ExprKind::Unary:
      return mutate_expr(e.as<Unary>(), e);
    case ExprKind::Select:
      return mutate_expr(e.as<Select>(), e);
    case ExprKind::Cast:
      return mutate_expr(e.as<Cast>(), e);
    case ExprKind::Bitcast:
      return mutate_expr(e.as<Bitcast>(), e);
    case ExprKind::Call:
      return mutate_expr(e.as<Call>(), e);
    case ExprKind::Let:
      return mutate_expr(e.as<Let>(), e);
    case ExprKind::Load:
      return mutate_expr(e.as<Load>(), e);
  }
  return e;
}

Stmt IRMutator::mutate(const Stmt& s) {
  if (!s.defined()) return s;
  switch (s->kind) {
    case StmtKind::Seq:
      return mutate_stmt(s.as<Seq>(), s);
    case StmtKind::LetStmt:
      return mutate_stmt(s.as<LetStmt>(), s);
    case StmtKind::For:
      return mutate_stmt(s.as<For>(), s);
    case StmtKind::Parallel:
      return mutate_stmt(s.as<Parallel>(), s);
    case StmtKind::Reduce:
      return mutate_stmt(s.as<Reduce>(), s);
    case StmtKind::IfThenElse:
      return mutate_stmt(s.as<IfThenElse>(), s);
    case StmtKind::Store:
      return mutate_stmt(s.as<Store>(), s);
    case StmtKind::Assign:
      return mutate_stmt(s.as<Assign>(), s);
    case StmtKind::Copy:
      return mutate_stmt(s.as<Copy>(), s);
    case StmtKind::Barrier:
      return mutate_stmt(s.as<Barrier>(), s);
    case StmtKind::VectorMove:
      return mutate_stmt(s.as<VectorMove>(), s);
    case StmtKind::WarpShuffle:
      return mutate_stmt(s.as<WarpShuffle>(), s);
    case StmtKind::WarpBallot:
      return mutate_stmt(s.as<WarpBallot>(), s);
    case StmtKind::Gemm:
      return mutate_stmt(s.as<Gemm>(), s);
    case StmtKind::GemmWait:
      return mutate_stmt(s.as<GemmWait>(), s);
    case StmtKind::AsyncCopy:
      return mutate_stmt(s.as<AsyncCopy>(), s);
    case StmtKind::AsyncCommit:
      return mutate_stmt(s.as<AsyncCommit>(), s);
    case StmtKind::AsyncWait:
      return mutate_stmt(s.as<AsyncWait>(), s);
    case StmtKind::TmaCopy:
      return mutate_stmt(s.as<TmaCopy>(), s);
    case StmtKind::MbarrierInit:
      return mutate_stmt(s.as<MbarrierInit>(), s);
    case StmtKind::MbarrierWait:
      return mutate_stmt(s.as<MbarrierWait>(), s);
  }
  return s;
}

std::vector<Expr> IRMutator::mutate_all(const std::vector<Expr>& es, bool* changed) {
  std::vector<Expr> out;
  out.reserve(es.size());
  for (const Expr& e : es) {
    out.push_back(mutate(e));
    if (!out.back().same_as(e)) *changed = true;
  }
  return out;
}

Expr IRMutator::mutate_expr(const Binary* op, const Expr& self) {
  Expr a = mutate(op->a), b = mutate(op->b);
  if (a.same_as(op->a) && b.same_as(op->b)) return self;
  return Binary::make(op->op, a, b);
}
Expr IRMutator::mutate_expr(const Unary* op, const Expr& self) {
  Expr a = mutate(op->a);
  return a.same_as(op->a) ? self : Unary::make(op->op, a);
}
Expr IRMutator::mutate_expr(const Select* op, const Expr& self) {
  Expr c = mutate(op->cond), t = mutate(op->true_value), f = mutate(op->false_value);
  if (c.same_as(op->cond) && t.same_as(op->true_value) && f.same_as(op->false_value)) return self;
  return Select::make(c, t, f);
}
Expr IRMutator::mutate_expr(const Cast* op, const Expr& self) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : Cast::make(op->type, v);
}
Expr IRMutator::mutate_expr(const Bitcast* op, const Expr& self) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : Bitcast::make(op->type, v);
}
Expr IRMutator::mutate_expr(const Call* op, const Expr& self) {
  bool changed = false;
  std::vector<Expr> args = mutate_all(op->args, &changed);
  return changed ? Call::make(op->op, std::move(args)) : self;
}
Expr IRMutator::mutate_expr(const Let* op, const Expr& self) {
  Expr v = mutate(op->value), b = mutate(op->body);
  if (v.same_as(op->value) && b.same_as(op->body)) return self;
  return Let::make(op->name, v, b);
}
Expr IRMutator::mutate_expr(const Load* op, const Expr& self) {
  bool changed = false;
  std::vector<Expr> idx = mutate_all(op->indices, &changed);
  return changed ? Load::make(op->type, op->buffer, std::move(idx)) : self;
}

Stmt IRMutator::mutate_stmt(const Seq* op, const Stmt& self) {
  std::vector<Stmt> out;
  bool changed = false;
  for (const Stmt& s : op->stmts) {
    out.push_back(mutate(s));
    if (!out.back().same_as(s)) changed = true;
  }
  return changed ? Seq::make(std::move(out)) : self;
}
Stmt IRMutator::mutate_stmt(const LetStmt* op, const Stmt& self) {
  Expr v = mutate(op->value);
  Stmt b = mutate(op->body);
  if (v.same_as(op->value) && b.same_as(op->body)) return self;
  return LetStmt::make(op->name, v, b);
}
Stmt IRMutator::mutate_stmt(const For* op, const Stmt& self) {
  Expr mn = mutate(op->min), ext = mutate(op->extent);
  Stmt b = mutate(op->body);
  if (mn.same_as(op->min) && ext.same_as(op->extent) && b.same_as(op->body)) return self;
  return For::make(op->var, mn, ext, b, op->vectorized);
}
Stmt IRMutator::mutate_stmt(const Parallel* op, const Stmt& self) {
  bool changed = false;
  std::vector<Expr> ext = mutate_all(op->extents, &changed);
  Stmt b = mutate(op->body);
  if (!changed && b.same_as(op->body)) return self;
  return Parallel::make(op->vars, std::move(ext), b, op->layout);
}
Stmt IRMutator::mutate_stmt(const Reduce* op, const Stmt& self) {
  Expr ext = mutate(op->extent), v = mutate(op->value);
  Stmt b = mutate(op->body);
  if (ext.same_as(op->extent) && v.same_as(op->value) && b.same_as(op->body)) return self;
  return Reduce::make(op->name, op->op, op->var, ext, v, b);
}
Stmt IRMutator::mutate_stmt(const IfThenElse* op, const Stmt& self) {
  Expr c = mutate(op->cond);
  Stmt t = mutate(op->then_case), e = mutate(op->else_case);
  if (c.same_as(op->cond) && t.same_as(op->then_case) && e.same_as(op->else_case)) return self;
  return IfThenElse::make(c, t, e);
}
Stmt IRMutator::mutate_stmt(const Store* op, const Stmt& self) {
  bool changed = false;
  std::vector<Expr> idx = mutate_all(op->indices, &changed);
  Expr v = mutate(op->value);
  if (!changed && v.same_as(op->value)) return self;
  return Store::make(op->buffer, std::move(idx), v);
}
Stmt IRMutator::mutate_stmt(const Assign* op, const Stmt& self) {
  Expr v = mutate(op->value);
  return v.same_as(op->value) ? self : Assign::make(op->name, v);
}
Stmt IRMutator::mutate_stmt(const Copy* op, const Stmt& self) {
  bool changed = false;
  Region dst = op->dst, src = op->src;
  dst.origin = mutate_all(op->dst.origin, &changed);
  src.origin = mutate_all(op->src.origin, &changed);
  return changed ? Copy::make(std::move(dst), std::move(src), op->async) : self;
}

Stmt IRMutator::mutate_stmt(const Gemm* op, const Stmt& self) {
  if (!op->stage.defined()) return self;
  Expr st = mutate(op->stage);
  if (st.same_as(op->stage)) return self;
  return Gemm::make(op->c, op->a, op->b, op->trans_a, op->trans_b, op->m, op->n, op->k, op->pending,
                    st, op->stage_a, op->stage_b);
}

Stmt IRMutator::mutate_stmt(const AsyncCopy* op, const Stmt& self) {
  bool changed = false;
  std::vector<Expr> di = mutate_all(op->dst_indices, &changed);
  std::vector<Expr> si = mutate_all(op->src_indices, &changed);
  Expr v = mutate(op->valid);
  if (!changed && v.same_as(op->valid)) return self;
  return AsyncCopy::make(op->dst, std::move(di), op->src, std::move(si), op->lanes, v);
}

Stmt IRMutator::mutate_stmt(const TmaCopy* op, const Stmt& self) {
  bool changed = false;
  std::vector<Expr> di = mutate_all(op->dst_indices, &changed);
  std::vector<Expr> si = mutate_all(op->src_indices, &changed);
  Expr bi = mutate(op->barrier_index);
  if (!changed && bi.same_as(op->barrier_index)) return self;
  return TmaCopy::make(op->dst, std::move(di), op->src, std::move(si), op->box, op->barrier, bi);
}

Stmt IRMutator::mutate_stmt(const MbarrierWait* op, const Stmt& self) {
  Expr i = mutate(op->index), p = mutate(op->parity);
  if (i.same_as(op->index) && p.same_as(op->parity)) return self;
  return MbarrierWait::make(op->barrier, i, p);
}

Stmt IRMutator::mutate_stmt(const VectorMove* op, const Stmt& self) {
  Expr d = mutate(op->dst_index), s = mutate(op->src_index);
  if (d.same_as(op->dst_index) && s.same_as(op->src_index)) return self;
  return VectorMove::make(op->dst, d, op->src, s, op->lanes);
}

namespace {
class BarrierFinder : public IRVisitor {
 public:
  bool found = false;

 protected:
  void visit_stmt(const Barrier*) override { found = true; }
  void visit_stmt(const WarpShuffle*) override { found = true; }
  void visit_stmt(const WarpBallot*) override { found = true; }
  // A gemm reads every thread's tiles and, like a shuffle, runs as a block-wide step.
  void visit_stmt(const Gemm*) override { found = true; }
  // Reductions synchronise internally once lowered.
  void visit_stmt(const Reduce* op) override { found = true; }
};

class VarFinder : public IRVisitor {
 public:
  explicit VarFinder(const std::string& n) : name(n) {}
  const std::string& name;
  bool found = false;

 protected:
  void visit_expr(const Var* op) override { found = found || op->name == name; }
};
}  // namespace

bool contains_barrier(const Stmt& s) {
  BarrierFinder f;
  f.visit(s);
  return f.found;
}

bool uses_var(const Expr& e, const std::string& name) {
  VarFinder f(name);
  f.visit(e);
  return f.found;
}

bool mentions_any(const Expr& e, const std::set<std::string>& names) {
  struct V : IRVisitor {
    const std::set<std::string>* names = nullptr;
    bool found = false;
    void visit_expr(const Var* op) override { found = found || names->count(op->name) > 0; }
  } v;
  v.names = &names;
  v.visit(e);
  return v.found;
}

std::set<std::string> bound_names(const Stmt& s) {
  struct V : IRVisitor {
    std::set<std::string> names;
    void visit_stmt(const LetStmt* op) override {
      names.insert(op->name);
      IRVisitor::visit_stmt(op);
    }
    void visit_stmt(const For* op) override {
      names.insert(op->var);
      IRVisitor::visit_stmt(op);
    }
    void visit_stmt(const Assign* op) override {
      names.insert(op->name);
      IRVisitor::visit_stmt(op);
    }
    void visit_expr(const Let* op) override {
      names.insert(op->name);
      IRVisitor::visit_expr(op);
    }
  } v;
  v.visit(s);
  return v.names;
}

Expr Substitute::mutate_expr(const Var* op, const Expr& self) {
  auto it = by_.find(op->name);
  return it == by_.end() ? self : mutate(it->second);
}

}  // namespace tilerun::compiler
