// libFuzzer target: the textual Tile IR / SIMT IR parser (compiler/ir/ir_parser.h). Any text
// must parse or throw tilerun::Error; what parses must print and parse back to the same text
// (the parser is the printer's inverse).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compiler/ir/ir_parser.h"
#include "compiler/ir/ir_printer.h"
#include "tilerun/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace tilerun::compiler;
  try {
    std::string printed;
    if (is_simt_text(text)) {
      printed = print(parse_simt_kernel(text, "fuzz.sir"));
      if (print(parse_simt_kernel(printed, "printed.sir")) != printed) std::abort();
    } else {
      printed = print(parse_tile_kernel(text, "fuzz.tir"));
      if (print(parse_tile_kernel(printed, "printed.tir")) != printed) std::abort();
    }
  } catch (const tilerun::Error&) {
  }
  return 0;
}
