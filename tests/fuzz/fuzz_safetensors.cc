// libFuzzer target: the .safetensors reader. The bytes are handed over as a file (an anonymous
// memory file, so no disk traffic); any input must either load or throw tilerun::Error.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "tilerun/error.h"
#include "tilerun/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.safetensors", 0);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    std::abort();
  try {
    std::map<std::string, std::string> metadata;
    tilerun::TensorMap tensors =
        tilerun::read_safetensors("/proc/self/fd/" + std::to_string(fd), &metadata);
    for (const auto& [name, t] : tensors) (void)t.numel();
  } catch (const tilerun::Error&) {
  }
  return 0;
}
