// over 600 lines: one pass over every access of a kernel, its questions (in bounds, guard,
// unique, vector) sharing one encoding of the index maps; the proofs themselves are index_solver.
#include "compiler/analysis/analyze_accesses.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>

#include "compiler/analysis/index_eval.h"
#include "compiler/analysis/index_poly.h"
#include "compiler/base/check.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

Expr le(Expr a, Expr b) { return Binary::make(BinaryOp::Le, std::move(a), std::move(b)); }
Expr eq(Expr a, Expr b) { return Binary::make(BinaryOp::Eq, std::move(a), std::move(b)); }
Expr ne(Expr a, Expr b) { return Binary::make(BinaryOp::Ne, std::move(a), std::move(b)); }
Expr lor(Expr a, Expr b) { return Binary::make(BinaryOp::Or, std::move(a), std::move(b)); }
Expr lnot(Expr a) { return Unary::make(UnaryOp::Not, std::move(a)); }

// Whether `e` is integer/Bool arithmetic the solver can take (loads are free values).
bool encodable(const Expr& e) {
  struct V : IRVisitor {
    bool ok = true;
    void visit_expr(const FloatImm*) override { ok = false; }
    void visit_expr(const Call*) override { ok = false; }
    void visit_expr(const Bitcast*) override { ok = false; }
    void visit_expr(const Binary* op) override {
      if (op->a.type() == Type::F32) ok = false;
      IRVisitor::visit_expr(op);
    }
    void visit_expr(const Cast* op) override {
      if (op->value.type() == Type::F32 || op->type == Type::F32) ok = false;
      IRVisitor::visit_expr(op);
    }
    void visit_expr(const Load* op) override {
      if (op->type == Type::F32) ok = false;
      // indices need not be encodable: the loaded value is free anyway
    }
  } v;
  if (e.type() == Type::F32) return false;
  v.visit(e);
  return v.ok;
}

class Renamer : public IRMutator {
 public:
  Renamer(const std::set<std::string>& keep, std::string suffix)
      : keep_(keep), suffix_(std::move(suffix)) {}

 protected:
  Expr mutate_expr(const Var* op, const Expr& self) override {
    return keep_.count(op->name) ? self : Var::make(op->type, op->name + suffix_);
  }

 private:
  const std::set<std::string>& keep_;
  std::string suffix_;
};

class Analyzer : public IRMutator {
 public:
  Analyzer(const Kernel& k, const AnalysisOptions& o, AnalysisReport* r) : k_(k), o_(o), r_(r) {
    for (const DimParam& d : k.sig.dims) {
      Expr v = Var::make(Type::I64, d.name);
      facts_.push_back(le(make_i64(d.bounds.min), v));
      facts_.push_back(le(v, make_i64(d.bounds.max)));
      if (d.bounds.divisible_by > 1)
        facts_.push_back(eq(floormod(v, make_i64(d.bounds.divisible_by)), make_i64(0)));
      ranges_[d.name] = {d.bounds.min, d.bounds.max};
      shared_vars_.insert(d.name);
    }
    for (const ScalarParam& s : k.sig.scalars) shared_vars_.insert(s.name);
    for (size_t d = 0; d < k.sig.grid.size(); ++d) {
      Expr b = Var::make(Type::I64, kBlockIdx[d]);
      facts_.push_back(le(make_i64(0), b));
      facts_.push_back(lt(b, k.sig.grid[d]));
      ranges_[kBlockIdx[d]] = {0, interval_of(k.sig.grid[d], ranges_).hi - 1};
      block_vars_.push_back(kBlockIdx[d]);
    }
    accumulators_ = accumulator_fragments(k);
  }

 protected:
  Stmt mutate_stmt(const For* op, const Stmt& self) override {
    if (parallel_) par_.blocked = true;  // a per-thread loop: its accesses cannot be hoisted
    Expr v = Var::make(Type::I64, op->var);
    Expr hi = add(op->min, op->extent);
    Scope s(this);
    push(le(op->min, v));
    push(lt(v, hi));
    ranges_[op->var] = {interval_of(op->min, ranges_).lo, interval_of(hi, ranges_).hi - 1};
    return IRMutator::mutate_stmt(op, self);
  }

  Stmt mutate_stmt(const Parallel* op, const Stmt& self) override {
    Scope s(this);
    for (size_t d = 0; d < op->vars.size(); ++d) {
      Expr v = Var::make(Type::I64, op->vars[d]);
      push(le(make_i64(0), v));
      push(lt(v, op->extents[d]));
      ranges_[op->vars[d]] = {0, interval_of(op->extents[d], ranges_).hi - 1};
    }
    const Parallel* saved = parallel_;
    ParallelFinding saved_par = par_;
    const bool saved_pairs = pairs_;
    parallel_ = op;
    par_ = {};
    pairs_ = touches_accumulator(op->body);
    Stmt out = IRMutator::mutate_stmt(op, self);
    const Parallel* p = out.as<Parallel>();
    ParallelLayout layout = p->layout;
    if (o_.enabled) layout.provable = !par_.moving ? 0 : par_.blocked || !par_.ok ? 1 : par_.lanes;
    out = Parallel::make(p->vars, p->extents, p->body, layout);
    parallel_ = saved;
    par_ = saved_par;
    pairs_ = saved_pairs;
    return out;
  }

  Stmt mutate_stmt(const LetStmt* op, const Stmt& self) override {
    Scope s(this);
    bind(op->name, op->value);
    return IRMutator::mutate_stmt(op, self);
  }

  Stmt mutate_stmt(const Reduce* op, const Stmt& self) override {
    Scope s(this);
    Expr v = Var::make(Type::I64, op->var);
    push(le(make_i64(0), v));
    push(lt(v, op->extent));
    ranges_[op->var] = {0, interval_of(op->extent, ranges_).hi - 1};
    if (is_int(op->value.type())) opaque_.insert(op->name);
    return IRMutator::mutate_stmt(op, self);
  }

