// over 600 lines: the builder is one API surface (Val arithmetic, Buf, Scope, KernelBuilder) whose
// methods each check their arguments and record one IR node; split, each part would need the rest.
#include "compiler/ir/builder.h"

#include <algorithm>

#include <cctype>
#include <cmath>
#include <set>

#include "compiler/base/check.h"
#include "compiler/ir/tile_verifier.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

// What body() records into: a stack of open statement lists. A binder item (let, reduce)
// takes the rest of its list as its body when the list closes.
struct BuilderState {
  struct Item {
    Stmt stmt;
    std::function<Stmt(Stmt)> bind;  // set for binders
  };

  Kernel kernel;
  std::set<std::string> names;
  std::vector<std::vector<Item>> frames;
  int next_id = 0;
  bool has_body = false;
  int pending_width = 0;  // annotate_layout's width for the next parallel

  ParallelLayout take_layout() {
    ParallelLayout l;
    if (pending_width) l = {.width = pending_width, .annotated = true};
    pending_width = 0;
    return l;
  }

  std::string fresh(const std::string& hint) { return hint + "." + std::to_string(next_id++); }

  void append(Stmt s) {
    if (frames.empty()) throw Error("statements can only be recorded inside KernelBuilder::body");
    frames.back().push_back({std::move(s), nullptr});
  }
  void bind(std::function<Stmt(Stmt)> binder) {
    if (frames.empty()) throw Error("statements can only be recorded inside KernelBuilder::body");
    frames.back().push_back({Stmt(), std::move(binder)});
  }
  void push() { frames.emplace_back(); }
  Stmt pop() {
    std::vector<Item> items = std::move(frames.back());
    frames.pop_back();
    std::vector<Stmt> tail;
    for (auto it = items.rbegin(); it != items.rend(); ++it) {
      if (it->bind) {
        tail = {it->bind(Seq::make(std::vector<Stmt>(tail.rbegin(), tail.rend())))};
      } else {
        tail.push_back(it->stmt);
      }
    }
    return Seq::make(std::vector<Stmt>(tail.rbegin(), tail.rend()));
  }

  void declare(const std::string& name, const char* what) {
    bool ident =
        !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
    for (char c : name) ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ident)
      throw Error("kernel '" + kernel.sig.name + "': " + what + " name '" + name +
                  "' is not an identifier");
    if (!names.insert(name).second)
      throw Error("kernel '" + kernel.sig.name + "': " + what + " name '" + name +
                  "' is already used");
  }
};

namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error("tile builder: " + msg); }

const Expr& need(const Val& v, const char* what) {
  if (!v.defined()) fail(std::string("undefined value used as ") + what);
  return v.expr();
}

void same_type(const Val& a, const Val& b, const char* op) {
  need(a, op);
  need(b, op);
  if (a.type() != b.type())
    fail(std::string("operands of '") + op + "' have types " + type_name(a.type()) + " and " +
         type_name(b.type()) + "; convert explicitly (to_f32, to_i64, ...)");
}

Val arith(BinaryOp op, const Val& a, const Val& b) {
  same_type(a, b, binary_op_name(op));
  if (a.type() == Type::Bool) fail(std::string("arithmetic '") + binary_op_name(op) + "' on bool");
  if (op == BinaryOp::Mod && is_float(a.type())) fail("'%' on f32");
  // Integer constants fold (so `Val(8) * 2` is the constant extent 16 a fragment needs); f32
  // never does: x + 0 is not x for x = -0, nor x * 0 zero for inf and NaN.
  if (is_int(a.type())) {
    switch (op) {
      case BinaryOp::Add:
        return add(a.expr(), b.expr());
      case BinaryOp::Sub:
        return sub(a.expr(), b.expr());
      case BinaryOp::Mul:
        return mul(a.expr(), b.expr());
      case BinaryOp::Div:
        return floordiv(a.expr(), b.expr());
      case BinaryOp::Mod:
        return floormod(a.expr(), b.expr());
      default:
        break;
    }
  }
  return Binary::make(op, a.expr(), b.expr());
}

Val compare(BinaryOp op, const Val& a, const Val& b) {
  same_type(a, b, binary_op_name(op));
  return Binary::make(op, a.expr(), b.expr());
}

