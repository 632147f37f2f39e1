#include "compiler/analysis/launch_geometry.h"

#include <map>
#include <string>

#include "compiler/analysis/index_eval.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

[[noreturn]] void fail(const KernelSignature& sig, const std::string& msg) {
  throw Error("kernel '" + sig.name + "': " + msg, ErrorKind::Runtime);
}

}  // namespace

void check_dims(const KernelSignature& sig, const std::vector<int64_t>& dims) {
  if (dims.size() != sig.dims.size())
    fail(sig, "launched with " + std::to_string(dims.size()) + " dims, expected " +
                  std::to_string(sig.dims.size()));
  for (size_t i = 0; i < sig.dims.size(); ++i) {
    const DimParam& d = sig.dims[i];
    int64_t v = dims[i];
    if (v < d.bounds.min || v > d.bounds.max)
      fail(sig, "dim '" + d.name + "' = " + std::to_string(v) + " is outside its bounds [" +
                    std::to_string(d.bounds.min) + ", " + std::to_string(d.bounds.max) + "]");
    if (v % d.bounds.divisible_by != 0)
      fail(sig, "dim '" + d.name + "' = " + std::to_string(v) + " is not divisible by " +
                    std::to_string(d.bounds.divisible_by));
  }
}

LaunchGeometry launch_geometry(const KernelSignature& sig, const std::vector<int64_t>& dims) {
  check_dims(sig, dims);
  std::map<std::string, int64_t> values;
  for (size_t i = 0; i < sig.dims.size(); ++i) values[sig.dims[i].name] = dims[i];

  LaunchGeometry g;
  g.threads = sig.threads;
  static constexpr int64_t kLimit[3] = {(int64_t{1} << 31) - 1, 65535, 65535};
  static constexpr const char* kAxis[3] = {"x", "y", "z"};
  for (size_t i = 0; i < sig.grid.size() && i < 3; ++i) {
    int64_t n = eval_index(sig.grid[i], values);
    if (n < 0 || n > kLimit[i])
      fail(sig, std::string("grid ") + kAxis[i] + " = " + std::to_string(n) +
                    " blocks is outside CUDA's range [0, " + std::to_string(kLimit[i]) + "]");
    g.grid[i] = n;
  }
  return g;
}

}  // namespace tilerun::compiler
