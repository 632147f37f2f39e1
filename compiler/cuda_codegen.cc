#include "compiler/cuda_codegen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "compiler/check.h"
#include "compiler/expand_strict_math.h"
#include "compiler/ir_printer.h"
#include "compiler/ir_visitor.h"
#include "compiler/launch_geometry.h"
#include "compiler/lower.h"
#include "compiler/nvrtc.h"
#include "compiler/sha256.h"
#include "compiler/simt_verifier.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

// Static shared memory a kernel may declare without opting in to more (dynamic shared memory
// and cuFuncSetAttribute come with the kernels that need it).
constexpr int64_t kMaxStaticShared = 48 * 1024;

// The helpers every kernel's source starts with. Integer arithmetic that could overflow is
// done in unsigned types (signed overflow would be undefined, and NVVM would exploit it);
// everything here is exact, so it matches the CPU backend's LLVM IR bit for bit.
constexpr const char* kPrelude =
    R"(// ---- tilerun strict-numerics helpers (identical in every kernel).
// Integers: + - * << wrap (computed unsigned), / and % are floor division and modulo, >>> is
// logical. f32 -> int truncates toward zero, saturates, NaN -> 0. Negation flips the sign bit.
#define TR_INT_OPS(T, U, W)                                                                 \
  static __device__ __forceinline__ T tr_add(T a, T b) { return (T)(W)((W)a + (W)b); }      \
  static __device__ __forceinline__ T tr_sub(T a, T b) { return (T)(W)((W)a - (W)b); }      \
  static __device__ __forceinline__ T tr_mul(T a, T b) { return (T)(W)((W)a * (W)b); }      \
  static __device__ __forceinline__ T tr_neg(T a) { return (T)(W)((W)0 - (W)a); }           \
  static __device__ __forceinline__ T tr_shl(T a, T b) { return (T)(W)((W)a << b); }        \
  static __device__ __forceinline__ T tr_shrl(T a, T b) { return (T)((U)a >> b); }          \
  static __device__ __forceinline__ T tr_shra(T a, T b) { return (T)(a >> b); }            \
  static __device__ __forceinline__ bool tr_ltu(T a, T b) { return (U)a < (U)b; }          \
  static __device__ __forceinline__ T tr_min(T a, T b) { return a < b ? a : b; }           \
  static __device__ __forceinline__ T tr_max(T a, T b) { return a > b ? a : b; }           \
  static __device__ __forceinline__ T tr_div(T a, T b) {                                   \
    T q = (T)(a / b), r = (T)(a % b);                                                      \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(q - 1) : q;                              \
  }                                                                                        \
  static __device__ __forceinline__ T tr_mod(T a, T b) {                                   \
    T r = (T)(a % b);                                                                      \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                              \
  }
TR_INT_OPS(signed char, unsigned char, unsigned int)
TR_INT_OPS(short, unsigned short, unsigned int)
TR_INT_OPS(int, unsigned int, unsigned int)
TR_INT_OPS(long long, unsigned long long, unsigned long long)
#undef TR_INT_OPS
static __device__ __forceinline__ float tr_fneg(float x) {
  return __int_as_float((int)((unsigned int)__float_as_int(x) ^ 0x80000000u));
}
static __device__ __forceinline__ signed char tr_f32_to_i8(float x) {
  return x != x ? (signed char)0 : x >= 127.0f ? (signed char)127
       : x <= -128.0f ? (signed char)-128 : (signed char)__float2int_rz(x);
}
static __device__ __forceinline__ short tr_f32_to_i16(float x) {
  return x != x ? (short)0 : x >= 32767.0f ? (short)32767
       : x <= -32768.0f ? (short)-32768 : (short)__float2int_rz(x);
}
static __device__ __forceinline__ int tr_f32_to_i32(float x) {
  return x != x ? 0 : x >= 2147483648.0f ? 2147483647
       : x <= -2147483648.0f ? (-2147483647 - 1) : __float2int_rz(x);
}
static __device__ __forceinline__ long long tr_f32_to_i64(float x) {
  return x != x ? 0LL : x >= 9223372036854775808.0f ? 9223372036854775807LL
       : x <= -9223372036854775808.0f ? (-9223372036854775807LL - 1LL) : __float2ll_rz(x);
}
// ---- end of helpers.
)";

const char* c_type(Type t) {
  switch (t) {
    case Type::Bool:
      return "bool";
    case Type::I8:
      return "signed char";
    case Type::I16:
      return "short";
    case Type::I32:
      return "int";
    case Type::I64:
      return "long long";
    case Type::F32:
      return "float";
  }
  TR_CHECK(false, "unknown type");
}