  Stmt mutate_stmt(const IfThenElse* op, const Stmt&) override {
    Expr cond = mutate(op->cond);
    bool enc = encodable(cond);
    if (enc && o_.enabled) {
      ProofResult pr = ask("guard", "", to_string(cond), cond, {}, {});
      if (pr.outcome == Outcome::Proved) {
        r_->stats.guards_removed++;
        r_->verdicts.back().note = "guard removed";
        // The else branch is unreachable. The condition stays a fact for the then branch's
        // questions: it holds wherever the kernel runs (for the concrete shape when that is what
        // proved it, and the kernel is then pinned to it). Without it, a store the guard kept
        // unique (`blockIdx.y == 0` under a one-row grid) was a race over the symbolic dims.
        Scope s(this);
        push(cond);
        return mutate(op->then_case);
      }
      r_->stats.guards_kept++;
      r_->verdicts.back().note = "guard kept";
    }
    // A kept guard: its accesses cannot be hoisted, except the pairs of an accumulator's
    // parallel when the guard has one value over each pair (it then guards the pair's vector).
    const bool uniform = parallel_ && pairs_ && enc && o_.enabled && pair_uniform(cond);
    if (uniform) r_->verdicts.back().note += " (uniform over pairs)";
    if (parallel_ && !uniform) par_.blocked = true;
    Stmt then_case, else_case;
    {
      Scope s(this);
      enc ? push(cond) : void(inexact_depth_++);
      then_case = mutate(op->then_case);
      if (!enc) inexact_depth_--;
    }
    if (op->else_case.defined()) {
      Scope s(this);
      enc ? push(lnot(cond)) : void(inexact_depth_++);
      else_case = mutate(op->else_case);
      if (!enc) inexact_depth_--;
    }
    return IfThenElse::make(cond, then_case, else_case);
  }

  Stmt mutate_stmt(const Store* op, const Stmt& self) override {
    Stmt out = IRMutator::mutate_stmt(op, self);
    if (o_.enabled) access(op->buffer, op->indices, /*store=*/true);
    return out;
  }

  // A gemm at a run-time stage reads tile `stage` of both stacks: in bounds, or no kernel (a
  // gemm has no guard to keep).
  Stmt mutate_stmt(const Gemm* op, const Stmt& self) override {
    if (!o_.enabled || !op->stage.defined()) return self;
    const TileAlloc *a = find_alloc(k_, op->a), *b = find_alloc(k_, op->b);
    TR_CHECK(a && b && !a->shape.empty() && !b->shape.empty(), "gemm stacks");
    const Expr& st = op->stage;
    const int64_t stages = std::min(op->a_staged() ? a->shape[0] : b->shape[0],
                                    op->b_staged() ? b->shape[0] : a->shape[0]);
    Expr inb = encodable(st) ? logical_and(le(make_i64(0), st), lt(st, make_i64(stages)))
                             : make_bool(false);
    const std::string what = "gemm stage " + to_string(st);
    ProofResult pr = ask("in_bounds", op->a, what, inb, {st}, {make_i64(stages)});
    if (pr.outcome != Outcome::Proved) {
      const std::string stacks = op->a_staged() && op->b_staged()
                                     ? "'" + op->a + "' and '" + op->b + "'"
                                     : "'" + (op->a_staged() ? op->a : op->b) + "'";
      std::string why = k_.sig.name + ": gemm into '" + op->c + "' at stage " + to_string(st) +
                        ", not proved within the " + std::to_string(stages) + " tiles of " + stacks;
      throw Error(why + model_text(pr));
    }
    return self;
  }

  // An async copy's shared destination (a whole tile, or a panel at a constant or run-time
  // stage): in bounds, or no kernel (the copy has no guard on that side).
  Stmt mutate_stmt(const AsyncCopy* op, const Stmt& self) override {
    Stmt out = IRMutator::mutate_stmt(op, self);
    const TileAlloc* dst = find_alloc(k_, op->dst);
    if (!o_.enabled || !dst || dst->scope != MemScope::Shared ||
        op->dst_indices.size() != dst->shape.size())
      return out;
    std::vector<Expr> shape;
    for (int64_t e : dst->shape) shape.push_back(make_i64(e));
    const Expr inb = inside(op->dst_indices, shape);
    const std::string text = indexed(op->dst, op->dst_indices);
    ProofResult pr =
        ask("in_bounds", op->dst, "async copy to " + text, inb, op->dst_indices, shape);
    if (pr.outcome != Outcome::Proved)
      throw Error(k_.sig.name + ": async copy to " + text + " not proved inside '" + op->dst + "'" +
                  model_text(pr));
    check_async_source(*op);
    return out;
  }

  // A tma_copy's destination tile (or panel) and its mbarrier, and an mbarrier_wait's: in
  // bounds, or no kernel (neither has a guard). The source needs no proof: the tensor map
  // bounds it, zeros outside.
  Stmt mutate_stmt(const TmaCopy* op, const Stmt& self) override {
    Stmt out = IRMutator::mutate_stmt(op, self);
    const TileAlloc* dst = find_alloc(k_, op->dst);
    if (!o_.enabled || !dst || op->dst_indices.size() != dst->shape.size()) return out;
    prove_inside(op->dst, op->dst_indices, dst->shape, "tma_copy to");
    prove_mbarrier(op->barrier, op->barrier_index, "tma_copy on");
    return out;
  }
  Stmt mutate_stmt(const MbarrierWait* op, const Stmt& self) override {
    Stmt out = IRMutator::mutate_stmt(op, self);
    if (o_.enabled) prove_mbarrier(op->barrier, op->index, "mbarrier_wait on");
    return out;
  }

  Expr mutate_expr(const Load* op, const Expr& self) override {
    Expr out = IRMutator::mutate_expr(op, self);
    if (o_.enabled) access(op->buffer, op->indices, /*store=*/false);
    return out;
  }

