#include "compiler/transforms/vectorize_accesses.h"

#include <map>
#include <set>

#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

// The buffers a statement stores to and the buffers an expression reads, and how many store
// statements each buffer has.
class Accessed : public IRVisitor {
 public:
  std::set<std::string> stored, loaded;
  std::map<std::string, int> stores;

 protected:
  void visit_expr(const Load* op) override {
    loaded.insert(op->buffer);
    IRVisitor::visit_expr(op);
  }
  void visit_stmt(const Store* op) override {
    stored.insert(op->buffer);
    ++stores[op->buffer];
    IRVisitor::visit_stmt(op);
  }
};

// The buffers a statement loads after storing to them, in program order (a store's value and
// indices are read before it writes): an epilogue that stores a product and reads it back to add
// to it. Their accesses stay scalar: a vector load runs before the loop and a vector store after
// it, so the load would miss what the loop stored.
class LoadedAfterStored : public IRVisitor {
 public:
  std::set<std::string> buffers;

 protected:
  void visit_expr(const Load* op) override {
    if (stored_.count(op->buffer)) buffers.insert(op->buffer);
    IRVisitor::visit_expr(op);
  }
  void visit_stmt(const Store* op) override {
    IRVisitor::visit_stmt(op);
    stored_.insert(op->buffer);
  }

 private:
  std::set<std::string> stored_;
};

// Whether e is a multiple of w (a power of two) whatever its variables hold, in wrapping integer
// arithmetic: multiples of w combined by +, -, ^, | and % (floor or not), a product, mask or left
// shift with a factor that is one, or a logical right shift by c of a multiple of w << c.
bool multiple_of(const Expr& e, int64_t w) {
  int64_t v = 0;
  if (const_int(e, &v)) return v % w == 0;
  const Binary* b = e.as<Binary>();
  if (!b) return false;
  int64_t c = 0;
  switch (b->op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Xor:
    case BinaryOp::Or:
    case BinaryOp::Mod:
      return multiple_of(b->a, w) && multiple_of(b->b, w);
    case BinaryOp::And:
    case BinaryOp::Mul:
      return multiple_of(b->a, w) || multiple_of(b->b, w);
    case BinaryOp::Shl:
      return multiple_of(b->a, w) ||
             (const_int(b->b, &c) && c >= 0 && c < 62 && (int64_t{1} << c) % w == 0);
    case BinaryOp::ShrL:
      return const_int(b->b, &c) && c >= 0 && c < 32 && multiple_of(b->a, w << c);
    default:
      return false;
  }
}

// For a lane var in [0, w) (w a power of two): e as base + lane, the base free of the lane and a
// multiple of w, where that holds for every lane; else undefined. Through sums, and through a
// swizzle's XOR (flatten_buffers: L ^ ((L & M) >> s) with L = base + lane): where M and the
// shifted mask keep no bit below w, the lane moves neither the mask's bits nor the bits the XOR
// flips, so (base + lane) ^ y = (base ^ y) + lane. A 16-byte run of a 128-byte-swizzled tile is
// contiguous in memory, which is what this proves.
Expr lane_base(const Expr& e, const std::string& lane, int64_t w);

// e with the lane var gone, where e has one value over the lanes (a swizzle's mask of base + lane
// keeping no bit below w); else undefined.
Expr lane_free(const Expr& e, const std::string& lane, int64_t w) {
  if (!uses_var(e, lane)) return e;
  const Binary* b = e.as<Binary>();
  int64_t c = 0;
  if (!b || !const_int(b->b, &c)) return Expr();
  if (b->op == BinaryOp::And && c % w == 0) {
    Expr base = lane_base(b->a, lane, w);
    if (base.defined()) return Binary::make(BinaryOp::And, base, b->b);
  }
  if (b->op == BinaryOp::And || b->op == BinaryOp::ShrL || b->op == BinaryOp::ShrA ||
      b->op == BinaryOp::Shl) {
    Expr a = lane_free(b->a, lane, w);
    if (a.defined()) return Binary::make(b->op, a, b->b);
  }
  return Expr();
}

