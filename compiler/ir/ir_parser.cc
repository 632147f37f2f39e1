// over 600 lines: one recursive-descent parser over the printer's one grammar (ir_printer.cc);
// its methods share the token stream and the scopes, so splitting it would split one class.
#include "compiler/ir/ir_parser.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <map>
#include <type_traits>

#include "compiler/ir/ir_equal.h"
#include "compiler/ir/ir_lexer.h"

namespace tilerun::compiler {
namespace {

const char* const kTypeNames[] = {"bool", "i8", "i16", "i32", "i64", "f32"};
constexpr Type kTypes[] = {Type::Bool, Type::I8, Type::I16, Type::I32, Type::I64, Type::F32};
constexpr CallOp kCalls[] = {CallOp::Fma,  CallOp::Sqrt,    CallOp::Exp,     CallOp::Log,
                             CallOp::Tanh, CallOp::Sigmoid, CallOp::Rsqrt,   CallOp::Sin,
                             CallOp::Cos,  CallOp::Erf,     CallOp::Bf16Bits};

std::optional<Type> type_of_name(const std::string& s) {
  for (size_t i = 0; i < std::size(kTypes); ++i)
    if (s == kTypeNames[i]) return kTypes[i];
  return std::nullopt;
}

// Recursive descent over the printer's grammar (ir_printer.cc); one method per construct.
class Parser {
 public:
  Parser(const std::string& text, const std::string& file, bool simt, bool storage_loads)
      : toks_(lex_ir(text, file)), file_(file), simt_(simt), storage_loads_(storage_loads) {}

  Kernel tile_kernel() {
    Kernel k;
    expect("tile_kernel");
    k.sig.name = name("a kernel name");
    while (true) {
      if (signature_line(k.sig)) continue;
      if (is("shared") || is("fragment")) {
        MemScope scope = next().text == "shared" ? MemScope::Shared : MemScope::Fragment;
        TileAlloc a{name("a tile name"), scope, DType::F32, {}};
        expect(":");
        a.dtype = dtype();
        a.shape = int_list();
        if (accept("layout")) swizzled_layout(&a.layout, &a.swizzle);
        buffers_[a.name] = a.dtype;
        k.allocs.push_back(std::move(a));
      } else {
        break;
      }
    }
    k.body = body(k.sig);
    return k;
  }

  SimtKernel simt_kernel() {
    SimtKernel k;
    expect("simt_kernel");
    k.sig.name = name("a kernel name");
    while (true) {
      if (signature_line(k.sig)) continue;
      if (is("shared") || is("local")) {
        bool shared = next().text == "shared";
        SimtArray a{name("an array name"), DType::F32, {}};
        expect(":");
        a.dtype = dtype();
        a.shape = int_list();
        if (shared && accept("layout")) swizzled_layout(&a.layout, &a.swizzle);
        buffers_[a.name] = a.dtype;
        (shared ? k.shared : k.local_arrays).push_back(std::move(a));
      } else if (accept("var")) {
        SimtLocal l{name("a local name"), Type::F32};
        expect(":");
        l.type = type();
        globals_[l.name] = l.type;
        k.locals.push_back(std::move(l));
      } else {
        break;
      }
    }
    k.body = body(k.sig);
    return k;
  }

 private:
  // ---- Tokens.
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  // Whether the token k ahead is the punctuation or word `s`.
  bool is(const char* s, size_t k = 0) const {
    const Token& t = peek(k);
    return (t.kind == TokKind::Punct || t.kind == TokKind::Ident) && t.text == s;
  }
  bool accept(const char* s) {
    if (!is(s)) return false;
    next();
    return true;
  }
  // Nesting of blocks and expressions is bounded, so hostile text is an error rather than a
  // stack overflow (found by fuzz_ir_parser: thousands of nested negations). Kernels the
  // compiler prints nest far less, strict math expansions included.
  static constexpr int kMaxDepth = 1000;
  int depth_ = 0;
  struct Nesting {
    Parser& p;
    Nesting(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > kMaxDepth)
        p.fail(at, "nested more than " + std::to_string(kMaxDepth) + " levels deep");
    }
    ~Nesting() { --p.depth_; }
  };