Val f32_call(CallOp op, std::vector<Val> args) {
  std::vector<Expr> es;
  for (const Val& v : args) {
    need(v, call_op_name(op));
    if (v.type() != Type::F32)
      fail(std::string(call_op_name(op)) + " takes f32, got " + type_name(v.type()));
    es.push_back(v.expr());
  }
  return Call::make(op, std::move(es));
}

std::vector<Expr> index_exprs(const std::vector<Val>& idx, const std::string& buffer) {
  std::vector<Expr> out;
  for (const Val& v : idx) {
    need(v, "an index");
    if (v.type() != Type::I64)
      fail("index of '" + buffer + "' is " + type_name(v.type()) + ", expected i64 (to_i64)");
    out.push_back(v.expr());
  }
  return out;
}

}  // namespace

Expr Val::int_literal(int64_t v) { return make_i64(v); }
Expr Val::float_literal(double v) { return make_f32(static_cast<float>(v)); }

Val literal(Type t, double value) {
  if (t == Type::F32) return make_f32(static_cast<float>(value));
  if (t == Type::Bool) fail("a number used as a bool");
  if (value != std::floor(value))
    fail("non-integral number " + std::to_string(value) + " used as " + type_name(t));
  return make_const(t, static_cast<int64_t>(value));
}
Val boolean(bool value) { return make_bool(value); }
Val like(const Val& v, double number) { return literal(need(v, "an operand").type(), number); }

Val operator+(const Val& a, const Val& b) { return arith(BinaryOp::Add, a, b); }
Val operator-(const Val& a, const Val& b) { return arith(BinaryOp::Sub, a, b); }
Val operator*(const Val& a, const Val& b) { return arith(BinaryOp::Mul, a, b); }
Val operator/(const Val& a, const Val& b) { return arith(BinaryOp::Div, a, b); }
Val operator%(const Val& a, const Val& b) { return arith(BinaryOp::Mod, a, b); }
Val operator-(const Val& a) {
  if (need(a, "-").type() == Type::Bool) fail("negating a bool");
  return Unary::make(UnaryOp::Neg, a.expr());
}
Val operator==(const Val& a, const Val& b) { return compare(BinaryOp::Eq, a, b); }
Val operator!=(const Val& a, const Val& b) { return compare(BinaryOp::Ne, a, b); }
Val operator<(const Val& a, const Val& b) { return compare(BinaryOp::Lt, a, b); }
Val operator<=(const Val& a, const Val& b) { return compare(BinaryOp::Le, a, b); }
Val operator>(const Val& a, const Val& b) { return compare(BinaryOp::Gt, a, b); }
Val operator>=(const Val& a, const Val& b) { return compare(BinaryOp::Ge, a, b); }

Val operator&&(const Val& a, const Val& b) {
  same_type(a, b, "&&");
  if (a.type() != Type::Bool) fail("'&&' needs bools");
  return Binary::make(BinaryOp::And, a.expr(), b.expr());
}
Val operator||(const Val& a, const Val& b) {
  same_type(a, b, "||");
  if (a.type() != Type::Bool) fail("'||' needs bools");
  return Binary::make(BinaryOp::Or, a.expr(), b.expr());
}
Val operator!(const Val& a) {
  if (need(a, "!").type() != Type::Bool) fail("'!' needs a bool");
  return Unary::make(UnaryOp::Not, a.expr());
}
Val operator&(const Val& a, const Val& b) {
  same_type(a, b, "&");
  if (!is_int(a.type())) fail("'&' needs ints");
  return Binary::make(BinaryOp::And, a.expr(), b.expr());
}
Val operator|(const Val& a, const Val& b) {
  same_type(a, b, "|");
  if (!is_int(a.type())) fail("'|' needs ints");
  return Binary::make(BinaryOp::Or, a.expr(), b.expr());
}
Val operator^(const Val& a, const Val& b) {
  same_type(a, b, "^");
  if (!is_int(a.type())) fail("'^' needs ints");
  return Binary::make(BinaryOp::Xor, a.expr(), b.expr());
}

