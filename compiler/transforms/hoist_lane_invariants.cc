#include "compiler/transforms/hoist_lane_invariants.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

// The arrays and buffers a statement writes, and the names it binds.
class Written : public IRVisitor {
 public:
  std::set<std::string> arrays;

 protected:
  void visit_stmt(const Store* op) override {
    arrays.insert(op->buffer);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const VectorMove* op) override {
    arrays.insert(op->dst);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const AsyncCopy* op) override {
    arrays.insert(op->dst);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const TmaCopy* op) override {
    arrays.insert(op->dst);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const WarpShuffle* op) override { arrays.insert(op->dst); }
  void visit_stmt(const WarpBallot* op) override { arrays.insert(op->dst); }
  void visit_stmt(const Gemm* op) override {
    arrays.insert(op->c);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const Assign* op) override {
    arrays.insert(op->name);  // a local: any read of it is not invariant
    IRVisitor::visit_stmt(op);
  }
};

// Whether `e` names none of `bound` and reads nothing in `written`.
class Invariant : public IRVisitor {
 public:
  Invariant(const std::set<std::string>& bound, const std::set<std::string>& written)
      : bound_(bound), written_(written) {}
  bool ok = true;

 protected:
  void visit_expr(const Var* op) override {
    ok = ok && !bound_.count(op->name) && !written_.count(op->name);
  }
  void visit_expr(const Load* op) override {
    ok = ok && !written_.count(op->buffer);
    IRVisitor::visit_expr(op);
  }

 private:
  const std::set<std::string>& bound_;
  const std::set<std::string>& written_;
};

bool invariant(const Expr& e, const std::set<std::string>& bound,
               const std::set<std::string>& written) {
  Invariant v(bound, written);
  v.visit(e);
  return v.ok;
}

class Hoister : public IRMutator {
 public:
  explicit Hoister(const SimtKernel& k) : k_(k), names_(k) {}

 protected:
  Stmt mutate_stmt(const For* op, const Stmt& self) override {
    int64_t trips;
    if (!op->vectorized || !const_int(op->min, &trips) || trips != 0 ||
        !const_int(op->extent, &trips) || trips < 1)
      return IRMutator::mutate_stmt(op, self);
    Written w;
    w.visit(op->body);
    written_ = w.arrays;
    bound_ = {op->var};
    hoisted_.clear();
    found_shared_ = false;
    Stmt body = head(op->body, /*dry=*/true);
    if (!found_shared_) return self;  // nothing worth moving: the loop as it was
    bound_ = {op->var};
    hoisted_.clear();
    body = head(op->body, /*dry=*/false);
    Stmt loop = For::make(op->var, op->min, op->extent, body, true);
    for (auto it = hoisted_.rbegin(); it != hoisted_.rend(); ++it)
      loop = LetStmt::make(it->first, it->second, loop);
    return loop;
  }

 private:
  bool is_shared(const std::string& name) const { return find_shared(k_, name) != nullptr; }

  // The leading lets of a lane loop's body: invariant ones move out, the rest stay (binding
  // their names), their lane-independent shared reads moving out on their own.
  Stmt head(const Stmt& s, bool dry) {
    const LetStmt* l = s.as<LetStmt>();
    if (!l) return s;
    if (invariant(l->value, bound_, written_)) {
      if (reads_shared(l->value)) found_shared_ = true;
      hoisted_.emplace_back(l->name, l->value);
      return head(l->body, dry);
    }
    Expr value = extract(l->value, dry);
    bound_.insert(l->name);
    Stmt rest = head(l->body, dry);
    return dry ? s : LetStmt::make(l->name, value, rest);
  }

  bool reads_shared(const Expr& e) const {
    struct V : IRVisitor {
      const Hoister* h;
      bool found = false;
      void visit_expr(const Load* op) override {
        found = found || h->is_shared(op->buffer);
        IRVisitor::visit_expr(op);
      }
    } v;
    v.h = this;
    v.visit(e);
    return v.found;
  }

  // `e` with its lane-independent shared reads (outside select arms and lazy operands) as vars
  // of lets before the loop.
  Expr extract(const Expr& e, bool dry) {
    if (const Load* ld = e.as<Load>()) {
      if (is_shared(ld->buffer) && invariant(e, bound_, written_)) {
        found_shared_ = true;
        if (dry) return e;
        const std::string name = names_.fresh("lane_inv");
        hoisted_.emplace_back(name, e);
        return Var::make(e.type(), name);
      }
      return e;
    }
    if (const Binary* b = e.as<Binary>()) {
      const bool lazy = b->type == Type::Bool && (b->op == BinaryOp::And || b->op == BinaryOp::Or);
      Expr a = extract(b->a, dry), c = lazy ? b->b : extract(b->b, dry);
      return a.same_as(b->a) && c.same_as(b->b) ? e : Binary::make(b->op, a, c);
    }
    if (const Unary* u = e.as<Unary>()) {
      Expr a = extract(u->a, dry);
      return a.same_as(u->a) ? e : Unary::make(u->op, a);
    }
    if (const Cast* c = e.as<Cast>()) {
      Expr a = extract(c->value, dry);
      return a.same_as(c->value) ? e : Cast::make(c->type, a);
    }
    if (const Bitcast* c = e.as<Bitcast>()) {
      Expr a = extract(c->value, dry);
      return a.same_as(c->value) ? e : Bitcast::make(c->type, a);
    }
    if (const Call* c = e.as<Call>()) {
      std::vector<Expr> args;
      bool changed = false;
      for (const Expr& x : c->args) {
        args.push_back(extract(x, dry));
        changed = changed || !args.back().same_as(x);
      }
      return changed ? Call::make(c->op, std::move(args)) : e;
    }
    return e;  // selects and lets: their arms and bodies stay as they are
  }

  const SimtKernel& k_;
  NameGen names_;
  std::set<std::string> written_, bound_;
  std::vector<std::pair<std::string, Expr>> hoisted_;
  bool found_shared_ = false;
};

}  // namespace

SimtKernel hoist_lane_invariants(const SimtKernel& kernel) {
  SimtKernel out = kernel;
  Hoister h(kernel);
  out.body = h.mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
