#include "compiler/ir/ir_equal.h"

#include <cstring>

namespace tilerun::compiler {
namespace {

bool equal_all(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!equal(a[i], b[i])) return false;
  return true;
}

bool equal_region(const Region& a, const Region& b) {
  return a.buffer == b.buffer && equal_all(a.origin, b.origin) && a.extents == b.extents;
}

bool equal_sig(const KernelSignature& a, const KernelSignature& b) {
  if (a.name != b.name || a.threads != b.threads || !equal_all(a.grid, b.grid)) return false;
  if (a.dims.size() != b.dims.size() || a.buffers.size() != b.buffers.size() ||
      a.scalars.size() != b.scalars.size())
    return false;
  for (size_t i = 0; i < a.dims.size(); ++i) {
    const DimParam &x = a.dims[i], &y = b.dims[i];
    if (x.name != y.name || x.bounds.min != y.bounds.min || x.bounds.max != y.bounds.max ||
        x.bounds.divisible_by != y.bounds.divisible_by)
      return false;
  }
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const BufferParam &x = a.buffers[i], &y = b.buffers[i];
    if (x.name != y.name || x.dtype != y.dtype || x.is_output != y.is_output ||
        !equal_all(x.shape, y.shape) || x.values_below.defined() != y.values_below.defined() ||
        x.values_distinct != y.values_distinct || x.values_sorted != y.values_sorted ||
        (x.values_below.defined() && !equal(x.values_below, y.values_below)))
      return false;
  }
  for (size_t i = 0; i < a.scalars.size(); ++i)
    if (a.scalars[i].name != b.scalars[i].name || a.scalars[i].type != b.scalars[i].type)
      return false;
  return true;
}

bool equal_arrays(const std::vector<SimtArray>& a, const std::vector<SimtArray>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].layout != b[i].layout || !(a[i].swizzle == b[i].swizzle))
      return false;
  return true;
}

bool equal_stmt(const Stmt& a, const Stmt& b);

}  // namespace

bool equal(const Stmt& a, const Stmt& b) { return equal_stmt(a, b); }

bool equal(const Expr& a, const Expr& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a->kind != b->kind || a.type() != b.type()) return false;
  switch (a->kind) {
    case ExprKind::IntImm:
      return a.as<IntImm>()->value == b.as<IntImm>()->value;
    case ExprKind::FloatImm:
      return std::memcmp(&a.as<FloatImm>()->value, &b.as<FloatImm>()->value, sizeof(float)) == 0;
    case ExprKind::Var:
      return a.as<Var>()->name == b.as<Var>()->name;
    case ExprKind::Binary: {
      const Binary *x = a.as<Binary>(), *y = b.as<Binary>();
      return x->op == y->op && equal(x->a, y->a) && equal(x->b, y->b);
    }
    case ExprKind::Unary: {
      const Unary *x = a.as<Unary>(), *y = b.as<Unary>();
      return x->op == y->op && equal(x->a, y->a);
    }
    case ExprKind::Select: {
      const Select *x = a.as<Select>(), *y = b.as<Select>();
      return equal(x->cond, y->cond) && equal(x->true_value, y->true_value) &&
             equal(x->false_value, y->false_value);
    }
    case ExprKind::Cast:
      return equal(a.as<Cast>()->value, b.as<Cast>()->value);
    case ExprKind::Bitcast:
      return equal(a.as<Bitcast>()->value, b.as<Bitcast>()->value);
    case ExprKind::Call: {
      const Call *x = a.as<Call>(), *y = b.as<Call>();
      return x->op == y->op && equal_all(x->args, y->args);
    }
    case ExprKind::Let: {
      const Let *x = a.as<Let>(), *y = b.as<Let>();
      return x->name == y->name && equal(x->value, y->value) && equal(x->body, y->body);
    }
    case ExprKind::Load: {
      const Load *x = a.as<Load>(), *y = b.as<Load>();
      return x->buffer == y->buffer && equal_all(x->indices, y->indices);
    }
  }
  return false;
}