Val ceildiv(const Val& a, const Val& b) {
  same_type(a, b, "ceildiv");
  if (!is_int(a.type())) fail("ceildiv needs ints");
  return compiler::ceildiv(a.expr(), b.expr());
}
Val min(const Val& a, const Val& b) { return arith(BinaryOp::Min, a, b); }
Val max(const Val& a, const Val& b) { return arith(BinaryOp::Max, a, b); }

Val select(const Val& cond, const Val& if_true, const Val& if_false) {
  if (need(cond, "select condition").type() != Type::Bool) fail("select condition is not bool");
  same_type(if_true, if_false, "select");
  return Select::make(cond.expr(), if_true.expr(), if_false.expr());
}

namespace {
Val shift(BinaryOp op, const Val& a, const Val& bits) {
  same_type(a, bits, binary_op_name(op));
  if (!is_int(a.type())) fail("shifts need ints");
  return Binary::make(op, a.expr(), bits.expr());
}
}  // namespace

Val shl(const Val& a, const Val& bits) { return shift(BinaryOp::Shl, a, bits); }
Val shr(const Val& a, const Val& bits) { return shift(BinaryOp::ShrA, a, bits); }
Val shr_logical(const Val& a, const Val& bits) { return shift(BinaryOp::ShrL, a, bits); }

Val fma(const Val& a, const Val& b, const Val& c) { return f32_call(CallOp::Fma, {a, b, c}); }
Val sqrt(const Val& a) { return f32_call(CallOp::Sqrt, {a}); }
Val rsqrt(const Val& a) { return f32_call(CallOp::Rsqrt, {a}); }
Val exp(const Val& a) { return f32_call(CallOp::Exp, {a}); }
Val sin(const Val& a) { return f32_call(CallOp::Sin, {a}); }
Val cos(const Val& a) { return f32_call(CallOp::Cos, {a}); }
Val erf(const Val& a) { return f32_call(CallOp::Erf, {a}); }
Val log(const Val& a) { return f32_call(CallOp::Log, {a}); }
Val tanh(const Val& a) { return f32_call(CallOp::Tanh, {a}); }
Val sigmoid(const Val& a) { return f32_call(CallOp::Sigmoid, {a}); }

Val abs(const Val& a) {
  need(a, "abs");
  if (a.type() == Type::F32) {
    // Clearing the sign bit is exact for every input, NaN included.
    Expr bits = Bitcast::make(Type::I32, a.expr());
    return Bitcast::make(Type::F32, Binary::make(BinaryOp::And, bits, make_i32(0x7fffffff)));
  }
  if (!is_int(a.type())) fail("abs of a bool");
  return select(a < like(a, 0), -a, a);
}

Val popcount(const Val& a) {
  need(a, "popcount");
  if (!is_int(a.type())) fail("popcount of a non-integer");
  // The SWAR count on the low 32 bits, widened to i64 so that no step can overflow.
  Val v = cast(Type::I64, a) & Val(int64_t{0xffffffff});
  v = v - (shr_logical(v, Val(int64_t{1})) & Val(int64_t{0x55555555}));
  v = (v & Val(int64_t{0x33333333})) + (shr_logical(v, Val(int64_t{2})) & Val(int64_t{0x33333333}));
  v = (v + shr_logical(v, Val(int64_t{4}))) & Val(int64_t{0x0f0f0f0f});
  return shr_logical(v * Val(int64_t{0x01010101}), Val(int64_t{24})) & Val(int64_t{0xff});
}

Val lane_mask_below(const Val& lane) {
  need(lane, "lane_mask_below");
  if (lane.type() != Type::I64) fail("lane_mask_below of a non-i64 lane");
  return shl(Val(int64_t{1}), lane) - Val(int64_t{1});
}

Val cast(Type t, const Val& a) {
  need(a, "cast");
  if (t == Type::Bool) fail("cast to bool: compare with zero instead");
  if (a.type() == t) return a;
  return Cast::make(t, a.expr());
}

Val bitcast(Type t, const Val& a) {
  need(a, "bitcast");
  if (type_bits(t) != type_bits(a.type()) || t == Type::Bool || a.type() == Type::Bool)
    fail(std::string("bitcast from ") + type_name(a.type()) + " to " + type_name(t));
  return Bitcast::make(t, a.expr());
}

