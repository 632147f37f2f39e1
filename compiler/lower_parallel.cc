#include "compiler/lower_parallel.h"

#include "compiler/ir_printer.h"
#include "compiler/ir_visitor.h"
#include "compiler/names.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

class ParallelLowerer : public IRMutator {
 public:
  ParallelLowerer(const Kernel& k, NameGen* names) : k_(k), names_(names) {}

 protected:
  Stmt mutate_stmt(const Parallel* op, const Stmt&) override {
    const int64_t threads = k_.sig.threads;
    Expr n = make_i64(1);
    for (const Expr& e : op->extents) n = mul(n, e);
    // A single trip (n <= T) needs no loop: the iteration number is the constant 0.
    Expr trips = ceildiv(n, make_i64(threads));
    int64_t trips_const;
    bool single = const_int(trips, &trips_const) && trips_const == 1;
    std::string it = single ? "" : names_->fresh("it"), lin = names_->fresh("lin");
    Expr it_v = single ? make_i64(0) : Var::make(Type::I64, it);
    Expr lin_v = Var::make(Type::I64, lin);

    current_ = op;
    iteration_ = it_v;
    Stmt body = mutate(op->body);
    current_ = nullptr;
    // Peel the linear index into the loop's indices, innermost fastest.
    Expr stride = make_i64(1);
    for (size_t d = op->vars.size(); d-- > 0;) {
      Expr idx = floordiv(lin_v, stride);
      if (d > 0) idx = floormod(idx, op->extents[d]);
      body = LetStmt::make(op->vars[d], idx, body);
      stride = mul(stride, op->extents[d]);
    }
    int64_t n_const;
    bool exact = const_int(n, &n_const) && n_const % threads == 0;
    if (!exact) body = IfThenElse::make(lt(lin_v, n), body);
    body = LetStmt::make(lin, add(mul(it_v, make_i64(threads)), Var::make(Type::I64, kThreadIdx)),
                         body);
    return single ? body : For::make(it, make_i64(0), trips, body);
  }

  Expr mutate_expr(const Load* op, const Expr& self) override {
    if (!is_fragment(op->buffer)) return IRMutator::mutate_expr(op, self);
    check_fragment_access(op->buffer, op->indices);
    return Load::make(op->type, op->buffer, {iteration_});
  }

  Stmt mutate_stmt(const Store* op, const Stmt& self) override {
    if (!is_fragment(op->buffer)) return IRMutator::mutate_stmt(op, self);
    check_fragment_access(op->buffer, op->indices);
    return Store::make(op->buffer, {iteration_}, mutate(op->value));
  }

 private:
  bool is_fragment(const std::string& name) const {
    const TileAlloc* a = find_alloc(k_, name);
    return a && a->scope == MemScope::Fragment;
  }

  void check_fragment_access(const std::string& name, const std::vector<Expr>& idx) const {
    const TileAlloc* a = find_alloc(k_, name);
    bool ok = current_ != nullptr && idx.size() == current_->vars.size();
    for (size_t d = 0; ok && d < idx.size(); ++d) {
      const Var* v = idx[d].as<Var>();
      int64_t extent;
      ok = v && v->name == current_->vars[d] && const_int(current_->extents[d], &extent) &&
           extent == a->shape[d];
    }
    if (!ok) {
      std::string at;
      for (size_t d = 0; d < idx.size(); ++d) at += (d ? ", " : "") + to_string(idx[d]);
      throw Error("kernel '" + k_.sig.name + "': fragment '" + name + "' accessed at [" + at +
                  "]; with the fixed thread mapping a fragment must be indexed by exactly the "
                  "enclosing parallel loop's indices, over a loop whose extents equal its shape");
    }
  }

  const Kernel& k_;
  NameGen* names_;
  const Parallel* current_ = nullptr;
  Expr iteration_;
};

}  // namespace

SimtKernel lower_parallel(const Kernel& kernel) {
  NameGen names(kernel);
  SimtKernel out;
  out.sig = kernel.sig;
  const int64_t threads = kernel.sig.threads;
  for (const TileAlloc& a : kernel.allocs) {
    if (a.scope == MemScope::Shared) {
      out.shared.push_back({a.name, a.dtype, a.shape});
    } else {
      int64_t numel = 1;
      for (int64_t e : a.shape) numel *= e;
      out.local_arrays.push_back({a.name, a.dtype, {(numel + threads - 1) / threads}});
    }
  }
  out.body = ParallelLowerer(kernel, &names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
