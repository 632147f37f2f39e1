// SHA-256, for content-addressed caches (kernel binaries keyed by source, options and versions)
// and for stable identities in dumps.
#pragma once

#include <string>
#include <string_view>

namespace tilerun::compiler {

// The digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

}  // namespace tilerun::compiler
