// A helper process for CubinCache.ConcurrentProcessesWritingOneEntryStayWhole: removes and
// compiles one cache entry over and over, alongside copies of itself.
//
//   nvrtc_cache_writer CACHE_DIR SALT
//
// Exit 0 when every compile gave the same cubin; the parent counts cache warnings in its stderr
// (a warning means a reader saw a partial or foreign file).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cache_test_kernel.h"
#include "compiler/codegen/nvrtc.h"

int main(int argc, char** argv) {
  using namespace tilerun::compiler;
  if (argc != 3) return 2;
  const std::string dir = argv[1];
  const std::string source =
      cache_test_kernel("cache_processes", std::strtoul(argv[2], nullptr, 10));
  std::string first;
  for (int i = 0; i < 4; ++i) {
    std::error_code ec;
    if (i % 2 == 1)
      std::filesystem::remove(cubin_cache_path(dir, source, strict_nvrtc_options()), ec);
    CubinResult r = compile_cubin("cache_processes", source, strict_nvrtc_options(), dir);
    if (first.empty()) first = r.cubin;
    if (r.cubin != first || r.cubin.empty()) {
      std::fprintf(stderr, "iteration %d: a different cubin\n", i);
      return 1;
    }
  }
  return 0;
}