  [[noreturn]] void fail(const Token& t, const std::string& msg) const {
    throw Error(SourceLoc{file_, t.line, t.col}, msg);
  }
  static std::string describe(const Token& t) {
    return t.kind == TokKind::End ? "the end of the text" : "'" + t.text + "'";
  }
  void expect(const char* s) {
    if (!accept(s)) fail(peek(), std::string("expected '") + s + "', found " + describe(peek()));
  }
  std::string name(const char* what) {
    if (peek().kind != TokKind::Ident)
      fail(peek(), std::string("expected ") + what + ", found " + describe(peek()));
    return next().text;
  }
  int64_t integer(const char* what) {
    const Token& t = peek();
    if (t.kind != TokKind::Int) fail(t, std::string("expected ") + what + ", found " + describe(t));
    errno = 0;
    long long v = std::strtoll(t.text.c_str(), nullptr, 10);
    if (errno == ERANGE) fail(t, "integer '" + t.text + "' out of range");
    next();
    return v;
  }
  int small_int(const char* what) {
    const Token& t = peek();
    int64_t v = integer(what);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(t, std::string(what) + " out of range");
    return static_cast<int>(v);
  }
  // The keyword at peek() and its pending count, 0 to `max` (async_wait, gemm_wait).
  int pending_count(const std::string& stmt, int max) {
    next();
    const Token& p = peek();
    const int64_t n = integer("a pending count");
    if (n < 0 || n > max) fail(p, stmt + "'s pending count is 0 to " + std::to_string(max));
    return static_cast<int>(n);
  }
  Type type() {
    const Token& t = peek();
    std::optional<Type> ty = type_of_name(name("a type"));
    if (!ty) fail(t, "unknown type '" + t.text + "' (bool, i8, i16, i32, i64, f32)");
    return *ty;
  }
  DType dtype() {
    const Token& t = peek();
    std::optional<DType> d = parse_dtype(name("a dtype"));
    if (!d) fail(t, "unknown dtype '" + t.text + "'");
    if (!dtype_supported(*d)) fail(t, "dtype '" + t.text + "' is not supported by the compiler");
    return *d;
  }
  std::vector<int64_t> int_list() {
    std::vector<int64_t> out;
    expect("[");
    if (!is("]")) do {
        out.push_back(integer("an extent"));
      } while (accept(","));
    expect("]");
    return out;
  }
  // A shared tile's layout, optionally swizzled: `Sw<3,3,3> o (64,64):(64,1)`.
  void swizzled_layout(Layout* l, Swizzle* sw) {
    if (is("Sw") && is("<", 1)) {
      const Token& at = next();
      expect("<");
      sw->bits = small_int("swizzle bits");
      expect(",");
      sw->base = small_int("a swizzle base");
      expect(",");
      sw->shift = small_int("a swizzle shift");
      expect(">");
      expect("o");
      if (sw->bits < 1 || sw->bits > 4 || sw->base > 8 || sw->shift < sw->bits)
        fail(at, "a swizzle Sw<B,M,S> has 1 <= B <= 4, M <= 8 and S >= B (a bijection)");
    }
    *l = layout();
  }
  // A layout in layout.h's notation: `(4,8):(8,1)`, or `s:d` for one mode.
  Layout layout() {
    const Token& at = peek();
    auto modes = [&](std::vector<int64_t>& out) {
      if (accept("(")) {
        do {
          out.push_back(integer("a layout mode"));
        } while (accept(","));
        expect(")");
      } else {
        out.push_back(integer("a layout mode"));
      }
    };
    Layout l;
    modes(l.shape);
    expect(":");
    modes(l.stride);
    if (l.shape.size() != l.stride.size()) fail(at, "a layout has one stride per mode");
    return l;
  }
  std::vector<Expr> index_list(const char* open, const char* close) {
    std::vector<Expr> out;
    expect(open);
    if (!is(close)) do {
        out.push_back(i64_expr("an index"));
      } while (accept(","));
    expect(close);
    return out;
  }

  // ---- Signature and body.

