#include "compiler/codegen/cuda_syntax.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "compiler/base/check.h"

namespace tilerun::compiler::cuda {

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

}  // namespace tilerun::compiler::cuda