// ---------------------------------------------------------------------------------------------

Ref::Ref(BuilderState* state, std::string buffer, std::vector<Expr> indices, Expr load)
    : Val(std::move(load)),
      state_(state),
      buffer_(std::move(buffer)),
      indices_(std::move(indices)) {}

Ref& Ref::operator=(const Val& v) {
  need(v, "a stored value");
  if (v.type() != type())
    fail("storing " + std::string(type_name(v.type())) + " into '" + buffer_ + "' of " +
         type_name(type()));
  state_->append(Store::make(buffer_, indices_, v.expr()));
  return *this;
}
Ref& Ref::operator=(const Ref& r) { return *this = static_cast<const Val&>(r); }
Ref& Ref::operator+=(const Val& v) { return *this = static_cast<const Val&>(*this) + v; }
Ref& Ref::operator-=(const Val& v) { return *this = static_cast<const Val&>(*this) - v; }
Ref& Ref::operator*=(const Val& v) { return *this = static_cast<const Val&>(*this) * v; }

Buf::Buf(BuilderState* state, std::string name, DType dtype, int rank)
    : state_(state), name_(std::move(name)), dtype_(dtype), rank_(rank) {}

Ref Buf::at(const std::vector<Val>& idx) const {
  TR_CHECK(state_ != nullptr, "using a default-constructed Buf");
  if (static_cast<int>(idx.size()) != rank_)
    fail("'" + name_ + "' has " + std::to_string(rank_) + " dims, indexed with " +
         std::to_string(idx.size()));
  std::vector<Expr> es = index_exprs(idx, name_);
  Expr load = Load::make(compute_type(dtype_), name_, es);
  return Ref(state_, name_, std::move(es), std::move(load));
}

BufRegion Buf::region(std::vector<Val> origin, std::vector<int64_t> extents) const {
  if (static_cast<int>(origin.size()) != rank_ || static_cast<int>(extents.size()) != rank_)
    fail("region of '" + name_ + "' needs " + std::to_string(rank_) + " origins and extents");
  return BufRegion{name_, std::move(origin), std::move(extents)};
}

Buf::operator BufRegion() const {
  TR_CHECK(state_ != nullptr, "using a default-constructed Buf");
  const TileAlloc* a = find_alloc(state_->kernel, name_);
  if (!a) fail("'" + name_ + "' is a global tensor: give a region(origin, extents)");
  return BufRegion{name_, std::vector<Val>(a->shape.size(), Val(0)), a->shape};
}

// ---------------------------------------------------------------------------------------------

int Scope::threads() const { return state_->kernel.sig.threads; }

Val Scope::block_idx(int axis) const {
  int n = static_cast<int>(state_->kernel.sig.grid.size());
  if (axis < 0 || axis >= n)
    fail("block_idx(" + std::to_string(axis) + ") of a " + std::to_string(n) + "-d grid");
  return Var::make(Type::I64, kBlockIdx[axis]);
}

namespace {
Buf alloc(BuilderState* st, const std::string& name, MemScope scope, DType dtype,
          std::vector<int64_t> shape, Layout layout = {}, Swizzle swizzle = {}) {
  st->declare(name, mem_scope_name(scope));
  if (!dtype_supported(dtype))
    fail("dtype " + std::string(dtype_name(dtype)) + " of '" + name + "' is not supported yet");
  if (shape.empty()) fail("'" + name + "' needs at least one dim");
  for (int64_t e : shape)
    if (e <= 0) fail("'" + name + "' has a non-positive extent");
  int rank = static_cast<int>(shape.size());
  st->kernel.allocs.push_back({name, scope, dtype, std::move(shape), std::move(layout), swizzle});
  return Buf(st, name, dtype, rank);
}

std::vector<Expr> extents_of(const std::vector<Val>& es) {
  std::vector<Expr> out;
  for (const Val& e : es) {
    if (need(e, "a loop extent").type() != Type::I64) fail("loop extents must be i64");
    out.push_back(e.expr());
  }
  return out;
}
}  // namespace