  // A dim, buffer or scalar line (both levels); false, consuming nothing, on any other line.
  bool signature_line(KernelSignature& sig) {
    if (accept("dim")) {
      DimParam d{name("a dim name"), {}};
      expect("in");
      expect("[");
      d.bounds.min = integer("the dim's minimum");
      expect(",");
      d.bounds.max = integer("the dim's maximum");
      expect("]");
      if (accept("divisible_by")) d.bounds.divisible_by = integer("a divisor");
      globals_[d.name] = Type::I64;
      sig.dims.push_back(std::move(d));
    } else if (is("input") || is("output")) {
      BufferParam b{"", DType::F32, {}, next().text == "output"};
      b.name = name("a buffer name");
      expect(":");
      b.dtype = dtype();
      b.shape = index_list("[", "]");
      if (accept("values")) {  // an index contract: values in [0, bound)
        expect("in");
        expect("[");
        const Token zero = peek();
        if (integer("the values' lower bound, 0") != 0) fail(zero, "an index contract starts at 0");
        expect(",");
        b.values_below = i64_expr("the values' bound");
        expect(")");
        b.values_distinct = accept("distinct");
        b.values_sorted = accept("sorted");
        if (b.values_sorted && b.shape.size() != 1)
          fail(peek(), "sorted values need a 1-d buffer, '" + b.name + "' has " +
                           std::to_string(b.shape.size()) + " dims");
      }
      buffers_[b.name] = b.dtype;
      sig.buffers.push_back(std::move(b));
    } else if (accept("scalar")) {
      ScalarParam s{name("a scalar name"), Type::F32};
      expect(":");
      s.type = type();
      globals_[s.name] = s.type;
      sig.scalars.push_back(std::move(s));
    } else {
      return false;
    }
    return true;
  }

  Stmt body(KernelSignature& sig) {
    expect("grid");
    sig.grid = index_list("[", "]");
    expect("threads");
    sig.threads = small_int("a thread count");
    for (size_t i = 0; i < 3; ++i) globals_[kBlockIdx[i]] = Type::I64;
    globals_[kThreadIdx] = Type::I64;
    Stmt s = block();
    if (peek().kind != TokKind::End) fail(peek(), "expected the end of the text after the body");
    return s;
  }

  Stmt block() {
    Nesting nest(*this, peek());
    expect("{");
    Stmt s = stmts();
    expect("}");
    return s;
  }

  // Statements up to the closing '}'. A let (or reduce) binds for the rest of its block, which
  // becomes its body.
  Stmt stmts() {
    std::vector<Stmt> out;
    while (!is("}") && peek().kind != TokKind::End) {
      if (is("let") && peek(1).kind == TokKind::Ident && is("=", 2)) {
        bool rest = false;
        out.push_back(let_stmt(&rest));
        if (rest) break;
        continue;
      }
      out.push_back(stmt());
    }
    return Seq::make(std::move(out));
  }

  // `let x = v {...}` binds for its block; `let x = v` for the rest of the enclosing one, which
  // it consumes (*rest = true).
  Stmt let_stmt(bool* rest) {
    expect("let");
    std::string n = name("a name");
    expect("=");
    static const std::pair<const char*, ReduceOp> kReduces[] = {{"reduce_sum", ReduceOp::Sum},
                                                                {"reduce_max", ReduceOp::Max},
                                                                {"reduce_min", ReduceOp::Min}};
    for (const auto& [word, op] : kReduces) {
      if (!(is(word) && peek(1).kind == TokKind::Ident && is("in", 2))) continue;
      next();
      std::string var = name("a reduction variable");
      expect("in");
      Expr extent = zero_based_extent();
      expect("of");
      Expr value = scoped({{var, Type::I64}}, [&] { return expr(); });
      return Reduce::make(n, op, var, extent, value, let_body(n, value.type(), rest));
    }
    Expr value = expr();
    return LetStmt::make(n, value, let_body(n, value.type(), rest));
  }

  Stmt let_body(const std::string& name, Type type, bool* rest) {
    *rest = !is("{");
    return scoped({{name, type}}, [&] { return *rest ? stmts() : block(); });
  }

  // `[0, E)`: the extent E of a range that starts at 0.
  Expr zero_based_extent() {
    expect("[");
    const Token& t = peek();
    if (integer("0") != 0) fail(t, "this range starts at 0");
    expect(",");
    Expr e = i64_expr("an extent");
    expect(")");
    return e;
  }