 private:
  // Where an async copy reads (valid > 0), its source piece lies inside the tensor: lower_copies
  // and the builder's copy_async_piece build `valid` from the bounds themselves, so this holds
  // for every piece they make; a hand-written one that reads outside is refused with a
  // counterexample (the piece has no other guard).
  void check_async_source(const AsyncCopy& op) {
    const BufferParam* src = find_buffer(k_.sig, op.src);
    if (!src || op.src_indices.size() != src->shape.size()) return;
    const std::string text = indexed(op.src, op.src_indices);
    const Expr inb = encodable(op.valid) ? inside(op.src_indices, src->shape) : make_bool(false);
    Scope sc(this);
    if (encodable(op.valid)) push(lt(make_i64(0), op.valid));
    ProofResult pr =
        ask("in_bounds", op.src, "async copy from " + text, inb, op.src_indices, src->shape);
    if (pr.outcome != Outcome::Proved)
      throw Error(k_.sig.name + ": async copy from " + text + " not proved inside '" + op.src +
                  "' where it reads (valid " + to_string(op.valid) + " > 0)" + model_text(pr));
  }

  void prove_inside(const std::string& name, const std::vector<Expr>& indices,
                    const std::vector<int64_t>& extents, const std::string& what) {
    std::vector<Expr> shape;
    for (int64_t e : extents) shape.push_back(make_i64(e));
    const std::string text = indexed(name, indices);
    ProofResult pr =
        ask("in_bounds", name, what + " " + text, inside(indices, shape), indices, shape);
    if (pr.outcome != Outcome::Proved)
      throw Error(k_.sig.name + ": " + what + " " + text + " not proved inside '" + name + "'" +
                  model_text(pr));
  }
  void prove_mbarrier(const std::string& name, const Expr& index, const std::string& what) {
    const TileAlloc* b = find_alloc(k_, name);
    if (b && b->shape.size() == 1) prove_inside(name, {index}, b->shape, what);
  }

  // 0 <= indices < shape, or false where an index cannot be encoded.
  static Expr inside(const std::vector<Expr>& indices, const std::vector<Expr>& shape) {
    Expr ok = make_bool(true);
    for (size_t d = 0; d < indices.size(); ++d) {
      if (!encodable(indices[d])) return make_bool(false);
      ok = logical_and(ok, logical_and(le(make_i64(0), indices[d]), lt(indices[d], shape[d])));
    }
    return ok;
  }
  // buffer[i, j, ..] as the text prints it.
  static std::string indexed(const std::string& buffer, const std::vector<Expr>& indices) {
    std::string text = buffer + "[";
    for (size_t d = 0; d < indices.size(); ++d) text += (d ? ", " : "") + to_string(indices[d]);
    return text + "]";
  }

  // Restores facts and ranges on scope exit.
  struct Scope {
    explicit Scope(Analyzer* a)
        : a(a),
          n(a->facts_.size()),
          ranges(a->ranges_),
          lets(a->lets_),
          distinct(a->distinct_lets_),
          sorted(a->sorted_lets_) {}
    ~Scope() {
      a->facts_.resize(n);
      a->ranges_ = ranges;
      a->lets_ = lets;
      a->distinct_lets_ = distinct;
      a->sorted_lets_ = sorted;
    }
    Analyzer* a;
    size_t n;
    std::map<std::string, Interval> ranges;
    std::map<std::string, Expr> lets;
    std::map<std::string, const Load*> distinct;
    std::map<std::string, const Load*> sorted;
  };

  void push(Expr f) { facts_.push_back(std::move(f)); }

  void bind(const std::string& name, const Expr& value) {
    if (!is_int(value.type()) && value.type() != Type::Bool) return;
    if (loaded_address({value})) loaded_.insert(name);
    if (encodable(value) && !mentions_opaque(value)) {
      push(eq(Var::make(value.type(), name), value));
      ranges_[name] = interval_of(value, ranges_);
      lets_[name] = value;
      assume_contract(name, value);
    } else {
      opaque_.insert(name);
    }
  }

  // A value loaded from an input with an index contract (BufferParam::values_below), directly or
  // widened: 0 <= value < bound is a fact, established by the caller before the launch.
  void assume_contract(const std::string& name, const Expr& value) {
    const Expr* e = &value;
    if (const Cast* c = e->as<Cast>(); c && is_int(c->value.type()) && is_int(c->type) &&
                                       type_bits(c->type) >= type_bits(c->value.type()))
      e = &c->value;
    const Load* ld = e->as<Load>();
    if (!ld) return;
    const BufferParam* b = find_buffer(k_.sig, ld->buffer);
    if (!b || !b->values_below.defined()) return;
    if (b->values_distinct && std::all_of(ld->indices.begin(), ld->indices.end(), encodable))
      distinct_lets_[name] = ld;
    if (b->values_sorted && ld->indices.size() == 1 && encodable(ld->indices[0]))
      sorted_lets_[name] = ld;
    Expr v = Var::make(value.type(), name);
    push(le(make_const(value.type(), 0), v));
    push(lt(v, value.type() == Type::I64 ? b->values_below
                                         : Cast::make(value.type(), b->values_below)));
    Interval bound = interval_of(b->values_below, ranges_);
    Interval& r = ranges_[name];
    r = {std::max<int64_t>(r.lo, 0), std::min(r.hi, bound.hi - 1)};
  }

  bool mentions_opaque(const Expr& e) const {
    for (const std::string& n : opaque_)
      if (uses_var(e, n)) return true;
    return false;
  }

