#include "compiler/analysis/index_width.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>

#include "compiler/ir/ir_printer.h"

namespace tilerun::compiler {
namespace {

struct Range {
  __int128 lo, hi;
};

Range type_range(Type t) {
  switch (t) {
    case Type::Bool:
      return {0, 1};
    case Type::I8:
      return {INT8_MIN, INT8_MAX};
    case Type::I16:
      return {INT16_MIN, INT16_MAX};
    case Type::I32:
      return {INT32_MIN, INT32_MAX};
    default:
      return {INT64_MIN, INT64_MAX};
  }
}

bool within(const Range& r, const Range& of) { return r.lo >= of.lo && r.hi <= of.hi; }
Range hull(const Range& a, const Range& b) { return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; }

// Floor division of every value of `a` by every value of `b`; `b` excludes 0.
Range floordiv(const Range& a, const Range& b) {
  auto fd = [](__int128 x, __int128 y) {
    __int128 q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  };
  const __int128 c[4] = {fd(a.lo, b.lo), fd(a.lo, b.hi), fd(a.hi, b.lo), fd(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

// The smallest 2^k - 1 at or above v (v >= 0).
__int128 all_ones_above(__int128 v) {
  __int128 m = 0;
  while (m < v) m = m * 2 + 1;
  return m;
}

class Widths {
 public:
  explicit Widths(const SimtKernel& k) : k_(k) {
    for (const SimtLocal& l : k.locals) locals_[l.name] = {0, 0};  // every local starts at 0
  }

  IndexWidth run() {
    // Grow the locals' ranges to a fixed point; a local still growing after a few rounds
    // (a counter stepped in a loop) takes its type's range.
    for (int round = 0;; ++round) {
      reset();
      walk_kernel();
      bool grew = false;
      for (auto& [name, r] : locals_) {
        const Range seen = hull(r, assigned_[name]);
        if (seen.lo != r.lo || seen.hi != r.hi) {
          grew = true;
          r = round < 3 ? seen : type_range(local_type(name));
        }
      }
      if (!grew) break;
    }
    return {fits_, reason_};
  }

 private:
  void reset() {
    fits_ = true;
    reason_.clear();
    scope_.clear();
    assigned_.clear();
    for (auto& [name, r] : locals_) assigned_[name] = r;
  }

  Type local_type(const std::string& name) const {
    for (const SimtLocal& l : k_.locals)
      if (l.name == name) return l.type;
    return Type::I64;
  }

  void walk_kernel() {
    const KernelSignature& sig = k_.sig;
    for (const DimParam& d : sig.dims) scope_[d.name] = {d.bounds.min, d.bounds.max};
    for (const ScalarParam& s : sig.scalars) scope_[s.name] = type_range(s.type);
    scope_[kThreadIdx] = {0, std::max(sig.threads - 1, 0)};
    check_fits(scope_[kThreadIdx], "threadIdx.x");
    // The grid is the host's 64-bit arithmetic, never the kernel's: only its value bounds the
    // block index.
    checking_ = false;
    for (size_t i = 0; i < sig.grid.size() && i < 3; ++i) {
      const Range g = eval(sig.grid[i]);
      scope_[kBlockIdx[i]] = {0, std::max<__int128>(g.hi - 1, 0)};
    }
    checking_ = true;
    for (const DimParam& d : sig.dims) check_fits(scope_[d.name], "dim " + d.name);
    for (const auto& [name, r] : locals_)
      if (local_type(name) == Type::I64) check_fits(r, "local " + name);
    stmt(k_.body);
  }

  void fail(const std::string& why) {
    if (fits_) reason_ = why;
    fits_ = false;
  }

  void check_fits(const Range& r, const std::string& what) {
    if (!within(r, type_range(Type::I32)))
      fail(what + " may reach [" + text(r.lo) + ", " + text(r.hi) + "]");
  }

  static std::string text(__int128 v) {
    if (v <= INT64_MIN) return "-2^63";
    if (v >= INT64_MAX) return "2^63";
    return std::to_string(static_cast<int64_t>(v));
  }

  // The value of an i64 node: it must fit 32 bits (the first that may not is the reason).
  Range checked(const Expr& e, Range r) {
    if (checking_ && e.type() == Type::I64 && fits_ && !within(r, type_range(Type::I32))) {
      std::string s = to_string(e);
      if (s.size() > 160) s = s.substr(0, 157) + "...";
      fail("'" + s + "' may reach [" + text(r.lo) + ", " + text(r.hi) + "]");
    }
    // An integer that may leave its type wraps: any value of the type.
    const Range t = type_range(e.type());
    return within(r, t) ? r : t;
  }

  Range eval(const Expr& e) {
    const Type t = e.type();
    switch (e->kind) {
      case ExprKind::IntImm: {
        const int64_t v = e.as<IntImm>()->value;
        return checked(e, {v, v});
      }
      case ExprKind::FloatImm:
        return type_range(t);
      case ExprKind::Var: {
        auto it = scope_.find(e.as<Var>()->name);
        if (it != scope_.end()) return checked(e, it->second);
        auto lt = locals_.find(e.as<Var>()->name);
        return checked(e, lt != locals_.end() ? lt->second : type_range(t));
      }
      case ExprKind::Binary:
        return checked(e, binary(e.as<Binary>()));
      case ExprKind::Unary: {
        const Unary* u = e.as<Unary>();
        const Range a = eval(u->a);
        if (!is_int(t)) return type_range(t);
        if (u->op == UnaryOp::Neg) return checked(e, {-a.hi, -a.lo});
        return checked(e, {-a.hi - 1, -a.lo - 1});  // ~x = -x - 1
      }
      case ExprKind::Select: {
        const Select* s = e.as<Select>();
        eval(s->cond);
        return checked(e, hull(eval(s->true_value), eval(s->false_value)));
      }
      case ExprKind::Cast: {
        const Cast* c = e.as<Cast>();
        const Range in = eval(c->value);
        const bool from_int = is_int(c->value.type()) || c->value.type() == Type::Bool;
        return checked(e, from_int && is_int(t) ? in : type_range(t));
      }
      case ExprKind::Bitcast:
        eval(e.as<Bitcast>()->value);
        return checked(e, type_range(t));
      case ExprKind::Call:
        for (const Expr& a : e.as<Call>()->args) eval(a);
        return checked(e, type_range(t));
      case ExprKind::Let: {
        const Let* l = e.as<Let>();
        const Range v = eval(l->value);
        auto saved = bind(l->name, v);
        const Range r = eval(l->body);
        restore(l->name, saved);
        return checked(e, r);
      }
      case ExprKind::Load: {
        const Load* l = e.as<Load>();
        for (const Expr& i : l->indices) eval(i);
        const BufferParam* b = find_buffer(k_.sig, l->buffer);
        if (b && b->values_below.defined() && is_int(t)) {
          const Range below = eval(b->values_below);
          return checked(e, {0, std::max<__int128>(below.hi - 1, 0)});
        }
        return checked(e, type_range(t));
      }
    }
    return type_range(t);
  }

  Range binary(const Binary* b) {
    const Range x = eval(b->a), y = eval(b->b);
    const Type t = b->type;
    if (!is_int(t)) return type_range(t);  // comparisons (bool) and floats
    switch (b->op) {
      case BinaryOp::Add:
        return {x.lo + y.lo, x.hi + y.hi};
      case BinaryOp::Sub:
        return {x.lo - y.hi, x.hi - y.lo};
      case BinaryOp::Mul: {
        // Products of values within 2^64 fit the 128-bit bounds.
        const __int128 c[4] = {x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi};
        return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      }
      case BinaryOp::Div:
        if (y.lo > 0 || y.hi < 0) return floordiv(x, y);
        break;
      case BinaryOp::Mod: {
        if (y.lo > 0) {
          if (x.lo >= 0 && x.hi < y.lo) return x;
          return {0, y.hi - 1};
        }
        if (y.hi < 0) return {y.lo + 1, 0};
        break;
      }
      case BinaryOp::Min:
        return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
      case BinaryOp::Max:
        return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
      case BinaryOp::And:
        if (x.lo >= 0 && y.lo >= 0) return {0, std::min(x.hi, y.hi)};
        if (x.lo >= 0) return {0, x.hi};
        if (y.lo >= 0) return {0, y.hi};
        break;
      case BinaryOp::Or:
      case BinaryOp::Xor:
        if (x.lo >= 0 && y.lo >= 0) return {0, all_ones_above(std::max(x.hi, y.hi))};
        break;
      case BinaryOp::Shl:
        if (y.lo >= 0 && y.hi <= 62) {  // x * 2^y, |x| <= 2^63: within 2^125
          const __int128 f = static_cast<__int128>(1) << y.lo, g = static_cast<__int128>(1) << y.hi;
          const __int128 c[4] = {x.lo * f, x.lo * g, x.hi * f, x.hi * g};
          return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
        }
        break;
      case BinaryOp::ShrA:
      case BinaryOp::ShrL:
        if (y.lo >= 0 && (x.lo >= 0 || b->op == BinaryOp::ShrA)) {
          // Shifting right moves every value toward 0 (or -1): within [min(x.lo, -1), x.hi].
          return {x.lo >= 0 ? 0 : std::min<__int128>(x.lo, -1), std::max<__int128>(x.hi, 0)};
        }
        break;
      default:
        break;
    }
    return type_range(t);
  }

  std::optional<Range> bind(const std::string& name, const Range& r) {
    std::optional<Range> saved;
    auto it = scope_.find(name);
    if (it != scope_.end()) saved = it->second;
    scope_[name] = r;
    return saved;
  }
  void restore(const std::string& name, const std::optional<Range>& saved) {
    if (saved) {
      scope_[name] = *saved;
    } else {
      scope_.erase(name);
    }
  }

  void stmt(const Stmt& s) {
    if (!s.defined()) return;
    switch (s->kind) {
      case StmtKind::Seq:
        for (const Stmt& c : s.as<Seq>()->stmts) stmt(c);
        return;
      case StmtKind::LetStmt: {
        const LetStmt* op = s.as<LetStmt>();
        auto saved = bind(op->name, eval(op->value));
        stmt(op->body);
        restore(op->name, saved);
        return;
      }
      case StmtKind::For: {
        const For* op = s.as<For>();
        const Range mn = eval(op->min), ext = eval(op->extent);
        // The loop's end, min + extent, is a value the code computes (and the variable reaches).
        const Range end = {mn.lo + ext.lo, mn.hi + ext.hi};
        check_fits(end, "the end of loop '" + op->var + "'");
        const Range var = {mn.lo, std::max(mn.hi, end.hi - 1)};
        check_fits(var, "loop variable '" + op->var + "'");
        auto saved = bind(op->var, var);
        stmt(op->body);
        restore(op->var, saved);
        return;
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* op = s.as<IfThenElse>();
        eval(op->cond);
        stmt(op->then_case);
        stmt(op->else_case);
        return;
      }
      case StmtKind::Store: {
        const Store* op = s.as<Store>();
        for (const Expr& i : op->indices) eval(i);
        eval(op->value);
        return;
      }
      case StmtKind::Assign: {
        const Assign* op = s.as<Assign>();
        const Range v = eval(op->value);
        auto it = assigned_.find(op->name);
        if (it != assigned_.end()) it->second = hull(it->second, v);
        return;
      }
      case StmtKind::VectorMove: {
        const VectorMove* op = s.as<VectorMove>();
        eval(op->dst_index);
        eval(op->src_index);
        return;
      }
      case StmtKind::Gemm:
        if (s.as<Gemm>()->stage.defined()) eval(s.as<Gemm>()->stage);
        return;
      case StmtKind::AsyncCopy: {
        const AsyncCopy* op = s.as<AsyncCopy>();
        for (const Expr& i : op->dst_indices) eval(i);
        for (const Expr& i : op->src_indices) eval(i);
        eval(op->valid);
        return;
      }
      case StmtKind::TmaCopy: {
        const TmaCopy* op = s.as<TmaCopy>();
        for (const Expr& i : op->dst_indices) eval(i);
        for (const Expr& i : op->src_indices) eval(i);
        eval(op->barrier_index);
        return;
      }
      case StmtKind::MbarrierWait:
        eval(s.as<MbarrierWait>()->index);
        eval(s.as<MbarrierWait>()->parity);
        return;
      case StmtKind::Barrier:
      case StmtKind::WarpShuffle:
      case StmtKind::WarpBallot:
      case StmtKind::AsyncCommit:
      case StmtKind::AsyncWait:
      case StmtKind::GemmWait:
      case StmtKind::MbarrierInit:
        return;
      case StmtKind::Parallel:
      case StmtKind::Reduce:
      case StmtKind::Copy:
        fail("a Tile IR statement (not SIMT IR)");
        return;
    }
    fail("a statement the analysis does not know");
  }

  const SimtKernel& k_;
  std::map<std::string, Range> scope_;
  std::map<std::string, Range> locals_;    // each local's range so far (all its values)
  std::map<std::string, Range> assigned_;  // this round: the locals' ranges and what they are given
  bool fits_ = true;
  bool checking_ = true;  // false while bounding the grid (host arithmetic)
  std::string reason_;
};

}  // namespace

IndexWidth index_width(const SimtKernel& kernel) { return Widths(kernel).run(); }

}  // namespace tilerun::compiler