Buf Scope::alloc_shared(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  return alloc(state_, name, MemScope::Shared, dtype, std::move(shape));
}
Buf Scope::alloc_shared(const std::string& name, DType dtype, std::vector<int64_t> shape,
                        Layout layout) {
  return alloc(state_, name, MemScope::Shared, dtype, std::move(shape), std::move(layout));
}
Buf Scope::alloc_shared(const std::string& name, DType dtype, std::vector<int64_t> shape,
                        Swizzle swizzle) {
  Layout rows = compact_row_major(shape);
  return alloc(state_, name, MemScope::Shared, dtype, std::move(shape), std::move(rows), swizzle);
}
Buf Scope::alloc_fragment(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  return alloc(state_, name, MemScope::Fragment, dtype, std::move(shape));
}

void Scope::parallel(const Val& extent, const std::function<void(Idx)>& body) {
  std::vector<Expr> ext = extents_of({extent});
  std::string i = state_->fresh("i");
  state_->push();
  body(Var::make(Type::I64, i));
  state_->append(Parallel::make({i}, ext, state_->pop(), state_->take_layout()));
}

void Scope::parallel(const Val& e0, const Val& e1, const std::function<void(Idx, Idx)>& body) {
  std::vector<Expr> ext = extents_of({e0, e1});
  std::string i = state_->fresh("i"), j = state_->fresh("j");
  state_->push();
  body(Var::make(Type::I64, i), Var::make(Type::I64, j));
  state_->append(Parallel::make({i, j}, ext, state_->pop(), state_->take_layout()));
}

void Scope::parallel(const Val& e0, const Val& e1, const Val& e2,
                     const std::function<void(Idx, Idx, Idx)>& body) {
  std::vector<Expr> ext = extents_of({e0, e1, e2});
  std::string i = state_->fresh("i"), j = state_->fresh("j"), l = state_->fresh("l");
  state_->push();
  body(Var::make(Type::I64, i), Var::make(Type::I64, j), Var::make(Type::I64, l));
  state_->append(Parallel::make({i, j, l}, ext, state_->pop(), state_->take_layout()));
}

void Scope::serial(const Val& extent, const std::function<void(Idx)>& body) {
  std::vector<Expr> ext = extents_of({extent});
  std::string k = state_->fresh("k");
  state_->push();
  body(Var::make(Type::I64, k));
  state_->append(For::make(k, make_i64(0), ext[0], state_->pop()));
}

Val Scope::reduce(ReduceOp op, const Val& extent, const std::function<Val(Idx)>& value) {
  Expr ext = extents_of({extent})[0];
  std::string r = state_->fresh("r");
  Val v = value(Var::make(Type::I64, r));
  need(v, "a reduced value");
  if (v.type() == Type::Bool) fail("reducing bools");
  std::string name = state_->fresh(reduce_op_name(op));
  Expr ve = v.expr();
  state_->bind([=](Stmt body) { return Reduce::make(name, op, r, ext, ve, body); });
  return Var::make(v.type(), name);
}

void Scope::if_then(const Val& cond, const std::function<void()>& then_body) {
  if (need(cond, "a condition").type() != Type::Bool) fail("if condition is not bool");
  state_->push();
  then_body();
  state_->append(IfThenElse::make(cond.expr(), state_->pop()));
}

void Scope::if_then_else(const Val& cond, const std::function<void()>& then_body,
                         const std::function<void()>& else_body) {
  if (need(cond, "a condition").type() != Type::Bool) fail("if condition is not bool");
  state_->push();
  then_body();
  Stmt t = state_->pop();
  state_->push();
  else_body();
  state_->append(IfThenElse::make(cond.expr(), t, state_->pop()));
}

Val Scope::let(const Val& value, const std::string& hint) {
  Expr v = need(value, "a let value");
  std::string name = state_->fresh(hint);
  state_->bind([=](Stmt body) { return LetStmt::make(name, v, body); });
  return Var::make(v.type(), name);
}

void Scope::copy(const BufRegion& dst, const BufRegion& src) {
  if (dst.extents != src.extents)
    fail("copy from '" + src.buffer + "' to '" + dst.buffer + "': extents differ");
  auto region = [](const BufRegion& r) {
    return Region{r.buffer, index_exprs(r.origin, r.buffer), r.extents};
  };
  state_->append(Copy::make(region(dst), region(src)));
}

