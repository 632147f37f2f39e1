#include "kernels/kernel_cache.h"

namespace tilerun::kernels {

KernelCache::KernelPtr KernelCache::get(const std::string& key,
                                        const std::function<compiler::Kernel()>& build) {
  std::lock_guard<std::mutex> lock(mu_);
  KernelPtr& k = kernels_[key];
  if (!k) k = std::make_shared<const compiler::Kernel>(build());
  return k;
}

}  // namespace tilerun::kernels