  // Asks one question: over the symbolic dims, then, when that does not settle it and the
  // launches' shape is known, over the concrete dims (a race proved over the symbolic dims is
  // final: the kernel is wrong for some shape it accepts).
  ProofResult ask(const std::string& question, const std::string& buffer, const std::string& access,
                  const Expr& goal, std::vector<Expr> indices, std::vector<Expr> shape,
                  std::vector<Expr> facts_override = {}, bool use_override = false) {
    const bool optimisation = question == "guard" || question == "vector";
    const ProofBudget& budget = optimisation ? o_.optimisation_budget : o_.budget;
    IndexQuery q;
    q.name = k_.sig.name + ": " + question + " " + access;
    q.facts = use_override ? std::move(facts_override) : facts_;
    q.ranges = ranges_;
    q.goal = goal;
    q.exact = inexact_depth_ == 0 && !mentions_opaque(goal);
    ProofResult pr = prove(q, budget);
    count(pr);
    bool retry = !o_.concrete.empty() && pr.outcome != Outcome::Proved &&
                 !(question == "unique" && pr.outcome == Outcome::Disproved);
    if (retry) {
      pr = prove(concrete_query(q), budget);
      pr.method += "@concrete";
      count(pr);
      if (optimisation && pr.outcome == Outcome::Proved) pin_ = true;
    }
    AnalysisStats& st = r_->stats;
    (pr.outcome == Outcome::Proved      ? st.proved
     : pr.outcome == Outcome::Disproved ? st.disproved
                                        : st.unknown)++;
    r_->verdicts.push_back(
        {question, buffer, access, pr, "", std::move(indices), std::move(shape)});
    return pr;
  }

  // Solver work of one prove() call.
  void count(const ProofResult& pr) {
    AnalysisStats& st = r_->stats;
    if (pr.method == "z3") (pr.cached ? st.cache_hits : st.z3_queries)++;
    if (pr.method == "z3" && !pr.cached && pr.from_disk) st.z3_disk_hits++;
    st.z3_ms += pr.ms;
  }

  // `q` with every dim replaced by its concrete value (and the block ranges they bound).
  IndexQuery concrete_query(const IndexQuery& q) const {
    struct Sub : IRMutator {
      const std::map<std::string, int64_t>* values;
      Expr mutate_expr(const Var* op, const Expr& self) override {
        auto it = values->find(op->name);
        return it == values->end() ? self : make_const(op->type, it->second);
      }
    } sub;
    sub.values = &o_.concrete;
    IndexQuery c = q;
    c.name += " (concrete shape)";
    for (Expr& f : c.facts) f = sub.mutate(f);
    c.goal = sub.mutate(q.goal);
    for (auto& [name, v] : o_.concrete) c.ranges[name] = {v, v};
    for (size_t d = 0; d < k_.sig.grid.size(); ++d)
      c.ranges[kBlockIdx[d]] = {0, interval_of(sub.mutate(k_.sig.grid[d]), c.ranges).hi - 1};
    // Narrow every bound variable's interval with the concrete dims, the facts in the order they
    // were pushed (a loop's bounds and a let's value before what uses them), so that the cheap
    // interval check decides what the dims' values settle without Z3.
    for (const Expr& f : c.facts) narrow(f, &c.ranges);
    return c;
  }

  static void narrow(const Expr& fact, std::map<std::string, Interval>* ranges) {
    const Binary* b = fact.as<Binary>();
    if (!b || !is_int(b->a.type())) return;
    auto range_of = [&](const Var* v) -> Interval& {
      auto it = ranges->find(v->name);
      if (it == ranges->end())
        it = ranges->emplace(v->name, interval_of(Var::make(v->type, v->name), {})).first;
      return it->second;
    };
    const Var* va = b->a.as<Var>();
    const Var* vb = b->b.as<Var>();
    switch (b->op) {
      case BinaryOp::Le:  // a <= v, or v <= b
        if (vb) range_of(vb).lo = std::max(range_of(vb).lo, interval_of(b->a, *ranges).lo);
        if (va) range_of(va).hi = std::min(range_of(va).hi, interval_of(b->b, *ranges).hi);
        break;
      case BinaryOp::Lt:  // v < b
        if (va) range_of(va).hi = std::min(range_of(va).hi, interval_of(b->b, *ranges).hi - 1);
        break;
      case BinaryOp::Eq:  // v == value (a let)
        if (va) {
          Interval i = interval_of(b->b, *ranges);
          Interval& r = range_of(va);
          r = {std::max(r.lo, i.lo), std::min(r.hi, i.hi)};
        }
        break;
      default:
        break;
    }
  }

  void access(const std::string& buffer, const std::vector<Expr>& indices, bool store) {
    std::vector<Expr> shape;
    DType dtype;
    bool global = false;
    if (const BufferParam* b = find_buffer(k_.sig, buffer)) {
      shape = b->shape;
      dtype = b->dtype;
      global = true;
    } else if (const TileAlloc* a = find_alloc(k_, buffer); a && a->scope == MemScope::Shared) {
      for (int64_t e : a->shape) shape.push_back(make_i64(e));
      dtype = a->dtype;
    } else {
      return;  // fragments: per-thread registers, placed by the thread mapping
    }
    for (const Expr& i : indices) {
      if (!encodable(i)) {
        if (global && parallel_) par_.moving = true, par_.ok = false;  // unknown: assume it moves
        return;
      }
    }
    std::string text = buffer + "[";
    for (size_t d = 0; d < indices.size(); ++d) text += (d ? ", " : "") + to_string(indices[d]);
    text += "]";
    std::string what = (store ? "store " : "load ") + text;

    Expr inb = make_bool(true);
    for (size_t d = 0; d < indices.size(); ++d)
      inb = logical_and(logical_and(inb, le(make_i64(0), indices[d])), lt(indices[d], shape[d]));
    bool in_bounds = ask("in_bounds", buffer, what, inb, indices, shape).outcome == Outcome::Proved;

    if (store && parallel_) unique(buffer, text, indices, shape, global);
    if (global && parallel_) {
      // The Parallel's finding: an access moving with the innermost var must be in bounds and
      // vector (its lanes bound the width); one that does not move needs nothing.
      int lanes = vector(buffer, what, indices, shape, dtype);
      if (lanes != 0) {
        par_.moving = true;
        if (lanes < 2 || !in_bounds) par_.ok = false;
        par_.lanes = std::min(par_.lanes, std::max(lanes, 1));
      }
    }
  }

