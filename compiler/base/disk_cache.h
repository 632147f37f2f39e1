// Content-addressed, sealed entries on disk: the cubin cache (codegen/nvrtc.h), the CPU backend's
// object-code cache (codegen/cpu_backend.h) and the Z3 verdicts (analysis/index_solver.h) share it.
// An entry is a short text header, then the payload:
//   <magic>\n key <sha256 of the key>\n size <bytes>\n sha256 <of the payload>\n\n <payload>
// The header names the key the entry answers (a file copied or renamed onto another entry's path
// is caught) and the payload's length and digest (a flipped bit or a cut file is caught): a
// damaged entry is never used. Entries are written by atomic rename, so concurrent processes
// see either no file or a whole one.
#pragma once

#include <optional>
#include <string>

namespace tilerun::compiler {

// "$TILERUN_CACHE_DIR", else "$HOME/.cache/tilerun", else "" (no cache).
std::string default_cache_dir();

class DiskCache {
 public:
  // Entries live in `dir`/`folder`/<2 hex>/<digest>.entry; `magic` is the header's first line
  // and `what` names the payload in messages ("cubin"). An empty `dir` disables the cache.
  DiskCache(std::string dir, std::string folder, std::string magic, std::string what);

  bool enabled() const { return !dir_.empty(); }
  // The file that holds (or would hold) the entry for `digest`.
  std::string path(const std::string& digest) const;
  // The payload stored under `digest`, or nothing. A damaged entry is reported once on stderr
  // (naming `kernel`), removed, and answered as a miss.
  std::optional<std::string> load(const std::string& digest, const std::string& kernel) const;
  // Stores `payload` under `digest`; a failure to write is not an error (nothing is cached).
  void store(const std::string& digest, const std::string& payload) const;

 private:
  std::string dir_, folder_, magic_, what_;
};

}  // namespace tilerun::compiler
