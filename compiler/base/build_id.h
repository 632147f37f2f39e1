// The GNU build id of the binary this code is linked into (libtilerun.so, or an executable that
// links the compiler statically): a digest of its contents, so any change to the compiler's code
// changes it. Caches of what the compiler computes from unchanged inputs (lower_cache.h) key by it.
#pragma once

#include <string>

namespace tilerun::compiler {

// Lowercase hex of the NT_GNU_BUILD_ID note, or "" when the binary has none (then nothing that
// keys by it is cached).
const std::string& library_build_id();

}  // namespace tilerun::compiler
