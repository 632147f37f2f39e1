#include "compiler/lower_reductions.h"

#include <functional>
#include <limits>

#include "compiler/check.h"
#include "compiler/ir_visitor.h"
#include "compiler/names.h"

namespace tilerun::compiler {
namespace {

DType dtype_of(Type t) {
  switch (t) {
    case Type::F32:
      return DType::F32;
    case Type::I32:
      return DType::I32;
    case Type::I64:
      return DType::I64;
    default:
      TR_CHECK(false, std::string("reduction of ") + type_name(t));
  }
}

Expr identity(ReduceOp op, Type t) {
  if (t == Type::F32) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    // -0 is the exact identity of IEEE addition (-0 + -0 = -0, while +0 + -0 = +0).
    return make_f32(op == ReduceOp::Sum ? -0.0f : op == ReduceOp::Max ? -inf : inf);
  }
  int64_t lo =
      t == Type::I32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  int64_t hi =
      t == Type::I32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  return make_const(t, op == ReduceOp::Sum ? 0 : op == ReduceOp::Max ? lo : hi);
}

Expr combine(ReduceOp op, Expr a, Expr b) {
  BinaryOp bop = op == ReduceOp::Sum   ? BinaryOp::Add
                 : op == ReduceOp::Max ? BinaryOp::Max
                                       : BinaryOp::Min;
  return Binary::make(bop, std::move(a), std::move(b));
}

class ReductionLowerer : public IRMutator {
 public:
  ReductionLowerer(Kernel* k, NameGen* names) : k_(k), names_(names) {}

 protected:
  Stmt mutate_stmt(const Reduce* op, const Stmt&) override {
    const int64_t threads = k_->sig.threads;
    Type t = op->value.type();
    std::string part = names_->fresh(op->name + ".part");
    std::string scratch = names_->fresh(op->name + ".scratch");
    k_->allocs.push_back({part, MemScope::Fragment, dtype_of(t), {threads}});
    k_->allocs.push_back({scratch, MemScope::Shared, dtype_of(t), {threads}});

    // One element per thread: parallel over [0, threads) at index tid is the thread itself.
    auto per_thread = [&](int64_t extent, const std::function<Stmt(Expr)>& body) {
      std::string v = names_->fresh("t");
      return Parallel::make({v}, {make_i64(extent)}, body(Var::make(Type::I64, v)));
    };
    auto part_at = [&](Expr i) { return Load::make(t, part, {std::move(i)}); };
    auto scratch_at = [&](Expr i) { return Load::make(t, scratch, {std::move(i)}); };

    std::vector<Stmt> steps;
    steps.push_back(per_thread(
        threads, [&](Expr tid) { return Store::make(part, {tid}, identity(op->op, t)); }));
    std::string k = names_->fresh("k");
    Expr kv = Var::make(Type::I64, k);
    Stmt fold = per_thread(threads, [&](Expr tid) {
      Expr r = Var::make(Type::I64, op->var);
      Stmt acc = Store::make(part, {tid}, combine(op->op, part_at(tid), op->value));
      return LetStmt::make(op->var, add(mul(kv, make_i64(threads)), tid),
                           IfThenElse::make(lt(r, op->extent), acc));
    });
    steps.push_back(For::make(k, make_i64(0), ceildiv(op->extent, make_i64(threads)), fold));
    steps.push_back(
        per_thread(threads, [&](Expr tid) { return Store::make(scratch, {tid}, part_at(tid)); }));
    steps.push_back(Barrier::make());
    for (int64_t s = threads / 2; s >= 1; s /= 2) {
      steps.push_back(per_thread(s, [&](Expr tid) {
        return Store::make(scratch, {tid},
                           combine(op->op, scratch_at(tid), scratch_at(add(tid, make_i64(s)))));
      }));
      steps.push_back(Barrier::make());
    }
    Stmt rest = Seq::make({Barrier::make(), mutate(op->body)});
    steps.push_back(LetStmt::make(op->name, scratch_at(make_i64(0)), rest));
    return Seq::make(std::move(steps));
  }

 private:
  Kernel* k_;
  NameGen* names_;
};

}  // namespace

Kernel lower_reductions(const Kernel& kernel) {
  NameGen names(kernel);
  Kernel out = kernel;
  out.body = ReductionLowerer(&out, &names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