void Scope::copy_async(const BufRegion& dst, const BufRegion& src) {
  const BufRegion& d = dst;
  if (!copy_extents_match(d.extents, src.extents, /*async=*/true))
    fail("copy_async from '" + src.buffer + "' to '" + d.buffer + "': extents differ");
  auto region = [](const BufRegion& r) {
    return Region{r.buffer, index_exprs(r.origin, r.buffer), r.extents};
  };
  state_->append(Copy::make(region(d), region(src), /*async=*/true));
}

void Scope::copy_async_piece(const Buf& dst, const std::vector<Val>& dst_idx, const Buf& src,
                             const std::vector<Val>& src_idx) {
  const std::string what = "copy_async_piece from '" + src.name() + "' to '" + dst.name() + "'";
  const BufferParam* g = find_buffer(state_->kernel.sig, src.name());
  if (!g || g->is_output) fail(what + ": the source must be a global input");
  if (static_cast<int>(dst_idx.size()) != dst.rank() ||
      static_cast<int>(src_idx.size()) != src.rank())
    fail(what + ": wrong number of indices");
  std::vector<Expr> di = index_exprs(dst_idx, dst.name()), si = index_exprs(src_idx, src.name());
  const int lanes = static_cast<int>(16 / dtype_bytes(g->dtype, 1));
  // Inside or not, piece by piece: the verifier makes a piece all in or all out.
  Expr inside = make_bool(true);
  for (size_t d = 0; d < si.size(); ++d) {
    inside = logical_and(inside, Binary::make(BinaryOp::Le, make_i64(0), si[d]));
    inside = logical_and(inside, lt(si[d], g->shape[d]));
  }
  Expr valid = Select::make(inside, make_i64(lanes), make_i64(0));
  state_->append(AsyncCopy::make(dst.name(), std::move(di), src.name(), std::move(si), lanes,
                                 std::move(valid)));
}

void Scope::copy_tma(const BufRegion& dst, const BufRegion& src, const Buf& barrier,
                     const Val& index) {
  const std::string what = "copy_tma from '" + src.buffer + "' to '" + dst.buffer + "'";
  // The box lands row-major: its extents of 1 anywhere (a matrix of a tensor whose batch axis
  // lies between the matrix's) place nothing, so they are left out of the match.
  auto placed = [](std::vector<int64_t> e) {
    std::erase(e, int64_t{1});
    return e;
  };
  if (placed(dst.extents) != placed(src.extents)) fail(what + ": extents differ");
  if (src.extents.size() > TmaCopy::kMaxRank)
    fail(what + ": a box of rank " + std::to_string(src.extents.size()) + " (at most 5)");
  for (int64_t e : src.extents)
    if (e < 1 || e > TmaCopy::kMaxBox) fail(what + ": box extents are 1 to 256");
  state_->append(TmaCopy::make(dst.buffer, index_exprs(dst.origin, dst.buffer), src.buffer,
                               index_exprs(src.origin, src.buffer), src.extents, barrier.name(),
                               index_exprs({index}, barrier.name())[0]));
}

void Scope::mbarrier_init(const Buf& barrier, int count) {
  if (count < 1) fail("mbarrier_init '" + barrier.name() + "': at least one arrival a phase");
  state_->append(MbarrierInit::make(barrier.name(), count));
}

void Scope::mbarrier_inval(const Buf& barrier) {
  state_->append(MbarrierInit::make(barrier.name(), 0, /*invalidate=*/true));
}

void Scope::mbarrier_wait(const Buf& barrier, const Val& index, const Val& parity) {
  state_->append(MbarrierWait::make(barrier.name(), index_exprs({index}, barrier.name())[0],
                                    index_exprs({parity}, barrier.name() + "'s parity")[0]));
}

void Scope::async_commit() { state_->append(AsyncCommit::make()); }

void Scope::gemm_wait(int pending) {
  if (pending < 0 || pending > GemmWait::kMaxPending)
    fail("gemm_wait pending count " + std::to_string(pending) + " is outside 0.." +
         std::to_string(GemmWait::kMaxPending));
  state_->append(GemmWait::make(pending));
}

