// Fresh names for compiler-made variables and buffers. Seeded with every name a kernel already
// uses, so a pass never captures or shadows one; names come out in a deterministic order.
#pragma once

#include <set>
#include <string>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

class NameGen {
 public:
  explicit NameGen(const Kernel& k);
  explicit NameGen(const SimtKernel& k);
  // `base.N` with the smallest N not yet taken.
  std::string fresh(const std::string& base);

 private:
  void add_signature(const KernelSignature& sig);
  void add_body(const Stmt& body);
  std::set<std::string> taken_;
};

}  // namespace tilerun::compiler
