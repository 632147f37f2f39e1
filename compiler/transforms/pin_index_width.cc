#include "compiler/transforms/pin_index_width.h"

#include "compiler/analysis/index_width.h"

namespace tilerun::compiler {

SimtKernel pin_index_width(const SimtKernel& kernel,
                           const std::map<std::string, int64_t>& concrete) {
  if (kernel.sig.dims.empty() || index_width(kernel).fits_32) return kernel;
  SimtKernel pinned = kernel;
  for (DimParam& d : pinned.sig.dims) {
    auto it = concrete.find(d.name);
    if (it == concrete.end()) return kernel;
    const int64_t v = it->second;
    // A value the declared bounds refuse stays the launch check's to report.
    if (v < d.bounds.min || v > d.bounds.max || v % d.bounds.divisible_by != 0) return kernel;
    d.bounds = {v, v, 1};
  }
  return index_width(pinned).fits_32 ? pinned : kernel;
}

}  // namespace tilerun::compiler
