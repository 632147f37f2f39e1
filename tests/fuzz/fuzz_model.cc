// libFuzzer target: the model loader (YAML → checked Model). Any input must either parse or
// throw tilerun::Error; anything else (a crash, another exception, a sanitizer report, a hang)
// is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tilerun/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tilerun::Model model = tilerun::parse_model(text, "fuzz.yaml");
    (void)tilerun::model_summary(model);
  } catch (const tilerun::Error&) {
  }
  return 0;
}
