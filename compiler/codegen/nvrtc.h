// CUDA C++ → cubin through NVRTC, behind a content-addressed on-disk cache. Needs no GPU: CI
// compiles every kernel of the shipped configs this way.
#pragma once

#include <string>
#include <vector>

#include "compiler/base/disk_cache.h"  // default_cache_dir

namespace tilerun::compiler {

struct CubinResult {
  std::string cubin;  // the binary image for cuModuleLoadData
  bool from_cache = false;
  double compile_ms = 0;  // NVRTC time (0 when from the cache)
  std::string log;        // NVRTC's log of a successful compile (ptxas' remarks); "" from the cache
};

// The options every kernel is compiled with: sm_90a, strict numerics (no FMA contraction,
// IEEE division and square root, denormals kept).
std::vector<std::string> strict_nvrtc_options();

// The file under `cache_dir` that caches (source, options), whether or not it exists yet.
std::string cubin_cache_path(const std::string& cache_dir, const std::string& source,
                             const std::vector<std::string>& options);
// "MAJOR.MINOR" of the NVRTC library in use.
std::string nvrtc_version();

// Compiles `source` (self-contained, no #include) named `name` (for messages). With a non-empty
// `cache_dir`, the cubin is looked up and stored under the SHA-256 of (source, options, NVRTC
// version), written by atomic rename so that concurrent processes are safe. Each entry carries
// the key it answers and its cubin's length and SHA-256, checked on every load: an entry that
// fails (damaged, cut, empty, another key's) is reported once on stderr, removed and compiled
// again, never loaded. Throws tilerun::Error (kind Runtime) with the kernel's name and NVRTC's
// log on failure.
CubinResult compile_cubin(const std::string& name, const std::string& source,
                          const std::vector<std::string>& options, const std::string& cache_dir);

}  // namespace tilerun::compiler
