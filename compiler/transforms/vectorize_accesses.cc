#include "compiler/transforms/vectorize_accesses.h"

#include <map>
#include <set>

#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

// The buffers a statement stores to and the buffers an expression reads.
class Accessed : public IRVisitor {
 public:
  std::set<std::string> stored, loaded;

 protected:
  void visit_expr(const Load* op) override {
    loaded.insert(op->buffer);
    IRVisitor::visit_expr(op);
  }
  void visit_stmt(const Store* op) override {
    stored.insert(op->buffer);
    IRVisitor::visit_stmt(op);
  }
};

// One lane loop's body: global accesses moving with the lane go through local arrays.
class LaneLoop : public IRMutator {
 public:
  LaneLoop(SimtKernel* k, NameGen* names, const For* loop) : k_(k), names_(names), loop_(loop) {
    Accessed b;
    b.visit(loop->body);
    inner_ = bound_names(loop->body);
    stored_ = b.stored;
    inner_.insert(loop->var);
    lanes_ = static_cast<int>(loop->extent.as<IntImm>()->value);
  }
  std::vector<Stmt> before, after;

 protected:
  Stmt mutate_stmt(const LetStmt* op, const Stmt& self) override {
    Expr v = mutate(op->value);
    bool index_let = is_int(op->value.type());
    if (uses_var(op->value, loop_->var)) lins_.insert(op->name);
    if (index_let && aligned_lin(op->value)) aligned_.insert(op->name);
    if (index_let) {
      Expr split = lane_split(op->value);
      if (split.defined()) v = split;
    }
    // An outer parallel var is the same in every lane: it stands for its lane-0 value, so an
    // access through it alone (post[t, i] beside x[t, i, j]) stays a scalar load instead of
    // being read as lanes of consecutive elements.
    if (index_let) lets_[op->name] = outer_var(op->value) ? at_lane0(op->value) : op->value;
    Stmt b = mutate(op->body);
    if (index_let) lets_.erase(op->name);
    if (v.same_as(op->value) && b.same_as(op->body)) return self;
    return LetStmt::make(op->name, v, b);
  }

  Expr mutate_expr(const Load* op, const Expr& self) override {
    std::string tmp = vector_of(op->buffer, op->indices[0], /*store=*/false);
    if (tmp.empty()) return IRMutator::mutate_expr(op, self);
    return Load::make(op->type, tmp, {Var::make(Type::I64, loop_->var)});
  }

  // A guard inside the lane loop (only an accumulator's pairs have one: analyze_accesses proved
  // it has one value over the lanes): the vector moves of the accesses under it go under its
  // lane-0 value. One whose lane-0 value still names something bound inside the loop keeps the
  // accesses under it scalar.
  Stmt mutate_stmt(const IfThenElse* op, const Stmt& self) override {
    Expr cond = mutate(op->cond);
    Expr c0 = at_lane0(op->cond);
    const bool known = !mentions_any(c0, inner_);
    guards_.push_back(known ? c0 : Expr());
    Stmt then_case = mutate(op->then_case);
    Stmt else_case;
    if (op->else_case.defined()) {
      guards_.back() = known ? Unary::make(UnaryOp::Not, c0) : Expr();
      else_case = mutate(op->else_case);
    }
    guards_.pop_back();
    if (cond.same_as(op->cond) && then_case.same_as(op->then_case) &&
        else_case.same_as(op->else_case))
      return self;
    return IfThenElse::make(cond, then_case, else_case);
  }

  Stmt mutate_stmt(const Store* op, const Stmt& self) override {
    Expr v = mutate(op->value);
    std::string tmp = vector_of(op->buffer, op->indices[0], /*store=*/true);
    if (tmp.empty()) return v.same_as(op->value) ? self : Store::make(op->buffer, op->indices, v);
    return Store::make(tmp, {Var::make(Type::I64, loop_->var)}, v);
  }

 private:
  // The local array standing for buffer[index .. + lanes), or "" when the access stays scalar.
  std::string vector_of(const std::string& buffer, const Expr& index, bool store) {
    const BufferParam* b = find_buffer(k_->sig, buffer);
    if (!b) return "";
    Expr full = Substitute(lets_).mutate(index);
    if (!uses_var(full, loop_->var)) return "";
    std::map<std::string, Expr> first{{loop_->var, make_i64(0)}};
    Expr base = Substitute(first).mutate(full);
    Accessed reads;
    reads.visit(base);
    if (mentions_any(base, inner_)) return "";
    // A lane-0 index may read shared or global memory the loop does not write (a gather's row
    // id, staged before a barrier or read from the ids tensor): hoisted before the loop, it
    // reads what every lane would.
    for (const std::string& buf : reads.loaded)
      if (find_local_array(*k_, buf) || stored_.count(buf)) return "";
    Expr guard;
    for (const Expr& g : guards_) {
      if (!g.defined()) return "";
      guard = guard.defined() ? logical_and(guard, g) : g;
    }
    std::string key = (store ? "store " : "load ") + buffer + "[" + to_string(base) + "]" +
                      (guard.defined() ? " if " + to_string(guard) : "");
    auto it = arrays_.find(key);
    if (it != arrays_.end()) return it->second;
    std::string tmp = names_->fresh(buffer + (store ? ".out" : ".in"));
    k_->local_arrays.push_back({tmp, b->dtype, {lanes_}});
    Stmt move = store ? VectorMove::make(buffer, base, tmp, make_i64(0), lanes_)
                      : VectorMove::make(tmp, make_i64(0), buffer, base, lanes_);
    if (guard.defined()) move = IfThenElse::make(guard, move);
    (store ? after : before).push_back(move);
    arrays_.emplace(key, tmp);
    return tmp;
  }

