// How IR types, names and literals are spelled in CUDA C++: the CUDA emitter's vocabulary, kept
// apart so the emitter reads as a walk over the IR.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/ir/ir.h"

namespace tilerun::compiler::cuda {

// The C type of an IR scalar type ("float", "long long", ...).
const char* c_type(Type t);
bool is_alnum_ascii(unsigned char c);
// Any text → an identifier that no user text can turn into a keyword, a builtin or one of the
// prelude's names (tr_*): other characters become '_', a leading digit or '_' gets a 'v'.
std::string sanitize(const std::string& name);
// Text for a // comment: printable ASCII except '\' (a line splice) and '%' (the escape),
// anything else as %HH.
std::string comment_safe(const std::string& text);
// An integer constant of type `t`, spelled so that C's promotions give exactly that type.
std::string int_literal(Type t, int64_t v);
// Normal numbers and zeros in decimal with 9 significant digits (round-trips through the
// compiler's correctly rounded conversion); inf, NaN and subnormals as their exact bits.
std::string float_literal(float v);
bool is_small_int(Type t);
// C promotes char/short operands to int: cast such results back to the IR's type.
std::string narrow(Type t, const std::string& text);

}  // namespace tilerun::compiler::cuda