// Words an identifier must not be: C++ keywords, CUDA's built-in variables, and names some
// compilers predefine as macros.
const std::set<std::string>& reserved_words() {
  static const std::set<std::string> words = {
      "alignas",       "alignof",     "and",
      "and_eq",        "asm",         "auto",
      "bitand",        "bitor",       "bool",
      "break",         "case",        "catch",
      "char",          "char8_t",     "char16_t",
      "char32_t",      "class",       "compl",
      "concept",       "const",       "consteval",
      "constexpr",     "constinit",   "const_cast",
      "continue",      "co_await",    "co_return",
      "co_yield",      "decltype",    "default",
      "delete",        "do",          "double",
      "dynamic_cast",  "else",        "enum",
      "explicit",      "export",      "extern",
      "false",         "float",       "for",
      "friend",        "goto",        "if",
      "inline",        "int",         "long",
      "mutable",       "namespace",   "new",
      "noexcept",      "not",         "not_eq",
      "nullptr",       "operator",    "or",
      "or_eq",         "private",     "protected",
      "public",        "register",    "reinterpret_cast",
      "requires",      "return",      "short",
      "signed",        "sizeof",      "static",
      "static_assert", "static_cast", "struct",
      "switch",        "template",    "this",
      "thread_local",  "throw",       "true",
      "try",           "typedef",     "typeid",
      "typename",      "union",       "unsigned",
      "using",         "virtual",     "void",
      "volatile",      "wchar_t",     "while",
      "xor",           "xor_eq",      "restrict",
      "threadIdx",     "blockIdx",    "blockDim",
      "gridDim",       "warpSize",    "linux",
      "unix",          "i386",        "NULL",
  };
  return words;
}

