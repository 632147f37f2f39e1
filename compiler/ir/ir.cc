#include "compiler/ir/ir.h"

#include <algorithm>

#include "compiler/base/check.h"

namespace tilerun::compiler {

const char* type_name(Type t) {
  switch (t) {
    case Type::Bool:
      return "bool";
    case Type::I8:
      return "i8";
    case Type::I16:
      return "i16";
    case Type::I32:
      return "i32";
    case Type::I64:
      return "i64";
    case Type::F32:
      return "f32";
  }
  return "?";
}

bool is_int(Type t) { return t == Type::I8 || t == Type::I16 || t == Type::I32 || t == Type::I64; }
bool is_float(Type t) { return t == Type::F32; }

int type_bits(Type t) {
  switch (t) {
    case Type::Bool:
      return 1;
    case Type::I8:
      return 8;
    case Type::I16:
      return 16;
    case Type::I32:
      return 32;
    case Type::I64:
      return 64;
    case Type::F32:
      return 32;
  }
  return 0;
}

bool dtype_supported(DType d) {
  switch (d) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
    case DType::I32:
    case DType::I64:
    case DType::U8:
    case DType::Bool:
    case DType::F8E4M3:
    case DType::F8E5M2:
    case DType::E8M0:
      return true;
    default:
      return false;
  }
}

Type compute_type(DType d) {
  switch (d) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
    case DType::F8E4M3:
    case DType::F8E5M2:
    case DType::E8M0:
      return Type::F32;
    case DType::I32:
    case DType::U8:
    case DType::Bool:
      return Type::I32;
    case DType::I64:
      return Type::I64;
    default:
      TR_CHECK(false, "dtype without a compute type");
  }
}

Type storage_type(DType d) {
  switch (d) {
    case DType::F32:
      return Type::F32;
    case DType::BF16:
    case DType::F16:
      return Type::I16;
    case DType::I32:
      return Type::I32;
    case DType::U8:
    case DType::Bool:
    case DType::F8E4M3:
    case DType::F8E5M2:
    case DType::E8M0:
      return Type::I8;
    case DType::I64:
      return Type::I64;
    default:
      TR_CHECK(false, "dtype without a storage type");
  }
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "+";
    case BinaryOp::Sub:
      return "-";
    case BinaryOp::Mul:
      return "*";
    case BinaryOp::Div:
      return "/";
    case BinaryOp::Mod:
      return "%";
    case BinaryOp::Min:
      return "min";
    case BinaryOp::Max:
      return "max";
    case BinaryOp::And:
      return "&";
    case BinaryOp::Or:
      return "|";
    case BinaryOp::Xor:
      return "^";
    case BinaryOp::Shl:
      return "<<";
    case BinaryOp::ShrL:
      return ">>>";
    case BinaryOp::ShrA:
      return ">>";
    case BinaryOp::Eq:
      return "==";
    case BinaryOp::Ne:
      return "!=";
    case BinaryOp::Lt:
      return "<";
    case BinaryOp::Le:
      return "<=";
    case BinaryOp::Gt:
      return ">";
    case BinaryOp::Ge:
      return ">=";
    case BinaryOp::LtU:
      return "<u";
  }
  return "?";
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge || op == BinaryOp::LtU;
}

const char* unary_op_name(UnaryOp op) { return op == UnaryOp::Neg ? "-" : "!"; }

const char* call_op_name(CallOp op) {
  switch (op) {
    case CallOp::Fma:
      return "fma";
    case CallOp::Sqrt:
      return "sqrt";
    case CallOp::Exp:
      return "exp";
    case CallOp::Log:
      return "log";
    case CallOp::Tanh:
      return "tanh";
    case CallOp::Sigmoid:
      return "sigmoid";
    case CallOp::Rsqrt:
      return "rsqrt";
    case CallOp::Sin:
      return "sin";
    case CallOp::Cos:
      return "cos";
    case CallOp::Erf:
      return "erf";
    case CallOp::Bf16Bits:
      return "bf16_bits";
  }
  return "?";
}

int call_op_arity(CallOp op) { return op == CallOp::Fma ? 3 : 1; }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