  void unique(const std::string& buffer, const std::string& text, const std::vector<Expr>& idx,
              const std::vector<Expr>& shape, bool global) {
    std::set<std::string> keep = shared_vars_;
    if (!global) keep.insert(block_vars_.begin(), block_vars_.end());  // one block's shared tile
    Renamer ra(keep, "@a"), rb(keep, "@b");
    std::vector<Expr> facts;
    for (const Expr& f : facts_) {
      facts.push_back(ra.mutate(f));
      facts.push_back(rb.mutate(f));
    }
    std::vector<std::string> coords;
    if (global) coords = block_vars_;
    coords.insert(coords.end(), parallel_->vars.begin(), parallel_->vars.end());
    Expr same = make_bool(true), differ = make_bool(false);
    for (const std::string& c : coords) {
      Expr v = Var::make(Type::I64, c);
      same = logical_and(same, eq(ra.mutate(v), rb.mutate(v)));
    }
    if (mixed_radix(idx, shape, coords, keep)) {
      ProofResult pr;
      pr.outcome = Outcome::Proved;
      pr.method = "affine";
      r_->stats.proved++;
      r_->verdicts.push_back({"unique", buffer, "store " + text, pr, "", idx, shape});
      return;
    }
    for (const Expr& i : idx) differ = lor(differ, ne(ra.mutate(i), rb.mutate(i)));
    distinct_facts(ra, rb, &facts);
    sorted_facts(ra, rb, &facts);
    ProofResult pr = ask("unique", buffer, "store " + text, lor(same, differ), idx, shape,
                         std::move(facts), true);
    if (pr.outcome == Outcome::Unknown && global && loaded_address(idx)) {
      // A scatter whose uniqueness nobody proved could race: refused rather than run.
      std::string msg = k_.sig.name + ": store " + text + " goes through a loaded value and is " +
                        "not proved unique (" + pr.method + " gave up): scatter only through a " +
                        "permutation input (values distinct), or gather instead (owner-computes)";
      r_->verdicts.back().note = msg;
      if (o_.throw_on_race) throw Error(msg);
      return;
    }
    if (pr.outcome != Outcome::Disproved) return;
    std::string msg = k_.sig.name + ": " + buffer + " written twice: " + coord_text(pr, "@a") +
                      " and " + coord_text(pr, "@b") + " → offset " +
                      std::to_string(offset(pr, "@a", idx, shape));
    r_->verdicts.back().note = msg;
    if (o_.throw_on_race) throw Error(msg);
  }

  // Whether an address depends on memory: a load in it, or a let whose value does.
  bool loaded_address(const std::vector<Expr>& idx) const {
    struct V : IRVisitor {
      bool found = false;
      void visit_expr(const Load*) override { found = true; }
    };
    for (const Expr& i : idx) {
      V v;
      v.visit(i);
      if (v.found) return true;
      for (const std::string& n : loaded_)
        if (uses_var(i, n)) return true;
      if (mentions_opaque(i)) return true;
    }
    return false;
  }

  // For the values let-bound to loads of a buffer with distinct values (a permutation): between
  // any two of them, in either execution, equal values exactly where the loads read one element.
  // Loads are free values otherwise, so without this a scatter y[perm[i]] = .. is disproved.
  void distinct_facts(Renamer& ra, Renamer& rb, std::vector<Expr>* facts) {
    struct Value {
      Expr var;
      const Load* load;
      Renamer* r;
    };
    std::vector<Value> values;
    for (const auto& [name, ld] : distinct_lets_)
      for (Renamer* r : {&ra, &rb})
        values.push_back({r->mutate(Var::make(lets_.at(name).type(), name)), ld, r});
    for (size_t x = 0; x < values.size(); ++x)
      for (size_t y = x + 1; y < values.size(); ++y) {
        const Value &u = values[x], &w = values[y];
        if (u.load->buffer != w.load->buffer) continue;
        Expr same_element = make_bool(true);
        for (size_t d = 0; d < u.load->indices.size(); ++d)
          same_element = logical_and(
              same_element, eq(u.r->mutate(u.load->indices[d]), w.r->mutate(w.load->indices[d])));
        Expr a = Cast::make(Type::I64, u.var), b = Cast::make(Type::I64, w.var);
        facts->push_back(
            lor(logical_and(same_element, eq(a, b)), logical_and(lnot(same_element), ne(a, b))));
      }
  }

  // For the values let-bound to loads of a 1-d buffer with sorted values (segment starts):
  // between any two of them, in either execution, the one read at the lower element is not the
  // larger (equal elements, equal values). Without it two segments' rows could overlap.
  void sorted_facts(Renamer& ra, Renamer& rb, std::vector<Expr>* facts) {
    struct Value {
      Expr var, index;
      std::string buffer;
    };
    std::vector<Value> values;
    for (const auto& [name, ld] : sorted_lets_)
      for (Renamer* r : {&ra, &rb})
        values.push_back({Cast::make(Type::I64, r->mutate(Var::make(lets_.at(name).type(), name))),
                          Cast::make(Type::I64, r->mutate(ld->indices[0])), ld->buffer});
    for (size_t x = 0; x < values.size(); ++x)
      for (size_t y = x + 1; y < values.size(); ++y) {
        const Value &u = values[x], &w = values[y];
        if (u.buffer != w.buffer) continue;
        facts->push_back(lor(lnot(le(u.index, w.index)), le(u.var, w.var)));
        facts->push_back(lor(lnot(le(w.index, u.index)), le(w.var, u.var)));
      }
  }