  // f() with `names` bound on top of the current scope.
  template <class F>
  std::invoke_result_t<F> scoped(std::vector<std::pair<std::string, Type>> names, F f) {
    size_t mark = scope_.size();
    scope_.insert(scope_.end(), names.begin(), names.end());
    auto r = f();
    scope_.resize(mark);
    return r;
  }

  Stmt stmt() {
    const Token& t = peek();
    if (is("for") && peek(1).kind == TokKind::Ident && is("in", 2)) return for_stmt();
    if (is("parallel") && peek(1).kind == TokKind::Ident && is("in", 2)) return parallel_stmt();
    if (is("if") && !is("[", 1) && !is("=", 1) && !is(":=", 1)) return if_stmt();
    if ((is("copy") || is("copy_async")) && peek(1).kind == TokKind::Ident) return copy_stmt();
    if (is("async_copy") && peek(1).kind == TokKind::Ident && is("[", 2)) return async_copy_stmt();
    if (is("tma_copy") && peek(1).kind == TokKind::Ident && is("[", 2)) return tma_copy_stmt();
    if (is("mbarrier_init") && peek(1).kind == TokKind::Ident && is("count", 2)) {
      next();
      const Token& b = peek();
      std::string bar = name("an mbarrier array");
      buffer_dtype(b);
      expect("count");
      const Token& c = peek();
      int count = small_int("an arrival count");
      if (count < 1) fail(c, "an mbarrier expects at least one arrival");
      return MbarrierInit::make(bar, count);
    }
    if (is("mbarrier_inval") && peek(1).kind == TokKind::Ident) {
      next();
      const Token& b = peek();
      std::string bar = name("an mbarrier array");
      buffer_dtype(b);
      return MbarrierInit::make(bar, 0, /*invalidate=*/true);
    }
    if (is("mbarrier_wait") && peek(1).kind == TokKind::Ident && is("[", 2)) {
      next();
      const Token& b = peek();
      std::string bar = name("an mbarrier array");
      buffer_dtype(b);
      expect("[");
      Expr index = i64_expr("an mbarrier index");
      expect("]");
      expect("parity");
      Expr parity = i64_expr("a phase parity");
      return MbarrierWait::make(bar, index, parity);
    }
    if (is("async_commit") && !is("[", 1) && !is("=", 1) && !is(":=", 1)) {
      next();
      return AsyncCommit::make();
    }
    if (is("async_wait") && peek(1).kind == TokKind::Int)
      return AsyncWait::make(pending_count("an async_wait", AsyncWait::kMaxPending));
    if (is("gemm_wait") && peek(1).kind == TokKind::Int)
      return GemmWait::make(pending_count("a gemm_wait", GemmWait::kMaxPending));
    if (is("gemm") && peek(1).kind == TokKind::Ident && is("+", 2) && is("=", 3))
      return gemm_stmt();
    if (is("barrier") && !is("[", 1) && !is("=", 1) && !is(":=", 1)) {
      next();
      return Barrier::make();
    }
    std::string target = name("a statement");
    if (accept(":=")) return Assign::make(target, expr());
    if (accept("=")) {
      if (accept("ballot")) {
        expect("(");
        std::string src = name("a fragment name");
        expect(")");
        if (target == src) fail(t, "a ballot's source and destination must differ");
        return WarpBallot::make(target, src);
      }
      expect("shuffle_xor");
      expect("(");
      std::string src = name("a fragment name");
      expect(",");
      const Token& x = peek();
      int lane_xor = small_int("a lane mask");
      expect(")");
      if (target == src) fail(t, "a shuffle's source and destination must differ");
      if (lane_xor <= 0 || lane_xor >= 32) fail(x, "a shuffle's lane mask lies in [1, 32)");
      return WarpShuffle::make(target, src, lane_xor);
    }
    if (!is("[")) fail(peek(), "expected '[', '=' or ':=' after '" + target + "'");
    buffer_dtype(t);
    next();
    std::vector<Expr> idx;
    if (!is("]")) idx.push_back(i64_expr("an index"));
    if (accept("+:")) return vector_move(target, idx.at(0));
    while (accept(",")) idx.push_back(i64_expr("an index"));
    expect("]");
    expect("=");
    return Store::make(target, std::move(idx), expr());
  }