namespace {
// Two's-complement wrap of v to the type's width, so equal constants print equally.
int64_t wrap(Type t, int64_t v) {
  switch (t) {
    case Type::Bool:
      return v != 0;
    case Type::I8:
      return static_cast<int8_t>(v);
    case Type::I16:
      return static_cast<int16_t>(v);
    case Type::I32:
      return static_cast<int32_t>(v);
    default:
      return v;
  }
}
}  // namespace

Expr IntImm::make(Type t, int64_t value) {
  TR_CHECK(is_int(t) || t == Type::Bool, "IntImm of a float type");
  return Expr(std::make_shared<IntImm>(t, wrap(t, value)));
}

Expr FloatImm::make(float value) { return Expr(std::make_shared<FloatImm>(value)); }

Expr Var::make(Type t, const std::string& name) {
  TR_CHECK(!name.empty(), "Var without a name");
  return Expr(std::make_shared<Var>(t, name));
}

Expr Binary::make(BinaryOp op, Expr a, Expr b) {
  TR_CHECK(a.defined() && b.defined(), "Binary operand undefined");
  TR_CHECK(a.type() == b.type(), std::string("Binary ") + binary_op_name(op) + " of " +
                                     type_name(a.type()) + " and " + type_name(b.type()));
  Type t = a.type();
  switch (op) {
    case BinaryOp::Mod:
    case BinaryOp::Shl:
    case BinaryOp::ShrL:
    case BinaryOp::ShrA:
    case BinaryOp::LtU:
      TR_CHECK(is_int(t), std::string(binary_op_name(op)) + " needs ints");
      break;
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
      TR_CHECK(is_int(t) || t == Type::Bool, "bitwise op needs ints or bools");
      break;
    case BinaryOp::Eq:
    case BinaryOp::Ne:
      break;
    default:
      TR_CHECK(t != Type::Bool, std::string(binary_op_name(op)) + " of bools");
  }
  Type result = is_comparison(op) ? Type::Bool : t;
  return Expr(std::make_shared<Binary>(result, op, std::move(a), std::move(b)));
}

Expr Unary::make(UnaryOp op, Expr a) {
  TR_CHECK(a.defined(), "Unary operand undefined");
  if (op == UnaryOp::Neg) TR_CHECK(a.type() != Type::Bool, "negating a bool");
  if (op == UnaryOp::Not) TR_CHECK(!is_float(a.type()), "! of a float");
  Type t = a.type();
  return Expr(std::make_shared<Unary>(t, op, std::move(a)));
}

Expr Select::make(Expr cond, Expr t, Expr f) {
  TR_CHECK(cond.defined() && t.defined() && f.defined(), "Select operand undefined");
  TR_CHECK(cond.type() == Type::Bool, "Select condition is not bool");
  TR_CHECK(t.type() == f.type(), "Select arms differ in type");
  Type ty = t.type();
  return Expr(std::make_shared<Select>(ty, std::move(cond), std::move(t), std::move(f)));
}

Expr Cast::make(Type t, Expr value) {
  TR_CHECK(value.defined(), "Cast of undefined");
  TR_CHECK(t != Type::Bool, "Cast to bool: compare instead");
  return Expr(std::make_shared<Cast>(t, std::move(value)));
}

Expr Bitcast::make(Type t, Expr value) {
  TR_CHECK(value.defined(), "Bitcast of undefined");
  TR_CHECK(type_bits(t) == type_bits(value.type()) && t != Type::Bool, "Bitcast between widths");
  return Expr(std::make_shared<Bitcast>(t, std::move(value)));
}

Expr Call::make(CallOp op, std::vector<Expr> args) {
  TR_CHECK(static_cast<int>(args.size()) == call_op_arity(op), "Call arity");
  for (const Expr& a : args) TR_CHECK(a.defined() && a.type() == Type::F32, "Call on non-f32");
  const Type result = op == CallOp::Bf16Bits ? Type::I16 : Type::F32;
  return Expr(std::make_shared<Call>(result, op, std::move(args)));
}

Expr Let::make(const std::string& name, Expr value, Expr body) {
  TR_CHECK(value.defined() && body.defined(), "Let undefined");
  Type t = body.type();
  return Expr(std::make_shared<Let>(t, name, std::move(value), std::move(body)));
}

Expr Load::make(Type t, const std::string& buffer, std::vector<Expr> indices) {
  for (const Expr& i : indices)
    TR_CHECK(i.defined() && i.type() == Type::I64, "Load index not i64");
  return Expr(std::make_shared<Load>(t, buffer, std::move(indices)));
}