  // The cheap proof of uniqueness, without Z3: the flat address is terms the two executions
  // share (dims, and for shared memory the block) plus c·x for coordinates x with constant
  // coefficients, and those form a mixed radix — each |c| exceeds the largest sum the smaller
  // terms can reach over their ranges — so distinct coordinates give distinct addresses.
  bool mixed_radix(const std::vector<Expr>& idx, const std::vector<Expr>& shape,
                   const std::vector<std::string>& coords,
                   const std::set<std::string>& keep) const {
    Expr flat = idx[0];
    for (size_t d = 1; d < idx.size(); ++d) flat = add(mul(flat, shape[d]), idx[d]);
    Poly p;
    if (!to_poly(flat, lets_, &p, 0, /*let_atoms=*/true)) return false;
    std::vector<std::pair<__int128, __int128>> terms;  // |c|, span of x
    for (auto& [m, c] : p) {
      bool shared =
          std::all_of(m.begin(), m.end(), [&](const std::string& v) { return keep.count(v) > 0; });
      if (shared) continue;
      // A digit: a coordinate, or anything else that varies per execution (a loop variable, a
      // let such as k % 2): injective over all digits implies injective over the coordinates.
      if (m.size() != 1) return false;
      auto r = ranges_.find(m[0]);
      if (r == ranges_.end() || r->second.lo > r->second.hi) return false;
      terms.push_back({c < 0 ? -(__int128)c : (__int128)c, (__int128)r->second.hi - r->second.lo});
    }
    // A coordinate the address ignores: two executions differing only there collide.
    for (const std::string& c : coords) {
      auto r = ranges_.find(c);
      bool spans = r == ranges_.end() || r->second.hi > r->second.lo;
      bool used = false;
      for (auto& [m, k] : p) used = used || std::count(m.begin(), m.end(), c);
      if (spans && !used) return false;
    }
    std::sort(terms.begin(), terms.end());
    __int128 reach = 0;
    for (auto& [c, span] : terms) {
      if (span == 0) continue;
      if (c <= reach) return false;
      reach += c * span;
      if (reach > (__int128)1 << 100) return false;
    }
    return true;
  }