  // `gemm acc += As * Bs^T over [m, n, k]`, optionally `pending P`.
  Stmt gemm_stmt() {
    expect("gemm");
    std::string c = name("an accumulator name");
    expect("+");
    expect("=");
    auto operand = [&](bool* trans) {
      std::string n = name("a shared tile name");
      *trans = false;
      if (accept("^")) {
        expect("T");
        *trans = true;
      }
      return n;
    };
    bool ta, tb;
    std::string a = operand(&ta);
    expect("*");
    std::string b = operand(&tb);
    expect("over");
    expect("[");
    int64_t ext[3];
    for (int i = 0; i < 3; ++i) {
      if (i) expect(",");
      const Token& t = peek();
      ext[i] = integer("a tile extent");
      if (ext[i] <= 0) fail(t, "a gemm's tile extents are positive");
    }
    expect("]");
    Expr stage;
    bool stage_a = true, stage_b = true;
    // stage(EXPR), stage_a(EXPR), stage_b(EXPR): no statement starts so
    if ((is("stage") || is("stage_a") || is("stage_b")) && is("(", 1)) {
      stage_a = !is("stage_b");
      stage_b = !is("stage_a");
      next();
      expect("(");
      stage = expr();
      expect(")");
    }
    int pending = 0;
    if (is("pending") && peek(1).kind == TokKind::Int) {
      expect("pending");
      const Token& t = peek();
      const int64_t p = integer("a pending gemm count");
      if (p < 0 || p > Gemm::kMaxPending)
        fail(t, "a gemm's pending count is 0 to " + std::to_string(Gemm::kMaxPending));
      pending = static_cast<int>(p);
    }
    if (stage.defined() && !is_int(stage.type())) fail(peek(), "a gemm's stage is an integer");
    return Gemm::make(c, a, b, ta, tb, ext[0], ext[1], ext[2], pending, stage, stage_a, stage_b);
  }

  Stmt vector_move(const std::string& dst, Expr dst_index) {
    const Token& t = peek();
    int lanes = small_int("a lane count");
    expect("]");
    expect("=");
    const Token& s = peek();
    std::string src = name("a buffer name");
    buffer_dtype(s);
    expect("[");
    Expr src_index = i64_expr("an index");
    expect("+:");
    const Token& t2 = peek();
    if (small_int("a lane count") != lanes) fail(t2, "both sides of a vector move have one width");
    expect("]");
    if (lanes < 2 || lanes > 16 || (lanes & (lanes - 1)) != 0)
      fail(t, "a vector move has 2, 4, 8 or 16 lanes");
    return VectorMove::make(dst, dst_index, src, src_index, lanes);
  }

  Stmt for_stmt() {
    expect("for");
    std::string var = name("a loop variable");
    expect("in");
    expect("[");
    Expr min = i64_expr("a bound");
    expect(",");
    const Token& t = peek();
    Expr end = i64_expr("a bound");
    expect(")");
    bool vectorized = accept("vectorized");
    // The printer writes min + extent folded as add() folds it (ir.h); undo that.
    Expr extent;
    int64_t lo, hi;
    const Binary* sum = end.as<Binary>();
    if (const_int(min, &lo) && lo == 0) {
      extent = end;
    } else if (const_int(min, &lo) && const_int(end, &hi)) {
      extent = make_i64(hi - lo);
    } else if (sum && sum->op == BinaryOp::Add && equal(sum->a, min)) {
      extent = sum->b;
    } else if (equal(end, min)) {
      extent = make_i64(0);
    } else {
      fail(t, "a loop's end must read (min + extent)");
    }
    int64_t lanes;
    if (vectorized && !(const_int(extent, &lanes) && lanes >= 1))
      fail(t, "a vectorized loop has a constant extent");
    Stmt body = scoped({{var, Type::I64}}, [&] { return block(); });
    return For::make(var, min, extent, body, vectorized);
  }

