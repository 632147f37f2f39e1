#include "compiler/transforms/lower_parallel.h"

#include <algorithm>
#include <climits>
#include <map>

#include "compiler/base/check.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/layout_index.h"
#include "compiler/ir/names.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

// The thread-value layout a Parallel follows: inference's, or for IR written before inference
// (or parsed without one) the default of its width.
Layout effective_tv(const ParallelLayout& l, int64_t threads) {
  return l.tv.rank() > 0 ? l.tv : thread_value_layout(threads, std::max(l.width, 1));
}

// A thread-value layout cut into its thread modes (sizes multiplying to T) and its value modes
// (to W). Lowering needs the values innermost and the whole compact, so that one thread's W
// values are consecutive (the vector moves) and the rounds tile the elements exactly.
struct ModeSplit {
  Layout threads, values;
  int64_t width = 1;
};

// `ok` (when given) receives whether the layout has that form instead of an error.
ModeSplit split_modes(const Layout& tv, int64_t threads, bool* ok_out = nullptr) {
  ModeSplit out;
  int m = 0;
  int64_t t = 1;
  for (; m < tv.rank() && t < threads; ++m) {
    t *= tv.shape[m];
    out.threads.shape.push_back(tv.shape[m]);
    out.threads.stride.push_back(tv.stride[m]);
  }
  for (; m < tv.rank(); ++m) {
    out.width *= tv.shape[m];
    out.values.shape.push_back(tv.shape[m]);
    out.values.stride.push_back(tv.stride[m]);
  }
  int64_t min_thread_stride = INT64_MAX, max_value_stride = 0;
  for (int64_t d : out.threads.stride) min_thread_stride = std::min(min_thread_stride, d);
  for (int64_t d : out.values.stride) max_value_stride = std::max(max_value_stride, d);
  const bool ok = t == threads && is_compact(tv) && tv.size() == threads * out.width &&
                  (out.values.rank() == 0 || max_value_stride < min_thread_stride);
  if (ok_out) {
    *ok_out = ok;
    if (!ok) return out;
  }
  if (!ok)
    throw Error("thread-value layout " + to_string(tv) + " for " + std::to_string(threads) +
                " threads: lowering follows compact layouts whose value modes are innermost");
  // The value modes' offsets are relative to the thread's first value: strides divided down.
  for (int64_t& d : out.threads.stride) d /= out.width;
  return out;
}

// The coordinates of linear index `i` over the modes of `l` (mode 0 fastest); a single mode is
// the index itself.
std::vector<Expr> coords(const Layout& l, const Expr& i) {
  if (l.rank() == 1) return {i};
  std::vector<Expr> out;
  int64_t below = 1;
  for (int m = 0; m < l.rank(); ++m) {
    Expr c = below == 1 ? i : floordiv(i, make_i64(below));
    out.push_back(m + 1 < l.rank() ? floormod(c, make_i64(l.shape[m])) : c);
    below *= l.shape[m];
  }
  return out;
}

class ParallelLowerer : public IRMutator {
 public:
  ParallelLowerer(const Kernel& k, NameGen* names) : k_(k), names_(names) {}

 protected:
  // Deals the elements by the Parallel's thread-value layout (ir.h ParallelLayout::tv, from
  // infer_layouts; layout.h thread_value_layout): round `it` covers the tile of T·W elements
  // [it·T·W, (it+1)·T·W), thread t holds the values tv(t, v). The layout is followed through
  // layout_index: for the compact layouts inference makes, (T,W):(W,1), that is the Horner chain
  // group = it·T + t, lin = group·W + lane, with lane in [0, W) innermost as a `vectorized` loop
  // when the layout says its accesses are proved vectors; the fragment local index is it·W +
  // lane. Width 1, (T):(1), is the plain lin = it·T + t.
  Stmt mutate_stmt(const Parallel* op, const Stmt&) override {
    const int64_t threads = k_.sig.threads;
    const Layout tv = effective_tv(op->layout, threads);
    bool standard = false;
    const ModeSplit split = split_modes(tv, threads, &standard);
    if (!standard) return lower_general(op, tv);
    const int64_t width = split.width;
    Expr n = make_i64(1);
    for (const Expr& e : op->extents) n = mul(n, e);
    // A single trip (n <= T·W) needs no loop: the iteration number is the constant 0.
    Expr trips = ceildiv(n, make_i64(threads * width));
    int64_t trips_const;
    bool single = const_int(trips, &trips_const) && trips_const == 1;
    std::string it = single ? "" : names_->fresh("it"), lin = names_->fresh("lin");
    std::string lane = width > 1 ? names_->fresh("lane") : "";
    Expr it_v = single ? make_i64(0) : Var::make(Type::I64, it);
    Expr lin_v = Var::make(Type::I64, lin);
    Expr lane_v = width > 1 ? Var::make(Type::I64, lane) : make_i64(0);

    current_ = op;
    iteration_ = width > 1 ? add(mul(it_v, make_i64(width)), lane_v) : it_v;
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
    Expr thread =
        layout_index(split.threads, coords(split.threads, Var::make(Type::I64, kThreadIdx)), it_v);
    int64_t n_const;
    bool exact = const_int(n, &n_const) && n_const % (threads * width) == 0;
    if (width == 1) {
      if (!exact) body = IfThenElse::make(lt(lin_v, n), body);
      body = LetStmt::make(lin, thread, body);
    } else {
      // n % W == 0 (infer_layouts), so a vector is either wholly inside or wholly outside.
      std::string group = names_->fresh("group");
      Expr group_v = Var::make(Type::I64, group);
      body = LetStmt::make(lin, layout_index(split.values, coords(split.values, lane_v), group_v),
                           body);
      body = For::make(lane, make_i64(0), make_i64(width), body, op->layout.vectorize);
      if (!exact) body = IfThenElse::make(lt(mul(group_v, make_i64(width)), n), body);
      body = LetStmt::make(group, thread, body);
    }
    return single ? body : For::make(it, make_i64(0), trips, body);
  }