void Scope::async_wait(int pending) {
  if (pending < 0 || pending > AsyncWait::kMaxPending)
    fail("async_wait pending count " + std::to_string(pending) + " is outside 0.." +
         std::to_string(AsyncWait::kMaxPending));
  state_->append(AsyncWait::make(pending));
}

void Scope::barrier() { state_->append(Barrier::make()); }

void Scope::shuffle_xor(const Buf& dst, const Buf& src, int lane_xor) {
  state_->append(WarpShuffle::make(dst.name(), src.name(), lane_xor));
}

void Scope::ballot(const Buf& dst, const Buf& src) {
  state_->append(WarpBallot::make(dst.name(), src.name()));
}

void Scope::gemm(const Buf& acc, const Buf& a, const Buf& b, bool trans_a, bool trans_b,
                 int pending) {
  gemm_at(Val(), acc, a, b, trans_a, trans_b, pending);
}

void Scope::gemm_at(const Val& stage, const Buf& acc, const Buf& a, const Buf& b, bool trans_a,
                    bool trans_b, int pending) {
  staged_gemm(stage, true, true, acc, a, b, trans_a, trans_b, pending);
}

void Scope::gemm_at_a(const Val& stage, const Buf& acc, const Buf& a, const Buf& b, bool trans_a,
                      bool trans_b, int pending) {
  staged_gemm(stage, true, false, acc, a, b, trans_a, trans_b, pending);
}

void Scope::gemm_at_b(const Val& stage, const Buf& acc, const Buf& a, const Buf& b, bool trans_a,
                      bool trans_b, int pending) {
  staged_gemm(stage, false, true, acc, a, b, trans_a, trans_b, pending);
}

void Scope::staged_gemm(const Val& stage, bool stage_a, bool stage_b, const Buf& acc, const Buf& a,
                        const Buf& b, bool trans_a, bool trans_b, int pending) {
  const bool staged = stage.defined();
  // A stack's tile shape: its shape past the stage axis.
  auto shape = [&](const Buf& x, bool stack) -> std::vector<int64_t> {
    for (const TileAlloc& t : state_->kernel.allocs) {
      if (t.name != x.name()) continue;
      if (!stack) return t.shape;
      if (t.shape.size() < 2) fail("gemm operand '" + x.name() + "' is not a stack of tiles");
      return std::vector<int64_t>(t.shape.begin() + 1, t.shape.end());
    }
    fail("gemm operand '" + x.name() + "' is not a tile of this kernel");
  };
  const std::vector<int64_t> sa = shape(a, staged && stage_a), sb = shape(b, staged && stage_b),
                             sc = shape(acc, false);
  const bool panels = trans_a && sa.size() == 3;     // a as m's 64-wide panels [m / 64, k, 64]
  const bool b_panels = !trans_b && sb.size() == 3;  // b as n's panels [n / 64, k, 64]
  if ((sa.size() != 2 && !panels) || (sb.size() != 2 && !b_panels) || sc.size() != 2)
    fail(
        "gemm operands are 2-d tiles (a transposed a may be [m / 64, k, 64] panels, an "
        "N-major b [n / 64, k, 64])");
  const int64_t k = panels ? sa[1] : trans_a ? sa[0] : sa[1];
  if (pending < 0 || pending > Gemm::kMaxPending)
    fail("gemm pending count " + std::to_string(pending) + " is outside 0.." +
         std::to_string(Gemm::kMaxPending));
  state_->append(Gemm::make(acc.name(), a.name(), b.name(), trans_a, trans_b, sc[0], sc[1], k,
                            pending, staged ? stage.expr() : Expr(), stage_a, stage_b));
}

// ---------------------------------------------------------------------------------------------

KernelBuilder::KernelBuilder(std::string name) : state_(std::make_unique<BuilderState>()) {
  state_->kernel.sig.name = std::move(name);
}
KernelBuilder::~KernelBuilder() = default;

Dim KernelBuilder::dim(const std::string& name, DimBounds bounds) {
  state_->declare(name, "dim");
  if (bounds.min < 0 || bounds.max < bounds.min || bounds.divisible_by < 1)
    throw Error("kernel '" + state_->kernel.sig.name + "': dim '" + name +
                "' has empty or bad bounds");
  state_->kernel.sig.dims.push_back({name, bounds});
  return Dim(Var::make(Type::I64, name), name);
}