  Stmt parallel_stmt() {
    expect("parallel");
    std::vector<std::string> vars;
    std::vector<Expr> extents;
    std::vector<std::pair<std::string, Type>> bound;
    do {
      vars.push_back(name("a parallel variable"));
      expect("in");
      extents.push_back(zero_based_extent());
      bound.emplace_back(vars.back(), Type::I64);
    } while (accept(","));
    ParallelLayout l;
    if (accept("width")) {
      const Token& t = peek();
      l.width = small_int("a width");
      if (l.width <= 0 || l.width > 16 || (l.width & (l.width - 1)) != 0)
        fail(t, "a parallel width is a power of two <= 16");
      l.annotated = accept("annotated");
      l.vectorize = accept("vectorize");
    } else {
      l.annotated = accept("annotated");
    }
    if (accept("provable")) l.provable = small_int("a provable width");
    // A thread-value layout other than the default of the width (the printer leaves that out).
    if (accept("layout")) l.tv = layout();
    Stmt body = scoped(bound, [&] { return block(); });
    return Parallel::make(vars, extents, body, l);
  }

  Stmt if_stmt() {
    expect("if");
    const Token& t = peek();
    Expr cond = expr();
    if (cond.type() != Type::Bool) fail(t, "an if condition is bool");
    Stmt then_case = block();
    Stmt else_case;
    if (accept("else")) else_case = block();
    return IfThenElse::make(cond, then_case, else_case);
  }

  Region region() {
    Region r;
    const Token& t = peek();
    r.buffer = name("a buffer name");
    buffer_dtype(t);
    expect("[");
    if (!is("]")) do {
        r.origin.push_back(i64_expr("an origin"));
        expect("+:");
        r.extents.push_back(integer("an extent"));
      } while (accept(","));
    expect("]");
    return r;
  }

  Stmt copy_stmt() {
    const bool async = accept("copy_async");
    if (!async) expect("copy");
    const Token& t = peek();
    Region dst = region();
    expect("<-");
    Region src = region();
    // copy_async's sides may differ by leading extents of 1 (ir.h copy_extents_match).
    if (!copy_extents_match(dst.extents, src.extents, async))
      fail(t, "a copy's two boxes have one shape");
    return Copy::make(dst, src, async);
  }

  // `name[i, j, ..]`: a declared buffer's name into *buf, and the indices.
  std::vector<Expr> indexed_buffer(std::string* buf, const char* what = "a buffer name") {
    const Token& t = peek();
    *buf = name(what);
    buffer_dtype(t);
    expect("[");
    std::vector<Expr> idx{i64_expr("an index")};
    while (accept(",")) idx.push_back(i64_expr("an index"));
    expect("]");
    return idx;
  }

  // `async_copy dst[i, j] <- src[i, j] +: L valid V` (ir.h AsyncCopy).
  Stmt async_copy_stmt() {
    expect("async_copy");
    auto element = [&](std::string* buf) { return indexed_buffer(buf); };
    std::string dst, src;
    std::vector<Expr> di = element(&dst);
    expect("<-");
    std::vector<Expr> si = element(&src);
    expect("+:");
    const Token& t = peek();
    int lanes = small_int("a lane count");
    if (lanes < 2 || lanes > 16 || (lanes & (lanes - 1)) != 0)
      fail(t, "an async copy has 2, 4, 8 or 16 lanes");
    expect("valid");
    Expr valid = i64_expr("a valid element count");
    return AsyncCopy::make(dst, std::move(di), src, std::move(si), lanes, valid);
  }

  // `tma_copy dst[..] <- src[..] box [e, ..] on bar[i]` (ir.h TmaCopy).
  Stmt tma_copy_stmt() {
    expect("tma_copy");
    auto element = [&](std::string* buf, const char* what) { return indexed_buffer(buf, what); };
    std::string dst, src, bar;
    std::vector<Expr> di = element(&dst, "a buffer name");
    expect("<-");
    std::vector<Expr> si = element(&src, "a buffer name");
    expect("box");
    expect("[");
    const Token& t = peek();
    std::vector<int64_t> box;
    do {
      box.push_back(integer("a box extent"));
    } while (accept(","));
    expect("]");
    if (box.size() != si.size() || box.size() > TmaCopy::kMaxRank)
      fail(t, "a tma_copy's box has one extent per source index, at most 5");
    for (int64_t e : box)
      if (e < 1 || e > TmaCopy::kMaxBox) fail(t, "a tma_copy's box extents are 1 to 256");
    expect("on");
    std::vector<Expr> bi = element(&bar, "an mbarrier array");
    if (bi.size() != 1) fail(t, "an mbarrier array has one index");
    return TmaCopy::make(dst, std::move(di), src, std::move(si), std::move(box), bar, bi[0]);
  }