namespace {
bool equal_stmt(const Stmt& a, const Stmt& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case StmtKind::Seq: {
      const Seq *x = a.as<Seq>(), *y = b.as<Seq>();
      if (x->stmts.size() != y->stmts.size()) return false;
      for (size_t i = 0; i < x->stmts.size(); ++i)
        if (!equal_stmt(x->stmts[i], y->stmts[i])) return false;
      return true;
    }
    case StmtKind::LetStmt: {
      const LetStmt *x = a.as<LetStmt>(), *y = b.as<LetStmt>();
      return x->name == y->name && equal(x->value, y->value) && equal_stmt(x->body, y->body);
    }
    case StmtKind::For: {
      const For *x = a.as<For>(), *y = b.as<For>();
      return x->var == y->var && x->vectorized == y->vectorized && equal(x->min, y->min) &&
             equal(x->extent, y->extent) && equal_stmt(x->body, y->body);
    }
    case StmtKind::Parallel: {
      const Parallel *x = a.as<Parallel>(), *y = b.as<Parallel>();
      const ParallelLayout &l = x->layout, &m = y->layout;
      return x->vars == y->vars && equal_all(x->extents, y->extents) && l.width == m.width &&
             l.annotated == m.annotated && l.provable == m.provable && l.vectorize == m.vectorize &&
             // An empty thread-value layout reads as the default of its width (ir.h).
             (l.tv.rank() == 0 || m.tv.rank() == 0 || l.tv == m.tv) && equal_stmt(x->body, y->body);
    }
    case StmtKind::Reduce: {
      const Reduce *x = a.as<Reduce>(), *y = b.as<Reduce>();
      return x->name == y->name && x->op == y->op && x->var == y->var &&
             equal(x->extent, y->extent) && equal(x->value, y->value) &&
             equal_stmt(x->body, y->body);
    }
    case StmtKind::IfThenElse: {
      const IfThenElse *x = a.as<IfThenElse>(), *y = b.as<IfThenElse>();
      return equal(x->cond, y->cond) && equal_stmt(x->then_case, y->then_case) &&
             equal_stmt(x->else_case, y->else_case);
    }
    case StmtKind::Store: {
      const Store *x = a.as<Store>(), *y = b.as<Store>();
      return x->buffer == y->buffer && equal_all(x->indices, y->indices) &&
             equal(x->value, y->value);
    }
    case StmtKind::Assign: {
      const Assign *x = a.as<Assign>(), *y = b.as<Assign>();
      return x->name == y->name && equal(x->value, y->value);
    }
    case StmtKind::Copy: {
      const Copy *x = a.as<Copy>(), *y = b.as<Copy>();
      return equal_region(x->dst, y->dst) && equal_region(x->src, y->src) && x->async == y->async;
    }
    case StmtKind::AsyncCopy: {
      const AsyncCopy *x = a.as<AsyncCopy>(), *y = b.as<AsyncCopy>();
      return x->dst == y->dst && x->src == y->src && x->lanes == y->lanes &&
             equal_all(x->dst_indices, y->dst_indices) &&
             equal_all(x->src_indices, y->src_indices) && equal(x->valid, y->valid);
    }
    case StmtKind::AsyncCommit:
      return true;
    case StmtKind::AsyncWait:
      return a.as<AsyncWait>()->pending == b.as<AsyncWait>()->pending;
    case StmtKind::GemmWait:
      return a.as<GemmWait>()->pending == b.as<GemmWait>()->pending;
    case StmtKind::TmaCopy: {
      const TmaCopy *x = a.as<TmaCopy>(), *y = b.as<TmaCopy>();
      return x->dst == y->dst && x->src == y->src && x->box == y->box && x->barrier == y->barrier &&
             equal_all(x->dst_indices, y->dst_indices) &&
             equal_all(x->src_indices, y->src_indices) && equal(x->barrier_index, y->barrier_index);
    }
    case StmtKind::MbarrierInit: {
      const MbarrierInit *x = a.as<MbarrierInit>(), *y = b.as<MbarrierInit>();
      return x->barrier == y->barrier && x->count == y->count && x->invalidate == y->invalidate;
    }
    case StmtKind::MbarrierWait: {
      const MbarrierWait *x = a.as<MbarrierWait>(), *y = b.as<MbarrierWait>();
      return x->barrier == y->barrier && equal(x->index, y->index) && equal(x->parity, y->parity);
    }
    case StmtKind::Barrier:
      return true;
    case StmtKind::VectorMove: {
      const VectorMove *x = a.as<VectorMove>(), *y = b.as<VectorMove>();
      return x->dst == y->dst && x->src == y->src && x->lanes == y->lanes &&
             equal(x->dst_index, y->dst_index) && equal(x->src_index, y->src_index);
    }
    case StmtKind::WarpShuffle: {
      const WarpShuffle *x = a.as<WarpShuffle>(), *y = b.as<WarpShuffle>();
      return x->dst == y->dst && x->src == y->src && x->lane_xor == y->lane_xor;
    }
    case StmtKind::WarpBallot: {
      const WarpBallot *x = a.as<WarpBallot>(), *y = b.as<WarpBallot>();
      return x->dst == y->dst && x->src == y->src;
    }
    case StmtKind::Gemm: {
      const Gemm *x = a.as<Gemm>(), *y = b.as<Gemm>();
      return x->c == y->c && x->a == y->a && x->b == y->b && x->trans_a == y->trans_a &&
             x->trans_b == y->trans_b && x->m == y->m && x->n == y->n && x->k == y->k &&
             x->pending == y->pending && x->stage.defined() == y->stage.defined() &&
             (!x->stage.defined() ||
              (equal(x->stage, y->stage) && x->stage_a == y->stage_a && x->stage_b == y->stage_b));
    }
  }
  return false;
}
}  // namespace

bool equal(const Kernel& a, const Kernel& b) {
  if (!equal_sig(a.sig, b.sig) || a.allocs.size() != b.allocs.size()) return false;
  for (size_t i = 0; i < a.allocs.size(); ++i) {
    const TileAlloc &x = a.allocs[i], &y = b.allocs[i];
    if (x.name != y.name || x.scope != y.scope || x.dtype != y.dtype || x.shape != y.shape ||
        x.layout != y.layout || !(x.swizzle == y.swizzle))
      return false;
  }
  return equal(a.body, b.body);
}

bool equal(const SimtKernel& a, const SimtKernel& b) {
  if (!equal_sig(a.sig, b.sig) || !equal_arrays(a.shared, b.shared) ||
      !equal_arrays(a.local_arrays, b.local_arrays) || a.locals.size() != b.locals.size())
    return false;
  for (size_t i = 0; i < a.locals.size(); ++i)
    if (a.locals[i].name != b.locals[i].name || a.locals[i].type != b.locals[i].type) return false;
  return equal(a.body, b.body);
}

}  // namespace tilerun::compiler
