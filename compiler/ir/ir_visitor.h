// Traversals of the IR, Halide-style: IRVisitor walks every node and recurses by default;
// IRMutator rebuilds the tree bottom-up, reusing nodes whose children did not change. A pass
// overrides only the nodes it cares about and calls the base to keep recursing.
#pragma once

#include <map>
#include <set>
#include <string>

#include "compiler/ir/ir.h"

namespace tilerun::compiler {

class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  void visit(const Expr& e);
  void visit(const Stmt& s);

 protected:
  virtual void visit_expr(const IntImm*) {}
  virtual void visit_expr(const FloatImm*) {}
  virtual void visit_expr(const Var*) {}
  virtual void visit_expr(const Binary* op);
  virtual void visit_expr(const Unary* op);
  virtual void visit_expr(const Select* op);
  virtual void visit_expr(const Cast* op);
  virtual void visit_expr(const Bitcast* op);
  virtual void visit_expr(const Call* op);
  virtual void visit_expr(const Let* op);
  virtual void visit_expr(const Load* op);

  virtual void visit_stmt(const Seq* op);
  virtual void visit_stmt(const LetStmt* op);
  virtual void visit_stmt(const For* op);
  virtual void visit_stmt(const Parallel* op);
  virtual void visit_stmt(const Reduce* op);
  virtual void visit_stmt(const IfThenElse* op);
  virtual void visit_stmt(const Store* op);
  virtual void visit_stmt(const Assign* op);
  virtual void visit_stmt(const Copy* op);
  virtual void visit_stmt(const Barrier*) {}
  virtual void visit_stmt(const VectorMove* op);
  virtual void visit_stmt(const WarpShuffle*) {}
  virtual void visit_stmt(const WarpBallot*) {}
  virtual void visit_stmt(const Gemm* op);
  virtual void visit_stmt(const GemmWait*) {}
  virtual void visit_stmt(const AsyncCopy* op);
  virtual void visit_stmt(const AsyncCommit*) {}
  virtual void visit_stmt(const AsyncWait*) {}
  virtual void visit_stmt(const TmaCopy* op);
  virtual void visit_stmt(const MbarrierInit*) {}
  virtual void visit_stmt(const MbarrierWait* op);
};

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  Expr mutate(const Expr& e);
  Stmt mutate(const Stmt& s);  // undefined in, undefined out

 protected:
  // `self` is the handle of `op`, returned as-is when nothing changes.
  virtual Expr mutate_expr(const IntImm*, const Expr& self) { return self; }
  virtual Expr mutate_expr(const FloatImm*, const Expr& self) { return self; }
  virtual Expr mutate_expr(const Var*, const Expr& self) { return self; }
  virtual Expr mutate_expr(const Binary* op, const Expr& self);
  virtual Expr mutate_expr(const Unary* op, const Expr& self);
  virtual Expr mutate_expr(const Select* op, const Expr& self);
  virtual Expr mutate_expr(const Cast* op, const Expr& self);
  virtual Expr mutate_expr(const Bitcast* op, const Expr& self);
  virtual Expr mutate_expr(const Call* op, const Expr& self);
  virtual Expr mutate_expr(const Let* op, const Expr& self);
  virtual Expr mutate_expr(const Load* op, const Expr& self);

  virtual Stmt mutate_stmt(const Seq* op, const Stmt& self);
  virtual Stmt mutate_stmt(const LetStmt* op, const Stmt& self);
  virtual Stmt mutate_stmt(const For* op, const Stmt& self);
  virtual Stmt mutate_stmt(const Parallel* op, const Stmt& self);
  virtual Stmt mutate_stmt(const Reduce* op, const Stmt& self);
  virtual Stmt mutate_stmt(const IfThenElse* op, const Stmt& self);
  virtual Stmt mutate_stmt(const Store* op, const Stmt& self);
  virtual Stmt mutate_stmt(const Assign* op, const Stmt& self);
  virtual Stmt mutate_stmt(const Copy* op, const Stmt& self);
  virtual Stmt mutate_stmt(const Barrier*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const VectorMove* op, const Stmt& self);
  virtual Stmt mutate_stmt(const WarpShuffle*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const WarpBallot*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const Gemm* op, const Stmt& self);
  virtual Stmt mutate_stmt(const GemmWait*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const AsyncCopy* op, const Stmt& self);
  virtual Stmt mutate_stmt(const AsyncCommit*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const AsyncWait*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const TmaCopy* op, const Stmt& self);
  virtual Stmt mutate_stmt(const MbarrierInit*, const Stmt& self) { return self; }
  virtual Stmt mutate_stmt(const MbarrierWait* op, const Stmt& self);

  std::vector<Expr> mutate_all(const std::vector<Expr>& es, bool* changed);
};

// Whether `s` contains a Barrier anywhere below it, a WarpShuffle, WarpBallot or a Gemm (which
// involve other threads' data, so the CPU backend ends its thread loop there too), or a Reduce
// (which synchronises the block once lowered).
bool contains_barrier(const Stmt& s);
// Whether `e` / `s` reads Var `name`.
bool uses_var(const Expr& e, const std::string& name);
// Whether `e` reads any Var named in `names`.
bool mentions_any(const Expr& e, const std::set<std::string>& names);
// The names `s` binds or writes below it: lets (statement and expression), loop vars, and the
// locals it assigns.
std::set<std::string> bound_names(const Stmt& s);

// Replaces each Var named in `by` by its expression (itself substituted in turn, so a chain of
// inlined lets resolves); other nodes are rebuilt only where a child changed.
class Substitute : public IRMutator {
 public:
  explicit Substitute(std::map<std::string, Expr> by) : by_(std::move(by)) {}

 protected:
  Expr mutate_expr(const Var* op, const Expr& self) override;

 private:
  std::map<std::string, Expr> by_;
};

}  // namespace tilerun::compiler