  // ---- Expressions.

  DType buffer_dtype(const Token& t) const {
    auto it = buffers_.find(t.text);
    if (it == buffers_.end()) fail(t, "unknown buffer '" + t.text + "'");
    return it->second;
  }

  Type var_type(const Token& t) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (it->first == t.text) return it->second;
    auto g = globals_.find(t.text);
    if (g == globals_.end()) fail(t, "unknown name '" + t.text + "'");
    return g->second;
  }

  Expr i64_expr(const char* what) {
    const Token& t = peek();
    Expr e = expr();
    if (e.type() != Type::I64) fail(t, std::string(what) + " is i64, not " + type_name(e.type()));
    return e;
  }

  std::vector<Expr> args(size_t n) {
    std::vector<Expr> out;
    expect("(");
    for (size_t i = 0; i < n; ++i) {
      if (i) expect(",");
      out.push_back(expr());
    }
    expect(")");
    return out;
  }

  Expr expr() {
    const Token& t = peek();
    Nesting nest(*this, t);
    switch (t.kind) {
      case TokKind::Int:
        return make_i64(integer("an integer"));
      case TokKind::Float:
        next();
        return make_f32(std::strtof(t.text.c_str(), nullptr));
      case TokKind::Ident:
        return word_expr();
      case TokKind::End:
        fail(t, "expected an expression, found the end of the text");
      case TokKind::Punct:
        break;
    }
    if (accept("-")) {
      Expr a = expr();
      if (a.type() == Type::Bool) fail(t, "negating a bool");
      return Unary::make(UnaryOp::Neg, a);
    }
    if (accept("!")) {
      Expr a = expr();
      if (is_float(a.type())) fail(t, "'!' of a float");
      return Unary::make(UnaryOp::Not, a);
    }
    if (!accept("(")) fail(t, "expected an expression, found " + describe(t));
    if (is("let") && peek(1).kind == TokKind::Ident && is("=", 2)) {
      next();
      std::string n = next().text;
      next();
      Expr value = expr();
      expect("in");
      Expr body = scoped({{n, value.type()}}, [&] { return expr(); });
      expect(")");
      return Let::make(n, value, body);
    }
    Expr a = expr();
    if (accept(")")) return a;  // `-(1f)`: the printer's parentheses around a negated literal
    const Token& op_tok = peek();
    std::optional<BinaryOp> op;
    for (int i = 0; i <= static_cast<int>(BinaryOp::LtU); ++i) {
      BinaryOp o = static_cast<BinaryOp>(i);
      if (o != BinaryOp::Min && o != BinaryOp::Max && op_tok.kind == TokKind::Punct &&
          op_tok.text == binary_op_name(o))
        op = o;
    }
    if (!op) fail(op_tok, "expected a binary operator, found " + describe(op_tok));
    next();
    Expr b = expr();
    expect(")");
    return binary(op_tok, *op, a, b);
  }

  Expr binary(const Token& t, BinaryOp op, const Expr& a, const Expr& b) const {
    Type ty = a.type();
    std::string name = binary_op_name(op);
    if (ty != b.type())
      fail(t, "'" + name + "' of " + type_name(ty) + " and " + type_name(b.type()));
    bool ok = true;
    switch (op) {
      case BinaryOp::Mod:
      case BinaryOp::Shl:
      case BinaryOp::ShrL:
      case BinaryOp::ShrA:
      case BinaryOp::LtU:
        ok = is_int(ty);
        break;
      case BinaryOp::And:
      case BinaryOp::Or:
      case BinaryOp::Xor:
        ok = is_int(ty) || ty == Type::Bool;
        break;
      case BinaryOp::Eq:
      case BinaryOp::Ne:
        break;
      default:
        ok = ty != Type::Bool;
    }
    if (!ok) fail(t, "'" + name + "' does not apply to " + type_name(ty));
    return Binary::make(op, a, b);
  }