  // Any other thread-value layout that covers the elements once in one round (a gemm
  // accumulator's, layout.h wgmma_accumulator_layout): thread t's value v is element tv(t, v)
  // and its fragment local index is v, in a plain loop over v. When the layout moves vectors
  // (infer_layouts: the values come in pairs of consecutive elements, layout.h value_pairs, and
  // the accesses are proved 2-lane vectors), v = 2u + lane with lane innermost as a `vectorized`
  // loop: lin = h·2 + lane, h = tv(t, 2u) / 2 (every stride but the pair's is even), the form
  // vectorize_accesses reads, and the same element and local index for every (t, v).
  Stmt lower_general(const Parallel* op, const Layout& tv) {
    const int64_t threads = k_.sig.threads;
    ModeSplit split;
    int64_t t = 1;
    int m = 0;
    for (; m < tv.rank() && t < threads; ++m) {
      t *= tv.shape[m];
      split.threads.shape.push_back(tv.shape[m]);
      split.threads.stride.push_back(tv.stride[m]);
    }
    for (; m < tv.rank(); ++m) {
      split.width *= tv.shape[m];
      split.values.shape.push_back(tv.shape[m]);
      split.values.stride.push_back(tv.stride[m]);
    }
    Expr n = make_i64(1);
    for (const Expr& e : op->extents) n = mul(n, e);
    int64_t n_const;
    if (t != threads || !const_int(n, &n_const) || n_const != tv.size() ||
        !is_bijection({Swizzle{}, tv}, tv.size()))
      throw Error("kernel '" + k_.sig.name + "': thread-value layout " + to_string(tv) + " for " +
                  std::to_string(threads) + " threads does not cover the parallel's elements " +
                  "once in one round");
    int64_t inner;
    const bool pairs = op->layout.vectorize && value_pairs(tv, threads) &&
                       const_int(op->extents.back(), &inner) && inner % 2 == 0;
    std::string v = names_->fresh(pairs ? "u" : "v"), lin = names_->fresh("lin");
    std::string lane = pairs ? names_->fresh("lane") : "";
    Expr v_v = Var::make(Type::I64, v);
    Expr lane_v = pairs ? Var::make(Type::I64, lane) : Expr();
    current_ = op;
    iteration_ = pairs ? add(mul(v_v, make_i64(2)), lane_v) : v_v;
    Stmt body = mutate(op->body);
    current_ = nullptr;
    if (!pairs)
      if (Stmt digits = lower_by_digits(op, split, v_v, body); digits.defined())
        return For::make(v, make_i64(0), make_i64(split.width), digits);
    Expr lin_v = Var::make(Type::I64, lin);
    Expr stride = make_i64(1);
    for (size_t d = op->vars.size(); d-- > 0;) {
      Expr idx = floordiv(lin_v, stride);
      if (d > 0) idx = floormod(idx, op->extents[d]);
      body = LetStmt::make(op->vars[d], idx, body);
      stride = mul(stride, op->extents[d]);
    }
    if (pairs) {
      // The pair mode (the first value mode of more than one value) dropped and every other
      // stride halved: h = tv(t, 2u) / 2.
      Layout rest;
      bool dropped = false;
      for (int i = 0; i < split.values.rank(); ++i) {
        if (split.values.shape[i] == 1) continue;
        if (!dropped) {
          TR_CHECK(split.values.shape[i] == 2 && split.values.stride[i] == 1, "pair mode");
          dropped = true;
          continue;
        }
        rest.shape.push_back(split.values.shape[i]);
        rest.stride.push_back(split.values.stride[i] / 2);
      }
      for (int64_t& d : split.threads.stride) d /= 2;
      Expr half =
          layout_index(split.threads, coords(split.threads, Var::make(Type::I64, kThreadIdx)));
      if (rest.rank() > 0) half = add(half, layout_index(rest, coords(rest, v_v)));
      body = LetStmt::make(lin, add(mul(half, make_i64(2)), lane_v), body);
      body = For::make(lane, make_i64(0), make_i64(2), body, /*vectorized=*/true);
      return For::make(v, make_i64(0), make_i64(split.width / 2), body);
    }
    Expr thread_part =
        layout_index(split.threads, coords(split.threads, Var::make(Type::I64, kThreadIdx)));
    Expr value_part = layout_index(split.values, coords(split.values, v_v));
    body = LetStmt::make(lin, add(thread_part, value_part), body);
    return For::make(v, make_i64(0), make_i64(split.width), body);
  }