  std::map<std::string, int64_t> values(const ProofResult& pr, const std::string& suffix) const {
    std::map<std::string, int64_t> v;
    for (auto& [n, x] : pr.model) {
      if (shared_vars_.count(n)) v[n] = x;
      if (n.size() > suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        v[n.substr(0, n.size() - suffix.size())] = x;
    }
    return v;
  }

  // ": counterexample n = 1, m = 2" from a disproof's model, or nothing.
  static std::string model_text(const ProofResult& pr) {
    std::string out;
    for (const auto& [name, value] : pr.model)
      out += (out.empty() ? ": counterexample " : ", ") + name + " = " + std::to_string(value);
    return out;
  }

  std::string coord_text(const ProofResult& pr, const std::string& suffix) const {
    std::map<std::string, int64_t> v = values(pr, suffix);
    std::string block;
    for (size_t d = 0; d < block_vars_.size(); ++d)
      block += (d ? "," : "") + std::to_string(v[block_vars_[d]]);
    if (block_vars_.size() > 1) block = "(" + block + ")";
    int64_t lin = 0;
    for (size_t d = 0; d < parallel_->vars.size(); ++d) {
      int64_t ext = 1;
      try {
        ext = eval_index(parallel_->extents[d], v);
      } catch (...) {
      }
      lin = lin * ext + v[parallel_->vars[d]];
    }
    int64_t t = k_.sig.threads;
    std::string s = "(block=" + block + ", tid=" + std::to_string(lin % t);
    if (lin >= t) s += ", iter=" + std::to_string(lin / t);
    return s + ")";
  }

  int64_t offset(const ProofResult& pr, const std::string& suffix, const std::vector<Expr>& idx,
                 const std::vector<Expr>& shape) const {
    std::map<std::string, int64_t> v = values(pr, suffix);
    int64_t off = 0;
    try {
      for (size_t d = 0; d < idx.size(); ++d)
        off = off * eval_index(shape[d], v) + eval_index(idx[d], v);
    } catch (...) {
      return -1;
    }
    return off;
  }

  // Contiguous and 16-byte aligned along the innermost parallel axis, for groups of w elements
  // starting at multiples of w. Affine indices (the usual case) are decided without Z3: the
  // innermost var must have coefficient 1, and every other term a coefficient that the dims'
  // divisibility (or, failing that, their concrete values) makes a multiple of w. Only indices
  // with division or modulo go to Z3, with the small optimisation budget.
  // Returns 0 when the access does not move with the innermost var, its lanes when it is
  // proved vectorizable, -1 otherwise.
  int vector(const std::string& buffer, const std::string& what, const std::vector<Expr>& idx,
             const std::vector<Expr>& shape, DType dtype) {
    // An index through a value the solver cannot see may move with anything: never a vector.
    for (const Expr& i : idx)
      if (mentions_opaque(i)) return -1;
    int64_t bytes = dtype_bytes(dtype, 1);
    if (bytes <= 0 || 16 % bytes != 0 || bytes >= 16) return uses_inner(idx) ? -1 : 0;
    // An accumulator's parallel moves pairs (infer_layouts, layout.h value_pairs) of 4-byte
    // elements only: 2-byte pairs (bf16x2 stores of a matmul's output) made NVRTC build the
    // tensor-core matmuls with fewer registers and more instructions a K step (the 64 x 128
    // matmul at T = 1024: 17.4 -> 27.5 us, H200), while float2 rows (sparse attention's
    // contribution rows g) gained a third.
    if (pairs_ && bytes < 4) return uses_inner(idx) ? -1 : 0;
    const int64_t w = pairs_ ? 2 : 16 / bytes;
    const std::string& inner = parallel_->vars.back();
    Expr v = Var::make(Type::I64, inner);
    Expr flat = idx[0];
    for (size_t d = 1; d < idx.size(); ++d) flat = add(mul(flat, shape[d]), idx[d]);
    Poly p;
    // A row id loaded from memory (a gather's table[ids[i], j]) is a product's unknown factor:
    // as an atom of the polynomial, its terms are aligned when their other factors are (id · D
    // with D a multiple of w), as a dim's are, so the access need not go to Z3, which gave up on
    // id · D with D symbolic (V4-mini's dispatch gathers moved 2 bytes a thread: 121 us at
    // T = 4096 against 17 on 16-byte vectors). Sound only for atoms fixed along the lanes.
    bool poly = to_poly(flat, lets_, &p) ||
                (to_poly(flat, lets_, &p, 0, /*let_atoms=*/true) && atoms_fixed_along(p, inner));
    if (poly) {
      bool uses = false;
      for (auto& [m, c] : p) uses = uses || std::count(m.begin(), m.end(), inner);
      if (!uses) return 0;  // a broadcast along the fastest axis: nothing to vectorize
    } else if (!uses_inner(idx)) {
      return 0;
    }
    std::string why;
    if (poly) {
      ProofResult pr;
      pr.method = "affine";
      if (!unit_stride(p, inner, &pr.outcome, &why)) {
      } else if (aligned(p, inner, w, /*concrete=*/false)) {
        pr.outcome = Outcome::Proved;
      } else if (misaligned_by_constant(p, inner, w)) {
        pr.outcome = Outcome::Disproved;
        why = "offset by a constant not a multiple of " + std::to_string(w);
      } else if (!o_.concrete.empty() && aligned(p, inner, w, /*concrete=*/true)) {
        pr.outcome = Outcome::Proved;
        pr.method = "affine@concrete";
        pin_ = true;
      } else {
        why = "no divisibility fact aligns it";
      }
      AnalysisStats& st = r_->stats;
      (pr.outcome == Outcome::Proved      ? st.proved
       : pr.outcome == Outcome::Disproved ? st.disproved
                                          : st.unknown)++;
      r_->verdicts.push_back({"vector", buffer, what, pr, "", idx, shape});
    } else {
      Expr wv = make_i64(w);
      struct Sub : IRMutator {
        std::string n;
        Expr by;
        Expr mutate_expr(const Var* op, const Expr& self) override {
          return op->name == n ? by : self;
        }
      } sub;
      sub.n = inner;
      sub.by = add(v, make_i64(1));
      Expr goal = logical_and(
          logical_and(lor(ne(floormod(v, wv), make_i64(0)), eq(floormod(flat, wv), make_i64(0))),
                      eq(sub.mutate(flat), add(flat, make_i64(1)))),
          eq(floormod(parallel_->extents.back(), wv), make_i64(0)));
      ask("vector", buffer, what, goal, idx, shape);
    }
    bool ok = r_->verdicts.back().result.outcome == Outcome::Proved;
    (ok ? r_->stats.vectorizable : r_->stats.scalar)++;
    r_->verdicts.back().note = ok ? "vectorizable x" + std::to_string(w)
                                  : "scalar" + (why.empty() ? "" : " (" + why + ")");
    return ok ? static_cast<int>(w) : -1;
  }

  // Whether an index mentions the innermost parallel var, through lets too.
  bool uses_inner(const std::vector<Expr>& idx) const {
    const std::string& inner = parallel_->vars.back();
    std::set<std::string> seen;
    std::function<bool(const Expr&)> uses = [&](const Expr& e) {
      if (uses_var(e, inner)) return true;
      for (auto& [name, value] : lets_) {
        if (seen.count(name) || !uses_var(e, name)) continue;
        seen.insert(name);
        if (uses(value)) return true;
      }
      return false;
    };
    for (const Expr& i : idx)
      if (uses(i)) return true;
    return false;
  }

  // Whether the innermost var appears exactly as the term 1·v. A constant coefficient other
  // than 1 disproves contiguity; a symbolic one leaves it unknown.
  static bool unit_stride(const Poly& p, const std::string& inner, Outcome* outcome,
                          std::string* why) {
    for (auto& [m, c] : p) {
      if (!std::count(m.begin(), m.end(), inner)) continue;
      if (m.size() == 1 && c == 1) continue;
      *outcome = m.size() == 1 ? Outcome::Disproved : Outcome::Unknown;
      *why = "stride along " + inner + " is not 1";
      return false;
    }
    return true;
  }

  // Whether no let standing as an atom in p (to_poly's let_atoms) reads the innermost var.
  bool atoms_fixed_along(const Poly& p, const std::string& inner) const {
    for (auto& [m, c] : p)
      for (const std::string& a : m)
        if (a != inner && lets_.count(a) && uses_var(Substitute(lets_).mutate(lets_.at(a)), inner))
          return false;
    return true;
  }

  // Every term but 1·v and the constant is a multiple of w (without assumptions), and the
  // constant is not: every group start is misaligned, whatever the dims.
  bool misaligned_by_constant(const Poly& p, const std::string& inner, int64_t w) const {
    auto c0 = p.find({});
    if (c0 == p.end() || c0->second % w == 0) return false;
    for (auto& [m, c] : p)
      if (!m.empty() && !std::count(m.begin(), m.end(), inner) && c % w != 0) return false;
    return true;
  }

  // Whether a parallel body reads or writes a fragment of a gemm accumulator's layout.
  bool touches_accumulator(const Stmt& body) const {
    struct V : IRVisitor {
      const std::set<std::string>* acc;
      bool found = false;
      void visit_expr(const Load* op) override {
        found = found || acc->count(op->buffer);
        IRVisitor::visit_expr(op);
      }
      void visit_stmt(const Store* op) override {
        found = found || acc->count(op->buffer);
        IRVisitor::visit_stmt(op);
      }
    } v;
    v.acc = &accumulators_;
    v.visit(body);
    return v.found;
  }

  // Whether a guard has the same value at the innermost var's v and v + 1 for every even v
  // (the lanes of an accumulator's pair; the vector proofs make the pair's first element even).
  // Affine, without Z3: the guard is a conjunction of comparisons a < b or a <= b; in each,
  // d = b - a either does not move with v, or moves as -v in `<` (x + v < N) or as +v in `<=`
  // (0 <= x + v) with every other term (dims by their divisibility, or else their concrete
  // values, which pins the kernel) and the innermost extent even: then d at v is even, and
  // d > 0 <=> d - 1 > 0, d >= 0 <=> d + 1 >= 0. Anything else: not uniform.
  bool pair_uniform(const Expr& cond) {
    const Binary* b = cond.as<Binary>();
    if (b && b->op == BinaryOp::And && b->a.type() == Type::Bool)
      return pair_uniform(b->a) && pair_uniform(b->b);
    if (!b || (b->op != BinaryOp::Lt && b->op != BinaryOp::Le) || mentions_opaque(cond))
      return false;
    Poly pa, pb;
    if (!to_poly(b->a, lets_, &pa) || !to_poly(b->b, lets_, &pb)) return false;
    Poly d = pb;
    for (auto& [m, c] : pa) d[m] -= c;
    const std::string& inner = parallel_->vars.back();
    int64_t coef = 0;
    for (auto& [m, c] : d) {
      if (c == 0 || !std::count(m.begin(), m.end(), inner)) continue;
      if (m.size() != 1) return false;
      coef = c;
    }
    if (coef == 0) return true;
    if (coef != (b->op == BinaryOp::Lt ? -1 : 1)) return false;
    Poly rest;
    for (auto& [m, c] : d)
      if (c != 0) rest[m] = c;
    if (aligned(rest, inner, 2, /*concrete=*/false)) return true;
    if (o_.concrete.empty() || !aligned(rest, inner, 2, /*concrete=*/true)) return false;
    pin_ = true;
    return true;
  }

  // Every term but 1·v a multiple of w, and the innermost extent too. A dim contributes its
  // divisibility, or with `concrete` its value; other vars (blocks, loops) contribute nothing.
  bool aligned(const Poly& p, const std::string& inner, int64_t w, bool concrete) const {
    auto factor = [&](const std::string& var) -> __int128 {
      if (concrete) {
        auto it = o_.concrete.find(var);
        if (it != o_.concrete.end()) return it->second;
      }
      for (const DimParam& dp : k_.sig.dims)
        if (dp.name == var) return dp.bounds.divisible_by;
      return 1;
    };
    Poly extent;
    if (!to_poly(parallel_->extents.back(), lets_, &extent)) return false;
    for (const Poly* q : {&p, const_cast<const Poly*>(&extent)}) {
      for (auto& [m, c] : *q) {
        if (q == &p && std::count(m.begin(), m.end(), inner)) continue;
        __int128 div = c;
        for (const std::string& a : m) div *= factor(a);
        if (div % w != 0) return false;
      }
    }
    return true;
  }

  const Kernel& k_;
  const AnalysisOptions& o_;
  AnalysisReport* r_;
  std::vector<Expr> facts_;
  std::map<std::string, Interval> ranges_;
  std::map<std::string, Expr> lets_;
  // Lets bound to a load of a distinct-valued buffer (distinct_facts), by name.
  std::map<std::string, const Load*> distinct_lets_;
  // Lets bound to loads of a buffer with sorted values (BufferParam::values_sorted).
  std::map<std::string, const Load*> sorted_lets_;
  std::set<std::string> shared_vars_, opaque_;
  std::set<std::string> loaded_;  // lets whose value depends on memory (loaded_address)
  std::vector<std::string> block_vars_;
  const Parallel* parallel_ = nullptr;
  std::set<std::string> accumulators_;  // fragments of a gemm accumulator's layout
  bool pairs_ = false;                  // parallel_ touches one: its vectors are pairs
  // What the accesses of the Parallel being visited allow (ParallelLayout::provable).
  struct ParallelFinding {
    bool moving = false;   // some global access moves with the innermost var
    bool ok = true;        // every such access is in bounds and vectorizable
    bool blocked = false;  // a kept guard or a loop inside
    int lanes = 16;        // the smallest of their lanes
  } par_;
  int inexact_depth_ = 0;

 public:
  bool pin_ = false;  // a guard or vector verdict needed the concrete shape
};

}  // namespace

