#include "compiler/transforms/lower_reductions.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "compiler/base/check.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"

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

    // Across threads: a butterfly over the lanes of each warp (shuffle_xor by 16, 8, 4, 2, 1),
    // after which every lane holds its warp's total (a + b == b + a, so partners agree), then the
    // warps' totals in warp order through shared scratch, reduced by one more butterfly in the
    // first warp. Two barriers whatever the block size; the order is fixed by the layout: each
    // thread its own elements in sequence, the shuffle tree, the warps in order.
    const int64_t warp = std::min<int64_t>(threads, 32), warps = threads / warp;
    std::string shfl = names_->fresh(op->name + ".lane");
    k_->allocs.push_back({shfl, MemScope::Fragment, dtype_of(t), {threads}});
    auto butterfly = [&](int64_t lanes) {
      for (int64_t x = lanes / 2; x >= 1; x /= 2) {
        steps.push_back(WarpShuffle::make(shfl, part, static_cast<int>(x)));
        steps.push_back(per_thread(threads, [&](Expr tid) {
          return Store::make(part, {tid},
                             combine(op->op, part_at(tid), Load::make(t, shfl, {tid})));
        }));
      }
    };
    auto first_of = [&](int64_t group, const std::function<Stmt(Expr)>& body) {
      return per_thread(threads, [&](Expr tid) {
        return IfThenElse::make(
            Binary::make(BinaryOp::Eq, floormod(tid, make_i64(group)), make_i64(0)), body(tid));
      });
    };
    butterfly(warp);
    if (warps > 1) {
      steps.push_back(first_of(warp, [&](Expr tid) {
        return Store::make(scratch, {floordiv(tid, make_i64(warp))}, part_at(tid));
      }));
      steps.push_back(Barrier::make());
      steps.push_back(per_thread(threads, [&](Expr tid) {
        return Store::make(
            part, {tid},
            Select::make(lt(tid, make_i64(warps)), scratch_at(tid), identity(op->op, t)));
      }));
      butterfly(warps);
    }
    steps.push_back(first_of(
        threads, [&](Expr tid) { return Store::make(scratch, {make_i64(0)}, part_at(tid)); }));
    steps.push_back(Barrier::make());
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
