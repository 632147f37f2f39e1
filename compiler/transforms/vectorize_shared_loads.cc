#include "compiler/transforms/vectorize_shared_loads.h"

#include <algorithm>
#include <map>

#include "compiler/analysis/index_poly.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

namespace tilerun::compiler {
namespace {

// A let whose whole value is one shared load, and where its index sits in a group.
struct Member {
  const LetStmt* let;
  std::string buffer;
  Poly index;
  int position = 0;  // visiting order within the region
};

bool region_boundary(const Stmt& s) {
  return s.as<For>() || s.as<IfThenElse>() || s.as<Barrier>() || s.as<WarpShuffle>() ||
         s.as<WarpBallot>() || s.as<Gemm>();
}

class Vectorizer : public IRMutator {
 public:
  Vectorizer(SimtKernel* k, NameGen* names) : k_(k), names_(names) {}

 protected:
  // Every For / IfThenElse body, and the kernel body, is a region of its own.
  Stmt mutate_stmt(const For* op, const Stmt& self) override {
    Stmt body = region(op->body);
    return body.same_as(op->body) ? self
                                  : For::make(op->var, op->min, op->extent, body, op->vectorized);
  }
  Stmt mutate_stmt(const IfThenElse* op, const Stmt& self) override {
    Stmt t = region(op->then_case);
    Stmt e = op->else_case.defined() ? region(op->else_case) : op->else_case;
    if (t.same_as(op->then_case) && e.same_as(op->else_case)) return self;
    return IfThenElse::make(op->cond, t, e);
  }
  Stmt mutate_stmt(const LetStmt* op, const Stmt& self) override {
    auto it = plan_.find(op);
    Stmt body = mutate(op->body);
    if (it == plan_.end())
      return body.same_as(op->body) ? self : LetStmt::make(op->name, op->value, body);
    const Lane& lane = it->second;
    Stmt let = LetStmt::make(op->name,
                             Load::make(op->value.type(), lane.array, {make_i64(lane.lane)}), body);
    if (!lane.move.defined()) return let;
    return Seq::make({lane.move, let});
  }

 public:
  Stmt region(const Stmt& s) {
    // Plan the groups of this region (not of nested regions), then rewrite it.
    std::vector<Member> members;
    std::map<std::string, Expr> lets;
    fences_.clear();
    position_ = 0;
    collect(s, &lets, &members);
    plan(members);
    return mutate(s);
  }

 private:
  struct Lane {
    std::string array;
    int lane = 0;
    Stmt move;  // on the group's first member only
  };

  // The region's lets in visiting order, with the int lets in scope at each for its index, and
  // the fences between them: a store to a shared array (that array), and a barrier, shuffle, or
  // nested loop or if (every array: other threads' or later iterations' writes may land there).
  void collect(const Stmt& s, std::map<std::string, Expr>* lets, std::vector<Member>* out) {
    if (region_boundary(s)) {
      fences_.push_back({position_++, ""});
      return;
    }
    if (const Seq* seq = s.as<Seq>()) {
      for (const Stmt& c : seq->stmts) collect(c, lets, out);
      return;
    }
    if (const Store* st = s.as<Store>()) {
      if (find_shared(*k_, st->buffer)) fences_.push_back({position_++, st->buffer});
      return;
    }
    if (const VectorMove* vm = s.as<VectorMove>()) {
      if (find_shared(*k_, vm->dst)) fences_.push_back({position_++, vm->dst});
      return;
    }
    const LetStmt* let = s.as<LetStmt>();
    if (!let) return;
    if (const Load* load = let->value.as<Load>()) {
      Poly p;
      if (find_shared(*k_, load->buffer) &&
          to_poly(load->indices[0], *lets, &p, 0, /*let_atoms=*/true)) {
        out->push_back({let, load->buffer, std::move(p), position_++});
        note_types(load->indices[0]);
      }
    }
    bool index_let = is_int(let->value.type());
    if (index_let) {
      (*lets)[let->name] = let->value;
      types_[let->name] = let->value.type();
    }
    collect(let->body, lets, out);
    if (index_let) lets->erase(let->name);
  }

