// The last-tile guard of the vector kernels: a kept guard inside a parallel keeps the index
// analysis from proving its accesses vectorizable, so a kernel runs its tile twice in one branch,
// unguarded where the whole tile lies inside the tensor and guarded for the last, partial one.
#pragma once

#include <functional>

#include "compiler/ir/builder.h"

namespace tilerun::kernels {

// body(false) where `whole` holds (block-uniform), body(true) elsewhere.
inline void whole_or_guarded(compiler::Scope& s, const compiler::Val& whole,
                             const std::function<void(bool)>& body) {
  s.if_then_else(
      whole, [&] { body(false); }, [&] { body(true); });
}

// body() under `inside` when `guarded`, plainly otherwise (inside a whole_or_guarded body).
inline void guard_if(compiler::Scope& s, bool guarded, const compiler::Val& inside,
                     const std::function<void()>& body) {
  if (guarded)
    s.if_then(inside, body);
  else
    body();
}

}  // namespace tilerun::kernels
