// libFuzzer target: the command-line parser (tools/cli_options.h). The input is split at NUL
// bytes into arguments; parsing must give Options or throw tilerun::Error (a usage error).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tilerun/error.h"
#include "tools/cli_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  try {
    tilerun::cli::Options o = tilerun::cli::parse_args(args);
    (void)o;
  } catch (const tilerun::Error&) {
  }
  return 0;
}