Stmt Seq::make(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (Stmt& s : stmts) {
    TR_CHECK(s.defined(), "undefined statement in Seq");
    if (const Seq* inner = s.as<Seq>()) {
      flat.insert(flat.end(), inner->stmts.begin(), inner->stmts.end());
    } else {
      flat.push_back(std::move(s));
    }
  }
  if (flat.size() == 1) return flat[0];
  return Stmt(std::make_shared<Seq>(std::move(flat)));
}

Stmt LetStmt::make(const std::string& name, Expr value, Stmt body) {
  TR_CHECK(value.defined() && body.defined(), "LetStmt undefined");
  return Stmt(std::make_shared<LetStmt>(name, std::move(value), std::move(body)));
}

Stmt For::make(const std::string& var, Expr min, Expr extent, Stmt body, bool vectorized) {
  TR_CHECK(min.defined() && extent.defined() && body.defined(), "For undefined");
  TR_CHECK(min.type() == Type::I64 && extent.type() == Type::I64, "For bounds not i64");
  int64_t lanes;
  TR_CHECK(!vectorized || (const_int(extent, &lanes) && lanes >= 1), "vectorized For extent");
  return Stmt(
      std::make_shared<For>(var, std::move(min), std::move(extent), std::move(body), vectorized));
}

Stmt Parallel::make(std::vector<std::string> vars, std::vector<Expr> extents, Stmt body,
                    ParallelLayout layout) {
  TR_CHECK(!vars.empty() && vars.size() == extents.size(), "Parallel vars/extents");
  for (const Expr& e : extents) TR_CHECK(e.defined() && e.type() == Type::I64, "Parallel extent");
  TR_CHECK(body.defined(), "Parallel body undefined");
  TR_CHECK(layout.width >= 0 && (layout.width & (layout.width - 1)) == 0 && layout.width <= 16,
           "Parallel width must be 0 (undecided) or a power of two <= 16");
  return Stmt(
      std::make_shared<Parallel>(std::move(vars), std::move(extents), std::move(body), layout));
}

Stmt WarpBallot::make(const std::string& dst, const std::string& src) {
  TR_CHECK(dst != src, "WarpBallot dst and src must differ");
  return Stmt(std::make_shared<WarpBallot>(dst, src));
}

Stmt WarpShuffle::make(const std::string& dst, const std::string& src, int lane_xor) {
  TR_CHECK(dst != src, "WarpShuffle dst and src must differ");
  TR_CHECK(lane_xor > 0 && lane_xor < 32, "WarpShuffle lane_xor");
  return Stmt(std::make_shared<WarpShuffle>(dst, src, lane_xor));
}

Stmt Gemm::make(const std::string& c, const std::string& a, const std::string& b, bool trans_a,
                bool trans_b, int64_t m, int64_t n, int64_t k, int pending, Expr stage,
                bool stage_a, bool stage_b) {
  TR_CHECK(!c.empty() && !a.empty() && !b.empty(), "Gemm operand names");
  TR_CHECK(m > 0 && n > 0 && k > 0, "Gemm tile extents");
  TR_CHECK(pending >= 0 && pending <= Gemm::kMaxPending, "Gemm pending count");
  TR_CHECK(!stage.defined() || is_int(stage.type()), "Gemm stage is an integer");
  TR_CHECK(stage_a || stage_b, "a staged Gemm stages an operand");
  return Stmt(std::make_shared<Gemm>(c, a, b, trans_a, trans_b, m, n, k, pending, std::move(stage),
                                     stage_a, stage_b));
}

Stmt VectorMove::make(const std::string& dst, Expr dst_index, const std::string& src,
                      Expr src_index, int lanes) {
  TR_CHECK(dst_index.defined() && dst_index.type() == Type::I64, "VectorMove dst index");
  TR_CHECK(src_index.defined() && src_index.type() == Type::I64, "VectorMove src index");
  TR_CHECK(lanes >= 2 && lanes <= 16 && (lanes & (lanes - 1)) == 0, "VectorMove lanes");
  return Stmt(
      std::make_shared<VectorMove>(dst, std::move(dst_index), src, std::move(src_index), lanes));
}

