#include "compiler/base/check.h"

#include <cstdio>
#include <cstdlib>

namespace tilerun::compiler {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: internal error: check '%s' failed: %s\n", file, line, cond,
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace tilerun::compiler