  Expr word_expr() {
    const Token& t = next();
    const std::string& w = t.text;
    bool call = is("(");
    if ((w == "true" || w == "false") && !call && !is("[")) return make_bool(w == "true");
    if (std::optional<Type> ty = type_of_name(w); ty && call) return typed(t, *ty);
    if (w == "bitcast" && is("<")) {
      next();
      Type ty = type();
      expect(">");
      const Token& v = peek();
      Expr e = args(1)[0];
      if (type_bits(ty) != type_bits(e.type()) || ty == Type::Bool)
        fail(v, std::string("bitcast between ") + type_name(e.type()) + " and " + type_name(ty));
      return Bitcast::make(ty, e);
    }
    if (w == "select" && call) {
      std::vector<Expr> a = args(3);
      if (a[0].type() != Type::Bool) fail(t, "a select's condition is bool");
      if (a[1].type() != a[2].type()) fail(t, "a select's arms differ in type");
      return Select::make(a[0], a[1], a[2]);
    }
    if ((w == "min" || w == "max") && call) {
      std::vector<Expr> a = args(2);
      return binary(t, w == "min" ? BinaryOp::Min : BinaryOp::Max, a[0], a[1]);
    }
    for (CallOp op : kCalls) {
      if (w != call_op_name(op) || !call) continue;
      std::vector<Expr> a = args(call_op_arity(op));
      for (const Expr& e : a)
        if (e.type() != Type::F32) fail(t, w + " takes f32");
      return Call::make(op, a);
    }
    if (is("[")) {
      DType d = buffer_dtype(t);
      Type ty = simt_ && storage_loads_ ? storage_type(d) : compute_type(d);
      return Load::make(ty, w, index_list("[", "]"));
    }
    return Var::make(var_type(t), w);
  }

  // `T(...)`: a constant of type T (`i32(5)`, `f32(nan)`), else a cast to T.
  Expr typed(const Token& t, Type ty) {
    if (ty == Type::F32 && is("(") && peek(1).kind == TokKind::Ident && is(")", 2)) {
      const std::string& w = peek(1).text;
      float v = w == "nan"   ? std::numeric_limits<float>::quiet_NaN()
                : w == "inf" ? std::numeric_limits<float>::infinity()
                             : 0.0f;
      if (w == "nan" || w == "inf") {
        next(), next(), next();
        return make_f32(v);
      }
    }
    if (ty == Type::F32 && is("(") && is("-", 1) && is("inf", 2) && is(")", 3)) {
      next(), next(), next(), next();
      return make_f32(-std::numeric_limits<float>::infinity());
    }
    if (is_int(ty) && ty != Type::I64 && is("(") && peek(1).kind == TokKind::Int && is(")", 2)) {
      next();
      int64_t v = integer("an integer");
      next();
      return make_const(ty, v);
    }
    if (ty == Type::Bool) fail(t, "no cast to bool: compare instead");
    return Cast::make(ty, args(1)[0]);
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  std::string file_;
  bool simt_, storage_loads_;
  std::map<std::string, DType> buffers_;             // global buffers and on-chip arrays
  std::map<std::string, Type> globals_;              // dims, scalars, thread geometry, SIMT locals
  std::vector<std::pair<std::string, Type>> scope_;  // loop, parallel, let and reduce names
};

}  // namespace

Kernel parse_tile_kernel(const std::string& text, const std::string& file) {
  return Parser(text, file, false, false).tile_kernel();
}

SimtKernel parse_simt_kernel(const std::string& text, const std::string& file,
                             std::optional<SimtForm> form) {
  if (form) return Parser(text, file, true, *form >= SimtForm::StorageTyped).simt_kernel();
  try {
    SimtKernel storage = Parser(text, file, true, true).simt_kernel();
    if (simt_problem(storage, SimtForm::StorageTyped).empty()) return storage;
  } catch (const Error&) {
    // Not readable with storage-typed loads: the compute reading below reports the error.
  }
  return Parser(text, file, true, false).simt_kernel();
}

bool is_simt_text(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
    } else if (text.compare(i, 2, "//") == 0) {
      i = text.find('\n', i);
      if (i == std::string::npos) return false;
    } else {
      break;
    }
  }
  return text.compare(i, 12, "simt_kernel ") == 0 || text.compare(i, 12, "simt_kernel\n") == 0;
}

}  // namespace tilerun::compiler