Stmt Reduce::make(const std::string& name, ReduceOp op, const std::string& var, Expr extent,
                  Expr value, Stmt body) {
  TR_CHECK(extent.defined() && extent.type() == Type::I64, "Reduce extent");
  TR_CHECK(value.defined() && body.defined(), "Reduce undefined");
  return Stmt(std::make_shared<Reduce>(name, op, var, std::move(extent), std::move(value),
                                       std::move(body)));
}

Stmt IfThenElse::make(Expr cond, Stmt then_case, Stmt else_case) {
  TR_CHECK(cond.defined() && cond.type() == Type::Bool, "If condition not bool");
  TR_CHECK(then_case.defined(), "If without then");
  return Stmt(
      std::make_shared<IfThenElse>(std::move(cond), std::move(then_case), std::move(else_case)));
}

Stmt Store::make(const std::string& buffer, std::vector<Expr> indices, Expr value) {
  for (const Expr& i : indices) TR_CHECK(i.defined() && i.type() == Type::I64, "Store index");
  TR_CHECK(value.defined(), "Store value undefined");
  return Stmt(std::make_shared<Store>(buffer, std::move(indices), std::move(value)));
}

Stmt Assign::make(const std::string& name, Expr value) {
  TR_CHECK(value.defined(), "Assign value undefined");
  return Stmt(std::make_shared<Assign>(name, std::move(value)));
}

bool copy_extents_match(const std::vector<int64_t>& dst, const std::vector<int64_t>& src,
                        bool async) {
  if (!async || dst.size() == src.size()) return dst == src;
  const std::vector<int64_t>&hi = dst.size() > src.size() ? dst : src,
        &lo = dst.size() > src.size() ? src : dst;
  const size_t extra = hi.size() - lo.size();
  for (size_t i = 0; i < extra; ++i)
    if (hi[i] != 1) return false;
  return std::equal(lo.begin(), lo.end(), hi.begin() + static_cast<std::ptrdiff_t>(extra));
}

Stmt Copy::make(Region dst, Region src, bool async) {
  TR_CHECK(copy_extents_match(dst.extents, src.extents, async), "Copy extents differ");
  TR_CHECK(dst.origin.size() == dst.extents.size() && src.origin.size() == src.extents.size(),
           "Copy region rank");
  return Stmt(std::make_shared<Copy>(std::move(dst), std::move(src), async));
}

Stmt AsyncCopy::make(const std::string& dst, std::vector<Expr> dst_indices, const std::string& src,
                     std::vector<Expr> src_indices, int lanes, Expr valid) {
  for (const std::vector<Expr>* v : {&dst_indices, &src_indices})
    for (const Expr& i : *v) TR_CHECK(i.defined() && i.type() == Type::I64, "AsyncCopy index");
  TR_CHECK(!dst_indices.empty() && !src_indices.empty(), "AsyncCopy without indices");
  TR_CHECK(lanes >= 2 && lanes <= 16 && (lanes & (lanes - 1)) == 0, "AsyncCopy lanes");
  TR_CHECK(valid.defined() && valid.type() == Type::I64, "AsyncCopy valid count");
  return Stmt(std::make_shared<AsyncCopy>(dst, std::move(dst_indices), src, std::move(src_indices),
                                          lanes, std::move(valid)));
}

Stmt AsyncCommit::make() { return Stmt(std::make_shared<AsyncCommit>()); }

Stmt GemmWait::make(int pending) {
  TR_CHECK(pending >= 0 && pending <= GemmWait::kMaxPending, "GemmWait pending count");
  return Stmt(std::make_shared<GemmWait>(pending));
}

Stmt AsyncWait::make(int pending) {
  TR_CHECK(pending >= 0 && pending <= AsyncWait::kMaxPending, "AsyncWait pending count");
  return Stmt(std::make_shared<AsyncWait>(pending));
}

Stmt TmaCopy::make(const std::string& dst, std::vector<Expr> dst_indices, const std::string& src,
                   std::vector<Expr> src_indices, std::vector<int64_t> box,
                   const std::string& barrier, Expr barrier_index) {
  for (const std::vector<Expr>* v : {&dst_indices, &src_indices})
    for (const Expr& i : *v) TR_CHECK(i.defined() && i.type() == Type::I64, "TmaCopy index");
  TR_CHECK(!dst_indices.empty() && src_indices.size() == box.size() && !box.empty() &&
               box.size() <= TmaCopy::kMaxRank,
           "TmaCopy ranks");
  for (int64_t e : box) TR_CHECK(e >= 1 && e <= TmaCopy::kMaxBox, "TmaCopy box extent");
  TR_CHECK(barrier_index.defined() && barrier_index.type() == Type::I64, "TmaCopy barrier index");
  return Stmt(std::make_shared<TmaCopy>(dst, std::move(dst_indices), src, std::move(src_indices),
                                        std::move(box), barrier, std::move(barrier_index)));
}