  // lower_parallel binds an outer var of a multi-dimensional parallel as floordiv(lin, S),
  // floormod'ed or not, with lin = group·W + lane and S the product of the inner extents: the
  // innermost extent is a multiple of W wherever the vector was proved (analyze_accesses), so
  // every lane of a vector has the same value. The innermost var is floormod(lin, E) or lin.
  bool outer_var(const Expr& value) const {
    const Binary* b = value.as<Binary>();
    if (b && b->op == BinaryOp::Mod) b = b->a.as<Binary>();
    if (!b || b->op != BinaryOp::Div) return false;
    const Var* lin = b->a.as<Var>();
    return lin && lins_.count(lin->name);
  }

  // lin = e·W + lane (lower_parallel's Horner chain for a compact W-lane layout).
  bool aligned_lin(const Expr& value) const {
    const Binary* b = value.as<Binary>();
    if (!b || b->op != BinaryOp::Add) return false;
    const Var* lane = b->b.as<Var>();
    const Binary* m = b->a.as<Binary>();
    int64_t w = 0;
    return lane && lane->name == loop_->var && m && m->op == BinaryOp::Mul && const_int(m->b, &w) &&
           w == lanes_;
  }

  // A coordinate of an aligned lin, with its divisor (S, or E) a constant multiple of W, peeled
  // from the lane-0 lin: floordiv(lin, S) (floormod'ed or not) is the same in every lane and
  // floormod(lin, E) is its lane-0 value plus the lane. The lanes' arithmetic then differs by
  // the lane alone, so the backends' compilers see one row index per vector instead of one per
  // lane (kernels/quantize.cc read a row's scale once per 8 elements instead of per element).
  // An undefined Expr for anything else.
  Expr lane_split(const Expr& value) const {
    const Binary* b = value.as<Binary>();
    if (!b || (b->op != BinaryOp::Div && b->op != BinaryOp::Mod)) return Expr();
    const Binary* div = b->op == BinaryOp::Mod ? b->a.as<Binary>() : b;
    const bool innermost = !div || div->op != BinaryOp::Div;  // floormod(lin, E)
    if (innermost) div = b;
    const Var* lin = div->a.as<Var>();
    int64_t d = 0;
    if (!lin || !aligned_.count(lin->name) || !const_int(div->b, &d) || d <= 0 || d % lanes_ != 0)
      return Expr();
    if (!innermost) return at_lane0(value);
    return add(at_lane0(value), Var::make(Type::I64, loop_->var));
  }

  Expr at_lane0(const Expr& value) const {
    std::map<std::string, Expr> first{{loop_->var, make_i64(0)}};
    return Substitute(first).mutate(Substitute(lets_).mutate(value));
  }

  SimtKernel* k_;
  NameGen* names_;
  const For* loop_;
  int lanes_ = 1;
  std::set<std::string> lins_;     // lets whose value reads the lane var itself
  std::set<std::string> aligned_;  // lins of the form e·W + lane
  std::set<std::string> inner_;
  std::set<std::string> stored_;  // buffers the loop body writes
  std::map<std::string, Expr> lets_;
  std::map<std::string, std::string> arrays_;  // access key → local array
  std::vector<Expr> guards_;  // lane-0 values of the enclosing guards (undefined: unknown)
};

class Vectorizer : public IRMutator {
 public:
  Vectorizer(SimtKernel* k, NameGen* names) : k_(k), names_(names) {}

 protected:
  Stmt mutate_stmt(const For* op, const Stmt& self) override {
    if (!op->vectorized) return IRMutator::mutate_stmt(op, self);
    LaneLoop lanes(k_, names_, op);
    Stmt body = lanes.mutate(op->body);
    std::vector<Stmt> out = std::move(lanes.before);
    out.push_back(For::make(op->var, op->min, op->extent, body, true));
    out.insert(out.end(), lanes.after.begin(), lanes.after.end());
    return Seq::make(std::move(out));
  }

 private:
  SimtKernel* k_;
  NameGen* names_;
};

}  // namespace

SimtKernel vectorize_accesses(const SimtKernel& kernel) {
  NameGen names(kernel);
  SimtKernel out = kernel;
  out.body = Vectorizer(&out, &names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