AnalysisStats& AnalysisStats::operator+=(const AnalysisStats& o) {
  proved += o.proved;
  unknown += o.unknown;
  disproved += o.disproved;
  z3_queries += o.z3_queries;
  cache_hits += o.cache_hits;
  z3_disk_hits += o.z3_disk_hits;
  z3_ms += o.z3_ms;
  guards_removed += o.guards_removed;
  guards_kept += o.guards_kept;
  vectorizable += o.vectorizable;
  scalar += o.scalar;
  return *this;
}

std::string AnalysisReport::text() const {
  std::string out = "proofs " + kernel + "\n";
  for (const AccessVerdict& v : verdicts) {
    out += "  " + v.question + " " + v.access + ": " + outcome_name(v.result.outcome) + " (" +
           v.result.method;
    if (v.result.method == "z3") out += ", " + std::to_string(v.result.steps) + " steps";
    out += ")";
    if (!v.note.empty()) out += " — " + v.note;
    out += "\n";
  }
  // Wall time is left out on purpose: the dump must be byte-identical run to run.
  const AnalysisStats& s = stats;
  out += "  total: proved " + std::to_string(s.proved) + ", unknown " + std::to_string(s.unknown) +
         ", disproved " + std::to_string(s.disproved) + "; guards removed " +
         std::to_string(s.guards_removed) + ", kept " + std::to_string(s.guards_kept) +
         "; vectorizable " + std::to_string(s.vectorizable) + ", scalar " +
         std::to_string(s.scalar) + "\n";
  return out;
}

Kernel analyze_accesses(const Kernel& kernel, const AnalysisOptions& options,
                        AnalysisReport* report) {
  AnalysisReport local;
  AnalysisReport* r = report ? report : &local;
  r->kernel = kernel.sig.name;
  Kernel out = kernel;
  Analyzer analyzer(kernel, options, r);
  out.body = analyzer.mutate(kernel.body);
  if (analyzer.pin_) {
    r->pinned = true;
    for (DimParam& d : out.sig.dims) {
      auto it = options.concrete.find(d.name);
      if (it != options.concrete.end()) d.bounds = {it->second, it->second, 1};
    }
  }
  return out;
}

}  // namespace tilerun::compiler