bool is_alnum_ascii(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// Any text → an identifier that no user text can turn into a keyword, a builtin or one of the
// prelude's names (tr_*): other characters become '_', a leading digit or '_' gets a 'v'.
std::string sanitize(const std::string& name) {
  std::string out;
  for (unsigned char c : name) out += is_alnum_ascii(c) ? static_cast<char>(c) : '_';
  if (out.empty() || out[0] == '_' || (out[0] >= '0' && out[0] <= '9')) out = "v" + out;
  if (out.rfind("tr_", 0) == 0 || out.rfind("TR_", 0) == 0 || out.rfind("tilerun_", 0) == 0)
    out = "v" + out;
  if (reserved_words().count(out)) out += "_";
  return out;
}

// Text for a // comment: printable ASCII except '\' (a line splice) and '%' (the escape),
// anything else as %HH.
std::string comment_safe(const std::string& text) {
  static const std::string allowed = " _.,:;()[]+-*/<>=!&|^{}#@'\"~$?";
  std::string out;
  for (unsigned char c : text) {
    if (is_alnum_ascii(c) || allowed.find(static_cast<char>(c)) != std::string::npos) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string int_literal(Type t, int64_t v) {
  char buf[64];
  switch (t) {
    case Type::Bool:
      return v ? "true" : "false";
    case Type::I8:
      return "((signed char)" + std::to_string(v) + ")";
    case Type::I16:
      return "((short)" + std::to_string(v) + ")";
    case Type::I32:
      if (v >= 0 && v <= 0xffff) return std::to_string(v);
      if (v > 0) {
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
      } else if (v >= -0xffff) {
        std::snprintf(buf, sizeof buf, "(%lld)", static_cast<long long>(v));
      } else {
        std::snprintf(buf, sizeof buf, "((int)0x%xu)", static_cast<uint32_t>(v));
      }
      return buf;
    case Type::I64:
      if (v >= 0 && v <= 0xffff) return std::to_string(v) + "LL";
      if (v > 0) {
        std::snprintf(buf, sizeof buf, "0x%llxLL", static_cast<unsigned long long>(v));
      } else if (v >= -0xffff) {
        std::snprintf(buf, sizeof buf, "(%lldLL)", static_cast<long long>(v));
      } else {
        std::snprintf(buf, sizeof buf, "((long long)0x%llxULL)",
                      static_cast<unsigned long long>(v));
      }
      return buf;
    case Type::F32:
      break;
  }
  TR_CHECK(false, "integer literal of a float type");
}

// Normal numbers and zeros in decimal with 9 significant digits (round-trips through the
// compiler's correctly rounded conversion); inf, NaN and subnormals as their exact bits.
std::string float_literal(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  char buf[48];
  if (std::isnan(v) || std::isinf(v) || (v != 0.0f && std::fabs(v) < 1.17549435e-38f)) {
    std::snprintf(buf, sizeof buf, "__int_as_float((int)0x%08xu)", bits);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  s += "f";
  return s[0] == '-' ? "(" + s + ")" : s;
}

bool is_small_int(Type t) { return t == Type::I8 || t == Type::I16; }

// C promotes char/short operands to int: cast such results back to the IR's type.
std::string narrow(Type t, const std::string& text) {
  return is_small_int(t) ? "((" + std::string(c_type(t)) + ")" + text + ")" : text;
}

class ContainsLoad : public IRVisitor {
 public:
  bool found = false;

 protected:
  void visit_expr(const Load*) override { found = true; }
};

bool contains_load(const Expr& e) {
  ContainsLoad v;
  v.visit(e);
  return v.found;
}

class CudaEmitter {
 public:
  explicit CudaEmitter(const SimtKernel& k) : k_(k) {}

  std::string run() {
    const KernelSignature& sig = k_.sig;
    std::string symbol = cuda_kernel_symbol(sig.name);
    taken_.insert(symbol);

    out_ << "// tilerun kernel '" << comment_safe(sig.name)
         << "' (generated by compiler/cuda_codegen.cc).\n";
    std::string grid;
    for (size_t i = 0; i < sig.grid.size(); ++i) grid += (i ? ", " : "") + to_string(sig.grid[i]);
    out_ << "// grid (" << comment_safe(grid) << "), " << sig.threads << " threads per block.\n";
    out_ << kPrelude << "\n";

    // Fixed names first, so user names that equal them are the ones renamed.
    std::string tid = fresh("thread_idx");
    const char* block_names[3] = {"block_idx_x", "block_idx_y", "block_idx_z"};
    std::vector<std::string> bids;
    for (size_t i = 0; i < sig.grid.size(); ++i) bids.push_back(fresh(block_names[i]));

    std::vector<std::string> params;
    for (const BufferParam& b : sig.buffers) {
      std::string c = fresh(b.name);
      buffers_[b.name] = c;
      std::string shape;
      for (size_t i = 0; i < b.shape.size(); ++i) shape += (i ? ", " : "") + to_string(b.shape[i]);
      params.push_back(std::string(b.is_output ? "" : "const ") + c_type(storage_type(b.dtype)) +
                       "* __restrict__ " + c + "|" + (b.is_output ? "output " : "input ") +
                       std::string(dtype_name(b.dtype)) + " [" + shape + "]");
    }
    for (const DimParam& d : sig.dims) {
      std::string c = fresh(d.name);
      bind(d.name, c);
      std::string note =
          "dim in [" + std::to_string(d.bounds.min) + ", " + std::to_string(d.bounds.max) + "]";
      if (d.bounds.divisible_by > 1)
        note += ", a multiple of " + std::to_string(d.bounds.divisible_by);
      params.push_back("long long " + c + "|" + note);
    }
    for (const ScalarParam& s : sig.scalars) {
      std::string c = fresh(s.name);
      bind(s.name, c);
      params.push_back(std::string(c_type(s.type)) + " " + c + "|scalar " + type_name(s.type));
    }

    out_ << "extern \"C\" __global__ void __launch_bounds__(" << sig.threads << ") " << symbol
         << "(";
    if (params.empty()) out_ << ") {\n";
    for (size_t i = 0; i < params.size(); ++i) {
      size_t bar = params[i].find('|');
      out_ << "\n    " << params[i].substr(0, bar) << (i + 1 < params.size() ? "," : ") {")
           << "  // " << comment_safe(params[i].substr(bar + 1));
    }
    if (!params.empty()) out_ << "\n";

    indent_ = 1;
    line("const long long " + tid + " = (long long)threadIdx.x;");
    bind(kThreadIdx, tid);
    for (size_t i = 0; i < bids.size(); ++i) {
      line("const long long " + bids[i] + " = (long long)blockIdx." + "xyz"[i] + ";");
      bind(kBlockIdx[i], bids[i]);
    }
    int64_t shared_bytes = 0;
    for (const SimtArray& a : k_.shared) {
      std::string c = fresh(a.name);
      buffers_[a.name] = c;
      shared_bytes += dtype_bytes(a.dtype, a.size());
      line("__shared__ __align__(16) " + std::string(c_type(storage_type(a.dtype))) + " " + c +
           "[" + std::to_string(a.size()) + "];  // " +
           comment_safe(std::string(dtype_name(a.dtype))));
    }
    if (shared_bytes > kMaxStaticShared)
      throw Error("kernel '" + sig.name + "': " + std::to_string(shared_bytes) +
                      " bytes of shared memory exceed the " + std::to_string(kMaxStaticShared) +
                      " a CUDA kernel may declare statically",
                  ErrorKind::Runtime);
    for (const SimtArray& a : k_.local_arrays) {
      std::string c = fresh(a.name);
      buffers_[a.name] = c;
      line("__align__(16) " + std::string(c_type(storage_type(a.dtype))) + " " + c + "[" +
           std::to_string(a.size()) + "];  // " + comment_safe(std::string(dtype_name(a.dtype))));
    }
    for (const SimtLocal& l : k_.locals) {
      std::string c = fresh(l.name);
      bind(l.name, c);
      line(std::string(c_type(l.type)) + " " + c + " = " +
           (l.type == Type::F32 ? float_literal(0.0f) : int_literal(l.type, 0)) + ";");
    }
    // Programmatic dependent launch: first let the next grid launch, then wait until the grids
    // this one depends on have finished and their writes are visible, before the first read of
    // anything they produced. Triggering before the wait is still correct, since the next grid's
    // own griddepcontrol.wait returns only once this whole grid has completed; it lets the next
    // launch overlap this kernel (chain200 on the H200: 0.71 -> 0.63 µs per kernel). Without a
    // PDL launch attribute both are no-ops, so one binary serves --pdl on and off with the same
    // bits.
    line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
    line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
    stmt(k_.body);
    indent_ = 0;
    line("}");
    return out_.str();
  }

 private:
  // ---- Names.

  std::string fresh(const std::string& ir_name) {
    std::string base = sanitize(ir_name), name = base;
    for (int n = 2; !taken_.insert(name).second; ++n) name = base + "_" + std::to_string(n);
    return name;
  }
  void bind(const std::string& ir_name, const std::string& c) { scope_.emplace_back(ir_name, c); }
  void unbind() { scope_.pop_back(); }
  const std::string& lookup(const std::string& ir_name) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (it->first == ir_name) return it->second;
    TR_CHECK(false, "'" + ir_name + "' unbound in CUDA codegen");
  }
  const std::string& buffer(const std::string& ir_name) const {
    auto it = buffers_.find(ir_name);
    TR_CHECK(it != buffers_.end(), "unknown buffer '" + ir_name + "'");
    return it->second;
  }

  void line(const std::string& text) { out_ << std::string(2 * indent_, ' ') << text << '\n'; }

  // What emitting `e` involves: declared variables (expression lets, hoisted to statements
  // before the use) and memory reads.
  struct Traits {
    bool let = false, load = false;
  };
  Traits traits(const Expr& e) {
    auto it = traits_.find(e.get());
    if (it != traits_.end()) return it->second;
    Traits r;
    auto add = [&](const Expr& c) {
      Traits t = traits(c);
      r.let = r.let || t.let;
      r.load = r.load || t.load;
    };
    switch (e->kind) {
      case ExprKind::Let:
        r.let = true;
        add(e.as<Let>()->value);
        add(e.as<Let>()->body);
        break;
      case ExprKind::Binary:
        add(e.as<Binary>()->a);
        add(e.as<Binary>()->b);
        break;
      case ExprKind::Unary:
        add(e.as<Unary>()->a);
        break;
      case ExprKind::Select:
        add(e.as<Select>()->cond);
        add(e.as<Select>()->true_value);
        add(e.as<Select>()->false_value);
        break;
      case ExprKind::Cast:
        add(e.as<Cast>()->value);
        break;
      case ExprKind::Bitcast:
        add(e.as<Bitcast>()->value);
        break;
      case ExprKind::Call:
        for (const Expr& a : e.as<Call>()->args) add(a);
        break;
      case ExprKind::Load:
        r.load = true;
        add(e.as<Load>()->indices[0]);
        break;
      default:
        break;
    }
    traits_[e.get()] = r;
    return r;
  }
  // Whether `e`, where C would evaluate it only conditionally (a ternary's arm, the right of
  // && or ||), must stay conditional as statements: its lets would be hoisted and evaluated
  // unconditionally, and with a memory read among them that could read out of bounds. Pure
  // arithmetic lets are hoisted (both arms computed, as the IR's select means; branch-free).
  bool needs_lazy(const Expr& e) {
    Traits t = traits(e);
    return t.let && t.load;
  }

  // ---- Expressions. The returned text is a C expression of exactly the IR type's C type;
  // lets inside `e` are declared (as `const` lines) before the statement that uses it.

  std::string expr(const Expr& e) {
    switch (e->kind) {
      case ExprKind::IntImm:
        return int_literal(e.type(), e.as<IntImm>()->value);
      case ExprKind::FloatImm:
        return float_literal(e.as<FloatImm>()->value);
      case ExprKind::Var:
        return lookup(e.as<Var>()->name);
      case ExprKind::Binary:
        return binary(e.as<Binary>());
      case ExprKind::Unary: {
        const Unary* op = e.as<Unary>();
        std::string a = expr(op->a);
        if (op->op == UnaryOp::Neg)
          return (op->type == Type::F32 ? "tr_fneg(" : "tr_neg(") + a + ")";
        if (op->type == Type::Bool) return "(!" + a + ")";
        return narrow(op->type, "(~" + a + ")");
      }
      case ExprKind::Select:
        return select(e.as<Select>());
      case ExprKind::Cast:
        return cast(e.as<Cast>());
      case ExprKind::Bitcast: {
        const Bitcast* op = e.as<Bitcast>();
        std::string v = expr(op->value);
        Type from = op->value.type(), to = op->type;
        if (from == to) return v;
        if (from == Type::F32 && to == Type::I32) return "__float_as_int(" + v + ")";
        TR_CHECK(from == Type::I32 && to == Type::F32,
                 std::string("bitcast from ") + type_name(from) + " to " + type_name(to));
        return "__int_as_float(" + v + ")";
      }
      case ExprKind::Call: {
        const Call* op = e.as<Call>();
        std::vector<std::string> a;
        for (const Expr& x : op->args) a.push_back(expr(x));
        if (op->op == CallOp::Fma) return "__fmaf_rn(" + a[0] + ", " + a[1] + ", " + a[2] + ")";
        TR_CHECK(op->op == CallOp::Sqrt,
                 std::string("call to ") + call_op_name(op->op) + " survived expand_strict_math");
        return "__fsqrt_rn(" + a[0] + ")";
      }
      case ExprKind::Let: {
        const Let* op = e.as<Let>();
        std::string v = expr(op->value);
        std::string c = fresh(op->name);
        line("const " + std::string(c_type(op->value.type())) + " " + c + " = " + v + ";");
        bind(op->name, c);
        std::string body = expr(op->body);
        unbind();
        return body;
      }
      case ExprKind::Load: {
        const Load* op = e.as<Load>();
        TR_CHECK(op->indices.size() == 1,
                 "multi-dimensional load of '" + op->buffer + "' in CUDA codegen");
        return buffer(op->buffer) + "[" + expr(op->indices[0]) + "]";
      }
    }
    TR_CHECK(false, "unknown expression kind");
  }

  std::string binary(const Binary* op) {
    const Type t = op->a.type();
    // && and || whose right side must stay conditional (needs_lazy): evaluate it only when
    // needed, as C would.
    if (t == Type::Bool && (op->op == BinaryOp::And || op->op == BinaryOp::Or) &&
        needs_lazy(op->b)) {
      std::string a = expr(op->a);
      std::string r = fresh("cond");
      line("bool " + r + " = " + a + ";");
      line(std::string("if (") + (op->op == BinaryOp::And ? "" : "!") + r + ") {");
      ++indent_;
      std::string b = expr(op->b);
      line(r + " = " + b + ";");
      --indent_;
      line("}");
      return r;
    }
    std::string a = expr(op->a), b = expr(op->b);
    auto call = [&](const char* f) { return std::string(f) + "(" + a + ", " + b + ")"; };
    auto infix = [&](const char* o) { return "(" + a + " " + o + " " + b + ")"; };
    if (is_comparison(op->op)) {
      switch (op->op) {
        case BinaryOp::Eq:
          return infix("==");
        case BinaryOp::Ne:
          return infix("!=");  // floats: unordered, so NaN != x is true
        case BinaryOp::Lt:
          return infix("<");
        case BinaryOp::Le:
          return infix("<=");
        case BinaryOp::Gt:
          return infix(">");
        case BinaryOp::Ge:
          return infix(">=");
        case BinaryOp::LtU:
          return call("tr_ltu");
        default:
          break;
      }
    }
    if (t == Type::F32) {
      switch (op->op) {
        case BinaryOp::Add:
          return call("__fadd_rn");
        case BinaryOp::Sub:
          return call("__fsub_rn");
        case BinaryOp::Mul:
          return call("__fmul_rn");
        case BinaryOp::Div:
          return call("__fdiv_rn");
        default:
          TR_CHECK(false, std::string("f32 ") + binary_op_name(op->op) + " in CUDA codegen");
      }
    }
    if (t == Type::Bool) {
      switch (op->op) {
        case BinaryOp::And:
          return infix("&&");
        case BinaryOp::Or:
          return infix("||");
        case BinaryOp::Xor:
          return infix("!=");
        default:
          TR_CHECK(false, std::string("bool ") + binary_op_name(op->op) + " in CUDA codegen");
      }
    }
    switch (op->op) {
      case BinaryOp::Add:
        return call("tr_add");
      case BinaryOp::Sub:
        return call("tr_sub");
      case BinaryOp::Mul:
        return call("tr_mul");
      case BinaryOp::Div:
        return call("tr_div");
      case BinaryOp::Mod:
        return call("tr_mod");
      case BinaryOp::Min:
        return call("tr_min");
      case BinaryOp::Max:
        return call("tr_max");
      case BinaryOp::And:
        return narrow(t, infix("&"));
      case BinaryOp::Or:
        return narrow(t, infix("|"));
      case BinaryOp::Xor:
        return narrow(t, infix("^"));
      case BinaryOp::Shl:
        return call("tr_shl");
      case BinaryOp::ShrL:
        return call("tr_shrl");
      case BinaryOp::ShrA:
        return call("tr_shra");
      default:
        break;
    }
    TR_CHECK(false, std::string("binary ") + binary_op_name(op->op) + " in CUDA codegen");
  }

  std::string select(const Select* op) {
    std::string c = expr(op->cond);
    if (!needs_lazy(op->true_value) && !needs_lazy(op->false_value)) {
      std::string t = expr(op->true_value), f = expr(op->false_value);
      return "(" + c + " ? " + t + " : " + f + ")";
    }
    // An arm's lets read memory: evaluate only the chosen arm, as the ternary would.
    std::string r = fresh("sel");
    line(std::string(c_type(op->type)) + " " + r + ";");
    line("if (" + c + ") {");
    ++indent_;
    std::string t = expr(op->true_value);
    line(r + " = " + t + ";");
    --indent_;
    line("} else {");
    ++indent_;
    std::string f = expr(op->false_value);
    line(r + " = " + f + ";");
    --indent_;
    line("}");
    return r;
  }

  std::string cast(const Cast* op) {
    std::string v = expr(op->value);
    Type from = op->value.type(), to = op->type;
    if (from == to) return v;
    if (to == Type::F32) {
      if (from == Type::Bool) return "(" + v + " ? 1.0f : 0.0f)";
      if (from == Type::I64) return "__ll2float_rn(" + v + ")";
      return "__int2float_rn((int)" + v + ")";  // i8/i16 widen exactly first
    }
    if (from == Type::F32) {
      switch (to) {
        case Type::I8:
          return "tr_f32_to_i8(" + v + ")";
        case Type::I16:
          return "tr_f32_to_i16(" + v + ")";
        case Type::I32:
          return "tr_f32_to_i32(" + v + ")";
        case Type::I64:
          return "tr_f32_to_i64(" + v + ")";
        default:
          break;
      }
      TR_CHECK(false, "cast from f32 to bool");
    }
    // Between ints (and from bool): sign-extend, truncate, or zero-extend a bool.
    return "((" + std::string(c_type(to)) + ")" + v + ")";
  }

  // ---- Statements.

  void stmt(const Stmt& s) {
    switch (s->kind) {
      case StmtKind::Seq:
        for (const Stmt& c : s.as<Seq>()->stmts) stmt(c);
        return;
      case StmtKind::LetStmt: {
        const LetStmt* op = s.as<LetStmt>();
        std::string v = expr(op->value);
        std::string c = fresh(op->name);
        line("const " + std::string(c_type(op->value.type())) + " " + c + " = " + v + ";");
        bind(op->name, c);
        stmt(op->body);
        unbind();
        return;
      }
      case StmtKind::For: {
        const For* op = s.as<For>();
        std::string v = fresh(op->var);
        std::string mn = expr(op->min);
        int64_t min_value;
        std::string end = const_int(op->min, &min_value) && min_value == 0
                              ? expr(op->extent)
                              : "tr_add(" + mn + ", " + expr(op->extent) + ")";
        // Bounds are evaluated once; one that reads memory the body may write is pinned first.
        if (contains_load(op->min) || contains_load(op->extent)) {
          std::string e = fresh(op->var + "_end");
          line("const long long " + e + " = " + end + ";");
          end = e;
        }
        // A lane loop: unrolled, so the lanes' local arrays live in registers.
        if (op->vectorized) line("#pragma unroll");
        line("for (long long " + v + " = " + mn + "; " + v + " < " + end + "; ++" + v + ") {");
        bind(op->var, v);
        ++indent_;
        stmt(op->body);
        --indent_;
        unbind();
        line("}");
        return;
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* op = s.as<IfThenElse>();
        line("if (" + expr(op->cond) + ") {");
        ++indent_;
        stmt(op->then_case);
        --indent_;
        if (op->else_case.defined()) {
          line("} else {");
          ++indent_;
          stmt(op->else_case);
          --indent_;
        }
        line("}");
        return;
      }
      case StmtKind::Store: {
        const Store* op = s.as<Store>();
        TR_CHECK(op->indices.size() == 1,
                 "multi-dimensional store to '" + op->buffer + "' in CUDA codegen");
        std::string i = expr(op->indices[0]);
        std::string v = expr(op->value);
        line(buffer(op->buffer) + "[" + i + "] = " + v + ";");
        return;
      }
      case StmtKind::Assign: {
        const Assign* op = s.as<Assign>();
        std::string v = expr(op->value);
        line(lookup(op->name) + " = " + v + ";");
        return;
      }
      case StmtKind::Barrier:
        line("__syncthreads();");
        return;
      case StmtKind::WarpShuffle: {
        // The whole warp (or the whole block when it is smaller) takes part: block-uniform.
        const WarpShuffle* op = s.as<WarpShuffle>();
        const int threads = k_.sig.threads;
        const std::string mask =
            threads >= 32 ? "0xffffffffu" : std::to_string((1u << threads) - 1u) + "u";
        line(buffer(op->dst) + "[0] = __shfl_xor_sync(" + mask + ", " + buffer(op->src) + "[0], " +
             std::to_string(op->lane_xor) + ");");
        return;
      }
      case StmtKind::VectorMove: {
        // One 2-, 4-, 8- or 16-byte transaction (ld/st.global.v*): the global side's index is
        // proved a multiple of the lanes, buffers are 16-byte aligned, local arrays __align__(16).
        const VectorMove* op = s.as<VectorMove>();
        const SimtArray* local = &vector_move_local(k_, *op);
        const int64_t bytes = dtype_bytes(local->dtype, op->lanes);
        const char* vt = bytes == 16  ? "uint4"
                         : bytes == 8 ? "uint2"
                         : bytes == 4 ? "unsigned int"
                                      : "unsigned short";
        TR_CHECK(bytes == 16 || bytes == 8 || bytes == 4 || bytes == 2, "vector move size");
        std::string d = "&" + buffer(op->dst) + "[" + expr(op->dst_index) + "]";
        std::string src = "&" + buffer(op->src) + "[" + expr(op->src_index) + "]";
        if (find_shared(k_, op->src)) {
          // From shared memory as an explicit ld.shared.v*: written as a generic-pointer load,
          // NVRTC gave two different cubins for one source in one process (a reserved-smem
          // alias appeared in only one), and the same source must give the same bytes.
          const int words = static_cast<int>(bytes / 4);
          TR_CHECK(bytes >= 4, "shared vector move of fewer than 4 bytes");
          const char* fields[] = {".x", ".y", ".z", ".w"};
          std::string regs, outs;
          for (int w = 0; w < words; ++w) {
            regs += (w ? ", %" : "%") + std::to_string(w);
            outs += std::string(w ? ", " : "") + "\"=r\"(tr_v" + (words > 1 ? fields[w] : "") + ")";
          }
          line("{");
          line("  " + std::string(vt) + " tr_v;");
          line("  asm volatile(\"ld.shared" +
               std::string(words > 1 ? ".v" + std::to_string(words) : "") + ".u32 {" + regs +
               "}, [%" + std::to_string(words) + "];\" : " + outs +
               " : \"r\"((unsigned)__cvta_generic_to_shared(" + src + ")));");
          line("  *reinterpret_cast<" + std::string(vt) + "*>(" + d + ") = tr_v;");
          line("}");
          return;
        }
        line("*reinterpret_cast<" + std::string(vt) + "*>(" + d + ") = *reinterpret_cast<const " +
             vt + "*>(" + src + ");");
        return;
      }
      default:
        TR_CHECK(false, "statement not valid in SIMT IR: " + to_string(s));
    }
  }

  const SimtKernel& k_;
  std::ostringstream out_;
  int indent_ = 0;
  std::set<std::string> taken_;                             // C names in use, function-wide
  std::vector<std::pair<std::string, std::string>> scope_;  // IR name → C name, innermost last
  std::map<std::string, std::string> buffers_;              // IR buffer → C array/pointer
  std::map<const ExprNode*, Traits> traits_;
};

size_t param_size(Type t) { return t == Type::F32 || t == Type::I32 ? 4 : 8; }

}  // namespace

std::string cuda_kernel_symbol(const std::string& kernel_name) {
  std::string body;
  bool changed = kernel_name.empty();
  for (unsigned char c : kernel_name) {
    bool keep = is_alnum_ascii(c) || c == '_';
    body += keep ? static_cast<char>(c) : '_';
    changed = changed || !keep;
  }
  std::string symbol = "tilerun_" + body;
  if (changed) symbol += "_" + sha256_hex(kernel_name).substr(0, 8);
  return symbol;
}

std::string emit_cuda(const SimtKernel& kernel) {
  // The pipeline already expanded strict math; running the same pass again costs little and
  // guarantees that no math call reaches the backend except IEEE fma and sqrt.
  SimtKernel k = expand_strict_math(kernel);
  verify_simt(k, SimtForm::Complete);
  return CudaEmitter(k).run();
}

CudaBinary compile_cuda(const SimtKernel& kernel, const std::string& cache_dir) {
  CudaBinary out;
  out.name = cuda_kernel_symbol(kernel.sig.name);
  out.source = emit_cuda(kernel);
  CubinResult r = compile_cubin(kernel.sig.name, out.source, strict_nvrtc_options(), cache_dir);
  out.cubin = std::move(r.cubin);
  out.from_cache = r.from_cache;
  out.compile_ms = r.compile_ms;
  return out;
}

CudaBinary compile_cuda(const Kernel& kernel, const std::string& cache_dir) {
  return compile_cuda(lower(kernel), cache_dir);
}

CudaParams pack_cuda_params(const KernelSignature& sig, const KernelArgs& args) {
  auto fail = [&](const std::string& msg) {
    throw Error("kernel '" + sig.name + "': " + msg, ErrorKind::Runtime);
  };
  auto count = [&](size_t got, size_t want, const char* what) {
    if (got != want)
      fail("launched with " + std::to_string(got) + " " + what + ", expected " +
           std::to_string(want));
  };
  count(args.buffers.size(), sig.buffers.size(), "buffers");
  count(args.dims.size(), sig.dims.size(), "dims");
  count(args.scalars.size(), sig.scalars.size(), "scalars");
  check_dims(sig, args.dims);

  CudaParams p;
  size_t offset = 0;
  auto place = [&](const std::string& name, size_t size) {
    offset = (offset + size - 1) / size * size;
    p.slots_.push_back({name, offset, size});
    offset += size;
  };
  for (const BufferParam& b : sig.buffers) place(b.name, 8);
  for (const DimParam& d : sig.dims) place(d.name, 8);
  for (const ScalarParam& s : sig.scalars) place(s.name, param_size(s.type));
  p.size_ = offset;
  p.storage_ = std::make_unique<std::byte[]>(std::max<size_t>(offset, 8));  // new[]: 16-aligned

  size_t slot = 0;
  auto put = [&](const void* value) {
    const CudaParams::Slot& s = p.slots_[slot++];
    std::memcpy(p.storage_.get() + s.offset, value, s.size);
  };
  for (size_t i = 0; i < sig.buffers.size(); ++i) {
    const BufferParam& b = sig.buffers[i];
    uint64_t address = reinterpret_cast<uintptr_t>(args.buffers[i]);
    if (address == 0) fail("buffer '" + b.name + "' is null");
    uint64_t align = static_cast<uint64_t>(std::max<int64_t>(dtype_bytes(b.dtype, 1), 1));
    if (address % align != 0)
      fail("buffer '" + b.name + "' at 0x" +
           [&] {
             char buf[32];
             std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(address));
             return std::string(buf);
           }() +
           " is not aligned to its " + std::to_string(align) + "-byte elements");
    put(&address);
  }
  for (size_t i = 0; i < sig.dims.size(); ++i) put(&args.dims[i]);
  for (size_t i = 0; i < sig.scalars.size(); ++i) {
    const ScalarParam& s = sig.scalars[i];
    double d = args.scalars[i];
    if (s.type == Type::F32) {
      float f = static_cast<float>(d);  // round to nearest even, as the CPU backend's fptrunc
      put(&f);
      continue;
    }
    const double limit = s.type == Type::I32 ? 2147483648.0 : 9223372036854775808.0;
    if (!(d == std::trunc(d) && d >= -limit && d < limit))
      fail("scalar '" + s.name + "' = " + std::to_string(d) + " is not a whole " +
           type_name(s.type) + " value");
    if (s.type == Type::I32) {
      int32_t v = static_cast<int32_t>(d);
      put(&v);
    } else {
      int64_t v = static_cast<int64_t>(d);
      put(&v);
    }
  }
  for (const CudaParams::Slot& s : p.slots_) p.pointers_.push_back(p.storage_.get() + s.offset);
  return p;
}

}  // namespace tilerun::compiler
