#include "compiler/transforms/hoist_copy_invariants.h"

#include <map>
#include <set>

#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

// Piece loops longer than this stay loops (unrolling them would only grow the code).
constexpr int64_t kMaxUnroll = 8;

bool contains_async_copy(const Stmt& s) {
  struct V : IRVisitor {
    bool found = false;
    void visit_stmt(const AsyncCopy*) override { found = true; }
  } v;
  v.visit(s);
  return v.found;
}

// Pure integer arithmetic that cannot fault wherever it is evaluated: vars, constants, integer
// and boolean operators, selects and integer casts; division and modulo only by a positive
// constant (not by 0, nor by -1, which overflows on the most negative value). No loads, calls,
// lets or floats.
bool pure_int(const Expr& e) {
  if (is_float(e.type())) return false;
  if (e.as<IntImm>() || e.as<Var>()) return true;
  if (const Binary* b = e.as<Binary>()) {
    if (b->op == BinaryOp::Div || b->op == BinaryOp::Mod) {
      int64_t d;
      if (!const_int(b->b, &d) || d <= 0) return false;
    }
    return pure_int(b->a) && pure_int(b->b);
  }
  if (const Unary* u = e.as<Unary>()) return pure_int(u->a);
  if (const Select* s = e.as<Select>())
    return pure_int(s->cond) && pure_int(s->true_value) && pure_int(s->false_value);
  if (const Cast* c = e.as<Cast>()) return pure_int(c->value);
  return false;
}

// Whether a piece loop's body is only lets with pure values, ifs and async copies.
bool simple_piece_body(const Stmt& s) {
  if (!s.defined()) return true;
  if (const Seq* q = s.as<Seq>()) {
    for (const Stmt& x : q->stmts)
      if (!simple_piece_body(x)) return false;
    return true;
  }
  if (const LetStmt* l = s.as<LetStmt>()) return pure_int(l->value) && simple_piece_body(l->body);
  if (const IfThenElse* i = s.as<IfThenElse>())
    return simple_piece_body(i->then_case) && simple_piece_body(i->else_case);
  return s.as<AsyncCopy>() != nullptr;
}

// Step 1: piece loops unrolled, their lets inlined.
class PieceUnroller : public IRMutator {
 protected:
  Stmt mutate_stmt(const For* op, const Stmt& self) override {
    int64_t lo, n;
    if (op->vectorized || !const_int(op->min, &lo) || !const_int(op->extent, &n) || n < 1 ||
        n > kMaxUnroll || !contains_async_copy(op->body) || !simple_piece_body(op->body))
      return IRMutator::mutate_stmt(op, self);
    std::vector<Stmt> pieces;
    for (int64_t i = 0; i < n; ++i) {
      Substitute at({{op->var, make_i64(lo + i)}});
      pieces.push_back(inline_lets(at.mutate(op->body)));
    }
    return Seq::make(std::move(pieces));
  }

 private:
  static Stmt inline_lets(const Stmt& s) {
    if (const LetStmt* l = s.as<LetStmt>())
      return inline_lets(Substitute({{l->name, l->value}}).mutate(l->body));
    if (const Seq* q = s.as<Seq>()) {
      std::vector<Stmt> out;
      for (const Stmt& x : q->stmts) out.push_back(inline_lets(x));
      return Seq::make(std::move(out));
    }
    if (const IfThenElse* i = s.as<IfThenElse>())
      return IfThenElse::make(i->cond, inline_lets(i->then_case),
                              i->else_case.defined() ? inline_lets(i->else_case) : Stmt());
    return s;
  }
};

// Step 2: in a serial loop that issues async copies, the copies' invariant arithmetic as lets
// before the loop. Inner loops first, so that what an inner loop hoisted is seen by the outer.
class Hoister : public IRMutator {
 public:
  const std::vector<SimtLocal>& hoisted() const { return hoisted_; }
  Hoister(const SimtKernel& k, NameGen* names) : names_(names) {
    for (const SimtLocal& l : k.locals) locals_.insert(l.name);
  }

 protected:
  Stmt mutate_stmt(const For* op, const Stmt& self) override {
    Stmt inner = IRMutator::mutate_stmt(op, self);
    const For* loop = inner.as<For>();
    if (!loop || loop->vectorized || !contains_async_copy(loop->body)) return inner;
    LoopHoist h;
    h.variant = bound_names(loop->body);
    h.variant.insert(loop->var);
    h.variant.insert(locals_.begin(), locals_.end());
    h.names = names_;
    Stmt body = h.mutate(loop->body);
    if (h.lets.empty()) return inner;
    // Mutable locals, not lets: the loop's barriers end the CPU backend's thread loops, and a
    // let may not live across them (simt_verifier); a local keeps its value per thread.
    std::vector<Stmt> out;
    for (const auto& [name, value] : h.lets) {
      hoisted_.push_back({name, value.type()});
      out.push_back(Assign::make(name, value));
    }
    out.push_back(For::make(loop->var, loop->min, loop->extent, body, loop->vectorized));
    return Seq::make(std::move(out));
  }

 private:
  class LoopHoist : public IRMutator {
   public:
    std::set<std::string> variant;
    NameGen* names = nullptr;
    std::vector<std::pair<std::string, Expr>> lets;  // in order of first use

   protected:
    Stmt mutate_stmt(const AsyncCopy* op, const Stmt&) override {
      std::vector<Expr> di, si;
      for (const Expr& e : op->dst_indices) di.push_back(hoist(e));
      for (const Expr& e : op->src_indices) si.push_back(hoist(e));
      return AsyncCopy::make(op->dst, std::move(di), op->src, std::move(si), op->lanes,
                             hoist(op->valid));
    }

   private:
    // The largest invariant subexpressions of `e` replaced by hoisted vars.
    Expr hoist(const Expr& e) {
      if (e.as<Var>() || e.as<IntImm>()) return e;
      if (pure_int(e) && !mentions_any(e, variant)) {
        const std::string key = to_string(e);
        auto it = by_text_.find(key);
        if (it == by_text_.end()) {
          const std::string name = names->fresh("hoisted");
          lets.emplace_back(name, e);
          it = by_text_.emplace(key, name).first;
        }
        return Var::make(e.type(), it->second);
      }
      if (const Binary* b = e.as<Binary>()) return Binary::make(b->op, hoist(b->a), hoist(b->b));
      if (const Unary* u = e.as<Unary>()) return Unary::make(u->op, hoist(u->a));
      if (const Select* s = e.as<Select>())
        return Select::make(hoist(s->cond), hoist(s->true_value), hoist(s->false_value));
      if (const Cast* c = e.as<Cast>()) return Cast::make(c->type, hoist(c->value));
      return e;
    }
    std::map<std::string, std::string> by_text_;
  };

  std::vector<SimtLocal> hoisted_;
  NameGen* names_;
  std::set<std::string> locals_;
};

}  // namespace

SimtKernel hoist_copy_invariants(const SimtKernel& kernel) {
  if (!contains_async_copy(kernel.body)) return kernel;
  SimtKernel out = kernel;
  out.body = PieceUnroller().mutate(kernel.body);
  NameGen names(out);
  Hoister hoister(out, &names);
  out.body = hoister.mutate(out.body);
  out.locals.insert(out.locals.end(), hoister.hoisted().begin(), hoister.hoisted().end());
  return out;
}

}  // namespace tilerun::compiler
