// Internal invariant checks: a failed TR_CHECK is a bug in tilerun, never a user mistake
// (those throw tilerun::Error). It prints file:line and the message, then aborts.
#pragma once

#include <string>

namespace tilerun::compiler {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace tilerun::compiler

#define TR_CHECK(cond, msg)                                                           \
  do {                                                                                \
    if (!(cond)) ::tilerun::compiler::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