  // Whether a fence for `buffer` sits between two positions.
  bool fenced(const std::string& buffer, int lo, int hi) const {
    for (auto& [at, what] : fences_)
      if (at > lo && at < hi && (what.empty() || what == buffer)) return true;
    return false;
  }

  // Groups members by array and index minus its constant; an aligned, full run of 4 (else of 2)
  // becomes one move, placed at the run's member visited first.
  void plan(const std::vector<Member>& members) {
    std::map<std::pair<std::string, Poly>, std::map<int64_t, const Member*>> groups;
    std::vector<std::pair<std::string, Poly>> order;  // first-seen order: deterministic names
    for (const Member& m : members) {
      Poly rest = m.index;
      int64_t c = 0;
      if (auto it = rest.find({}); it != rest.end()) c = it->second, rest.erase(it);
      auto key = std::make_pair(m.buffer, rest);
      if (!groups.count(key)) order.push_back(key);
      groups[key].emplace(c, &m);  // a repeated offset keeps its first member
    }
    for (const auto& key : order) {
      const std::map<int64_t, const Member*>& offsets = groups[key];
      const SimtArray* shared = find_shared(*k_, key.first);
      for (int lanes : {4, 2}) {
        if (dtype_bytes(shared->dtype, lanes) > 16) continue;
        bool aligned = true;
        for (auto& [m, c] : key.second) aligned = aligned && c % lanes == 0;
        if (!aligned) continue;
        for (auto& [c, unused] : offsets) {
          if (c % lanes != 0) continue;
          std::vector<const Member*> run;
          for (int l = 0; l < lanes; ++l) {
            auto it = offsets.find(c + l);
            if (it == offsets.end() || plan_.count(it->second->let)) break;
            run.push_back(it->second);
          }
          if (static_cast<int>(run.size()) != lanes) continue;
          int lo = run[0]->position, hi = lo;
          for (const Member* m : run)
            lo = std::min(lo, m->position), hi = std::max(hi, m->position);
          if (fenced(key.first, lo, hi)) continue;
          std::string array = names_->fresh(key.first + ".v");
          k_->local_arrays.push_back({array, shared->dtype, {lanes}});
          const Member* at = run[0];
          for (const Member* m : run)
            if (m->position < at->position) at = m;
          Poly base = key.second;
          if (c != 0) base[{}] = c;
          for (int l = 0; l < lanes; ++l) {
            Lane lane{array, l, Stmt()};
            if (run[l] == at)
              lane.move = VectorMove::make(array, make_i64(0), key.first, from_poly(base), lanes);
            plan_[run[l]->let] = lane;
          }
        }
      }
    }
  }

  // The polynomial as i64 arithmetic over its variables (loop variables, thread and block
  // indices, dims, and lets kept as atoms: all bound where the run's first member is).
  Expr from_poly(const Poly& p) const {
    Expr sum = make_i64(0);
    for (auto& [m, c] : p) {
      Expr term = make_i64(c);
      for (const std::string& v : m) {
        auto t = types_.find(v);
        Type type = t == types_.end() ? Type::I64 : t->second;
        Expr var = Var::make(type, v);
        term = mul(term, type == Type::I64 ? var : Cast::make(Type::I64, var));
      }
      sum = add(sum, term);
    }
    return sum;
  }

  void note_types(const Expr& e) {
    struct V : IRVisitor {
      std::map<std::string, Type>* types;
      void visit_expr(const Var* op) override { types->emplace(op->name, op->type); }
    } v;
    v.types = &types_;
    v.visit(e);
  }

  std::map<const LetStmt*, Lane> plan_;
  std::vector<std::pair<int, std::string>> fences_;  // position, shared array ("" = all)
  int position_ = 0;
  std::map<std::string, Type> types_;  // of the variables indices use
  SimtKernel* k_;
  NameGen* names_;
};

}  // namespace

SimtKernel vectorize_shared_loads(const SimtKernel& kernel) {
  NameGen names(kernel);
  SimtKernel out = kernel;
  out.body = Vectorizer(&out, &names).region(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