  // The loop's indices straight from the layout's modes where each mode's offsets fall within one
  // index: with constant extents, index d (d = 0 outermost) is the digit of the linear index at
  // place P_d = the product of the later extents, and a mode of stride s (a multiple of P_d) and
  // shape n adds coord·s / P_d to it. Exact when, per index, the largest offsets of its modes sum
  // below P_d·extent_d (no carry into the next digit): then index d = the sum of its modes' terms,
  // the thread's and the value's apart. A gemm accumulator's rows are then the thread's row plus
  // a constant per value (0 or 8), so the values of a row read the same addresses (a row's
  // scale, matmul_fp8's promotion) where lin / 128 hid it. Undefined where a mode straddles two
  // indices.
  Stmt lower_by_digits(const Parallel* op, const ModeSplit& split, const Expr& v_v,
                       const Stmt& body) {
    const size_t rank = op->vars.size();
    std::vector<int64_t> extent(rank), place(rank);
    int64_t p = 1;
    for (size_t d = rank; d-- > 0;) {
      if (!const_int(op->extents[d], &extent[d]) || extent[d] < 1) return Stmt();
      place[d] = p;
      p *= extent[d];
    }
    std::vector<Expr> index(rank);
    std::vector<int64_t> largest(rank, 0);
    auto add_modes = [&](const Layout& l, const Expr& i) {
      std::vector<Expr> c = coords(l, i);
      for (int m = 0; m < l.rank(); ++m) {
        if (l.shape[m] == 1) continue;
        size_t d = 0;
        while (d < rank && l.stride[m] < place[d]) ++d;
        if (d == rank || l.stride[m] % place[d] != 0) return false;
        largest[d] += (l.shape[m] - 1) * l.stride[m];
        Expr term = mul(c[m], make_i64(l.stride[m] / place[d]));
        index[d] = index[d].defined() ? add(index[d], term) : term;
      }
      return true;
    };
    if (!add_modes(split.threads, Var::make(Type::I64, kThreadIdx)) ||
        !add_modes(split.values, v_v))
      return Stmt();
    for (size_t d = 0; d < rank; ++d)
      if (largest[d] >= place[d] * extent[d]) return Stmt();
    Stmt out = body;
    for (size_t d = rank; d-- > 0;)
      out = LetStmt::make(op->vars[d], index[d].defined() ? index[d] : make_i64(0), out);
    return out;
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

// The width of the Parallels touching each fragment (infer_layouts made them agree).
class FragmentWidths : public IRVisitor {
 public:
  explicit FragmentWidths(const Kernel& k) : k_(k) {}
  std::map<std::string, int> width;

 protected:
  void visit_stmt(const Parallel* op) override {
    // The values per thread: the width of a standard layout, all of a general one's values.
    const Layout tv = effective_tv(op->layout, k_.sig.threads);
    bool standard = false;
    const ModeSplit split = split_modes(tv, k_.sig.threads, &standard);
    current_ = static_cast<int>(standard ? split.width : tv.size() / k_.sig.threads);
    IRVisitor::visit_stmt(op);
    current_ = 1;
  }
  void visit_expr(const Load* op) override {
    note(op->buffer);
    IRVisitor::visit_expr(op);
  }
  void visit_stmt(const Store* op) override {
    note(op->buffer);
    IRVisitor::visit_stmt(op);
  }

 private:
  void note(const std::string& name) {
    const TileAlloc* a = find_alloc(k_, name);
    if (!a || a->scope != MemScope::Fragment) return;
    auto [it, fresh] = width.emplace(name, current_);
    if (!fresh && it->second != current_)
      throw Error("kernel '" + k_.sig.name + "': fragment '" + name +
                  "' is used by parallels of widths " + std::to_string(it->second) + " and " +
                  std::to_string(current_) + " (infer_layouts must run first)");
  }
  const Kernel& k_;
  int current_ = 1;
};

}  // namespace

SimtKernel lower_parallel(const Kernel& kernel) {
  NameGen names(kernel);
  SimtKernel out;
  out.sig = kernel.sig;
  const int64_t threads = kernel.sig.threads;
  FragmentWidths widths(kernel);
  widths.visit(kernel.body);
  for (const TileAlloc& a : kernel.allocs) {
    if (a.scope == MemScope::Shared) {
      out.shared.push_back({a.name, a.dtype, a.shape, a.layout, a.swizzle});
    } else {
      int64_t numel = 1;
      for (int64_t e : a.shape) numel *= e;
      auto it = widths.width.find(a.name);
      const int64_t w = it == widths.width.end() ? 1 : it->second;
      out.local_arrays.push_back(
          {a.name, a.dtype, {(numel + threads * w - 1) / (threads * w) * w}});
    }
  }
  out.body = ParallelLowerer(kernel, &names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