Expr lane_base(const Expr& e, const std::string& lane, int64_t w) {
  if (const Var* v = e.as<Var>(); v && v->name == lane) return make_i64(0);
  const Binary* b = e.as<Binary>();
  if (!b) return Expr();
  const bool in_a = uses_var(b->a, lane), in_b = uses_var(b->b, lane);
  Expr base;
  if (b->op == BinaryOp::Add && in_a != in_b) {
    Expr peeled = lane_base(in_a ? b->a : b->b, lane, w);
    if (peeled.defined()) base = in_a ? add(peeled, b->b) : add(b->a, peeled);
  } else if (b->op == BinaryOp::Sub && in_a && !in_b) {
    Expr peeled = lane_base(b->a, lane, w);
    if (peeled.defined()) base = sub(peeled, b->b);
  } else if (b->op == BinaryOp::Xor) {
    for (int side = 0; side < 2 && !base.defined(); ++side) {
      Expr x = lane_base(side ? b->b : b->a, lane, w);
      Expr y = lane_free(side ? b->a : b->b, lane, w);
      if (x.defined() && y.defined() && multiple_of(y, w)) base = Binary::make(BinaryOp::Xor, x, y);
    }
  }
  return base.defined() && multiple_of(base, w) ? base : Expr();
}

// One lane loop's body: global accesses moving with the lane, and shared loads moving with it
// through whole 16-byte runs (a tensor-core epilogue reading its swizzled tile back), go through
// local arrays.
class LaneLoop : public IRMutator {
 public:
  LaneLoop(SimtKernel* k, NameGen* names, const For* loop) : k_(k), names_(names), loop_(loop) {
    Accessed b;
    b.visit(loop->body);
    inner_ = bound_names(loop->body);
    stored_ = b.stored;
    loaded_ = b.loaded;
    store_counts_ = b.stores;
    LoadedAfterStored reread;
    reread.visit(loop->body);
    reread_ = reread.buffers;
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
    Expr split;
    if (index_let) {
      split = lane_split(op->value);
      if (split.defined()) v = split;
    }
    // An outer parallel var is the same in every lane: it stands for its lane-0 value, so an
    // access through it alone (post[t, i] beside x[t, i, j]) stays a scalar load instead of
    // being read as lanes of consecutive elements. For a shared index's proof (lane_base), the
    // innermost one as its lane-0 value plus the lane (lane_split).
    if (index_let) {
      lets_[op->name] = outer_var(op->value) ? at_lane0(op->value) : op->value;
      split_lets_[op->name] = split.defined() ? split : lets_[op->name];
    }
    Stmt b = mutate(op->body);
    if (index_let) lets_.erase(op->name), split_lets_.erase(op->name);
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
    if (reread_.count(buffer)) return "";
    // A shared tile only read here (the loop stores nothing to it), or only written by one store
    // statement not under a guard (the loop reads nothing of it), in runs of at most 16 bytes.
    // One store statement: two, at different bases, could overlap (nothing here proves
    // otherwise), and a later vector store would then overwrite what a later lane stored first.
    int64_t lane0 = -1;
    const bool shared_ok =
        !b && const_int(loop_->min, &lane0) && lane0 == 0 &&
        (store ? !loaded_.count(buffer) && store_counts_[buffer] == 1 && guards_.empty()
               : !stored_.count(buffer));
    const SimtArray* shared = shared_ok ? find_shared(*k_, buffer) : nullptr;
    if (!b && (!shared || dtype_bytes(shared->dtype, lanes_) > 16)) return "";
    Expr full = Substitute(shared ? split_lets_ : lets_).mutate(index);
    if (!uses_var(full, loop_->var)) return "";
    std::map<std::string, Expr> first{{loop_->var, make_i64(0)}};
    // A global access was proved contiguous along the lane (analyze_accesses); a shared one
    // proves it here, on its flattened (swizzled) index.
    Expr base = shared ? lane_base(full, loop_->var, lanes_) : Substitute(first).mutate(full);
    if (!base.defined()) return "";
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
    k_->local_arrays.push_back({tmp, b ? b->dtype : shared->dtype, {lanes_}});
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
  std::set<std::string> stored_;             // buffers the loop body writes
  std::set<std::string> loaded_;             // buffers the loop body reads
  std::map<std::string, int> store_counts_;  // store statements per buffer
  std::set<std::string> reread_;             // buffers it reads after writing (LoadedAfterStored)
  std::map<std::string, Expr> lets_;
  std::map<std::string, Expr> split_lets_;     // lets_ with the innermost var as lane-0 + lane
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