namespace {
Buf add_buffer(BuilderState* st, const std::string& name, DType dtype,
               const std::vector<Val>& shape, bool is_output) {
  st->declare(name, is_output ? "output" : "input");
  if (!dtype_supported(dtype))
    throw Error("kernel '" + st->kernel.sig.name + "': dtype " + std::string(dtype_name(dtype)) +
                " of '" + name + "' is not supported by the compiler yet");
  std::vector<Expr> dims;
  for (const Val& v : shape) {
    if (need(v, "a shape extent").type() != Type::I64) fail("shape of '" + name + "' must be i64");
    dims.push_back(v.expr());
  }
  st->kernel.sig.buffers.push_back({name, dtype, dims, is_output});
  return Buf(st, name, dtype, static_cast<int>(shape.size()));
}
}  // namespace

Buf KernelBuilder::input(const std::string& name, DType dtype, const std::vector<Val>& shape) {
  return add_buffer(state_.get(), name, dtype, shape, false);
}
Buf KernelBuilder::index_input(const std::string& name, const std::vector<Val>& shape,
                               const Val& below) {
  Buf b = add_buffer(state_.get(), name, DType::I32, shape, false);
  if (need(below, "an index bound").type() != Type::I64)
    fail("the index bound of '" + name + "' must be i64");
  state_->kernel.sig.buffers.back().values_below = below.expr();
  return b;
}
Buf KernelBuilder::permutation_input(const std::string& name, const std::vector<Val>& shape,
                                     const Val& below) {
  Buf b = index_input(name, shape, below);
  state_->kernel.sig.buffers.back().values_distinct = true;
  return b;
}

Buf KernelBuilder::sorted_input(const std::string& name, const Val& length, const Val& below) {
  Buf b = index_input(name, {length}, below);
  state_->kernel.sig.buffers.back().values_sorted = true;
  return b;
}

Buf KernelBuilder::output(const std::string& name, DType dtype, const std::vector<Val>& shape) {
  return add_buffer(state_.get(), name, dtype, shape, true);
}

Val KernelBuilder::scalar(const std::string& name, Type type) {
  state_->declare(name, "scalar");
  if (type != Type::F32 && type != Type::I32 && type != Type::I64)
    throw Error("kernel '" + state_->kernel.sig.name + "': scalar '" + name +
                "' must be f32, i32 or i64");
  state_->kernel.sig.scalars.push_back({name, type});
  return Var::make(type, name);
}

void KernelBuilder::body(const std::vector<Val>& grid, int threads,
                         const std::function<void(Scope&)>& fn) {
  BuilderState& st = *state_;
  const std::string& kname = st.kernel.sig.name;
  if (st.has_body) throw Error("kernel '" + kname + "': body() called twice");
  st.has_body = true;
  try {
    for (const Val& g : grid) {
      if (need(g, "a grid extent").type() != Type::I64) fail("grid extents must be i64");
      st.kernel.sig.grid.push_back(g.expr());
    }
    st.kernel.sig.threads = threads;
    Scope scope(&st);
    st.push();
    fn(scope);
    TR_CHECK(st.frames.size() == 1, "unbalanced builder frames");
    st.kernel.body = st.pop();
  } catch (const Error& e) {
    if (e.message().rfind("kernel '", 0) == 0) throw;
    throw Error("kernel '" + kname + "': " + e.message());
  }
}

void Scope::annotate_layout(int width) {
  if (width < 1 || width > 16 || (width & (width - 1)) != 0)
    throw Error("kernel '" + state_->kernel.sig.name + "': annotate_layout width " +
                std::to_string(width) + " (expected 1, 2, 4, 8 or 16)");
  state_->pending_width = width;
}

Kernel KernelBuilder::build() {
  if (!state_->has_body) throw Error("kernel '" + state_->kernel.sig.name + "': no body()");
  if (state_->pending_width)
    throw Error("kernel '" + state_->kernel.sig.name +
                "': annotate_layout is not followed by a parallel");
  verify_tile(state_->kernel);
  return state_->kernel;
}

}  // namespace tilerun::compiler
