// The tile kernels of one op family, built on first use and then shared: expansions return the
// same Kernel object for the same program, so graph/expand compiles each distinct kernel once.
// Built lazily (not at registration) so that reading schemas never runs the tile builder.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "compiler/ir/kernel.h"

namespace tilerun::kernels {

class KernelCache {
 public:
  using KernelPtr = std::shared_ptr<const compiler::Kernel>;
  // The kernel stored under `key` (e.g. "silu.f32"), built by `build` the first time. Thread-safe.
  KernelPtr get(const std::string& key, const std::function<compiler::Kernel()>& build);

 private:
  std::mutex mu_;
  std::map<std::string, KernelPtr> kernels_;
};

}  // namespace tilerun::kernels
