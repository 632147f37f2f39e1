#include "compiler/codegen/tma_model.h"

#include <cstring>
#include <vector>

#include "compiler/ir/layout.h"

namespace tilerun::compiler {

extern "C" void tilerun_cpu_tma_copy(void* dst, const void* src, const int64_t* desc) {
  const int64_t bytes = desc[0], rank = desc[1];
  const Swizzle swizzle{static_cast<int>(desc[2]), static_cast<int>(desc[3]),
                        static_cast<int>(desc[4])};
  const int64_t* dims = desc + kTmaDescHeader;
  const int64_t* box = dims + rank;
  const int64_t* coords = box + rank;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) count *= box[d];
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);  // the box position, outermost first
  for (int64_t i = 0; i < count; ++i) {
    bool inside = true;
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t c = coords[d] + at[static_cast<size_t>(d)];
      inside = inside && c >= 0 && c < dims[d];
      offset = offset * dims[d] + c;
    }
    unsigned char* to = out + swizzle(i) * bytes;
    if (inside)
      std::memcpy(to, in + offset * bytes, static_cast<size_t>(bytes));
    else
      std::memset(to, 0, static_cast<size_t>(bytes));
    for (int64_t d = rank - 1; d >= 0; --d) {  // the next position, innermost fastest
      if (++at[static_cast<size_t>(d)] < box[d]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace tilerun::compiler