Stmt MbarrierInit::make(const std::string& barrier, int count, bool invalidate) {
  TR_CHECK(invalidate ? count == 0 : count >= 1, "MbarrierInit count");
  return Stmt(std::make_shared<MbarrierInit>(barrier, count, invalidate));
}

Stmt MbarrierWait::make(const std::string& barrier, Expr index, Expr parity) {
  TR_CHECK(index.defined() && index.type() == Type::I64, "MbarrierWait index");
  TR_CHECK(parity.defined() && parity.type() == Type::I64, "MbarrierWait parity");
  return Stmt(std::make_shared<MbarrierWait>(barrier, std::move(index), std::move(parity)));
}

Stmt Barrier::make() { return Stmt(std::make_shared<Barrier>()); }

Expr make_const(Type t, int64_t value) { return IntImm::make(t, value); }
Expr make_f32(float value) { return FloatImm::make(value); }
Expr make_bool(bool value) { return IntImm::make(Type::Bool, value ? 1 : 0); }

bool const_int(const Expr& e, int64_t* value) {
  if (const IntImm* imm = e.as<IntImm>()) {
    *value = imm->value;
    return true;
  }
  return false;
}

namespace {
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
}  // namespace

Expr add(Expr a, Expr b) {
  int64_t x, y;
  bool ca = const_int(a, &x), cb = const_int(b, &y);
  if (ca && cb) return make_const(a.type(), x + y);
  if (ca && x == 0) return b;
  if (cb && y == 0) return a;
  return Binary::make(BinaryOp::Add, std::move(a), std::move(b));
}

Expr sub(Expr a, Expr b) {
  int64_t x, y;
  bool ca = const_int(a, &x), cb = const_int(b, &y);
  if (ca && cb) return make_const(a.type(), x - y);
  if (cb && y == 0) return a;
  return Binary::make(BinaryOp::Sub, std::move(a), std::move(b));
}

Expr mul(Expr a, Expr b) {
  int64_t x, y;
  bool ca = const_int(a, &x), cb = const_int(b, &y);
  if (ca && cb) return make_const(a.type(), x * y);
  if ((ca && x == 0) || (cb && y == 0)) return make_const(a.type(), 0);
  if (ca && x == 1) return b;
  if (cb && y == 1) return a;
  return Binary::make(BinaryOp::Mul, std::move(a), std::move(b));
}

Expr floordiv(Expr a, Expr b) {
  int64_t x, y;
  bool ca = const_int(a, &x), cb = const_int(b, &y);
  if (ca && cb && y != 0) return make_const(a.type(), floor_div(x, y));
  if (cb && y == 1) return a;
  return Binary::make(BinaryOp::Div, std::move(a), std::move(b));
}

Expr floormod(Expr a, Expr b) {
  int64_t x, y;
  bool ca = const_int(a, &x), cb = const_int(b, &y);
  if (ca && cb && y != 0) return make_const(a.type(), x - floor_div(x, y) * y);
  if (cb && y == 1) return make_const(a.type(), 0);
  return Binary::make(BinaryOp::Mod, std::move(a), std::move(b));
}

Expr ceildiv(Expr a, Expr b) {
  Expr bm1 = sub(b, make_const(b.type(), 1));
  return floordiv(add(std::move(a), std::move(bm1)), std::move(b));
}

Expr lt(Expr a, Expr b) {
  int64_t x, y;
  if (const_int(a, &x) && const_int(b, &y)) return make_bool(x < y);
  return Binary::make(BinaryOp::Lt, std::move(a), std::move(b));
}

Expr logical_and(Expr a, Expr b) {
  int64_t x;
  if (const_int(a, &x)) return x ? b : a;
  if (const_int(b, &x)) return x ? a : b;
  return Binary::make(BinaryOp::And, std::move(a), std::move(b));
}

}  // namespace tilerun::compiler
