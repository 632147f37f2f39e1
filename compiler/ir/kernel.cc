#include "compiler/ir/kernel.h"

#include <algorithm>

#include "compiler/base/check.h"
#include "compiler/ir/ir_visitor.h"

namespace tilerun::compiler {

const char* mem_scope_name(MemScope s) { return s == MemScope::Shared ? "shared" : "fragment"; }

int64_t stack_tile_elems(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

bool tiles_whole_swizzle_periods(const std::vector<int64_t>& shape, const Swizzle& sw) {
  return sw.none() || stack_tile_elems(shape) % (int64_t{1} << (sw.bits + sw.base + sw.shift)) == 0;
}

int64_t SimtArray::size() const {
  if (layout.rank() > 0) return layout.cosize();  // a padded or swizzled tile's whole footprint
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

namespace {
template <class T>
const T* find_named(const std::vector<T>& v, const std::string& name) {
  for (const T& x : v)
    if (x.name == name) return &x;
  return nullptr;
}
}  // namespace

const BufferParam* find_buffer(const KernelSignature& sig, const std::string& name) {
  return find_named(sig.buffers, name);
}
const TileAlloc* find_alloc(const Kernel& k, const std::string& name) {
  return find_named(k.allocs, name);
}

std::set<std::string> accumulator_fragments(const Kernel& k) {
  struct Touches : IRVisitor {
    const Kernel* k = nullptr;
    std::set<std::string> acc;
    std::vector<std::set<std::string>> parallels;  // the fragments each Parallel touches
    void visit_stmt(const Gemm* op) override { acc.insert(op->c); }
    void visit_stmt(const Parallel* op) override {
      parallels.emplace_back();
      IRVisitor::visit_stmt(op);
    }
    void visit_expr(const Load* op) override {
      note(op->buffer);
      IRVisitor::visit_expr(op);
    }
    void visit_stmt(const Store* op) override {
      note(op->buffer);
      IRVisitor::visit_stmt(op);
    }
    void note(const std::string& b) {
      const TileAlloc* a = find_alloc(*k, b);
      if (!parallels.empty() && a && a->scope == MemScope::Fragment) parallels.back().insert(b);
    }
  } t;
  t.k = &k;
  t.visit(k.body);
  std::set<std::string> out = t.acc;
  for (bool grew = !out.empty(); grew;) {
    grew = false;
    for (const std::set<std::string>& fs : t.parallels) {
      if (std::none_of(fs.begin(), fs.end(), [&](const std::string& f) { return out.count(f); }))
        continue;
      for (const std::string& f : fs) grew = out.insert(f).second || grew;
    }
  }
  return out;
}
const SimtArray* find_shared(const SimtKernel& k, const std::string& name) {
  return find_named(k.shared, name);
}
const SimtArray* find_local_array(const SimtKernel& k, const std::string& name) {
  return find_named(k.local_arrays, name);
}

const SimtArray& vector_move_local(const SimtKernel& k, const VectorMove& move) {
  const SimtArray* local = find_local_array(k, move.dst);
  if (!local) local = find_local_array(k, move.src);
  TR_CHECK(local != nullptr, "vector move without a local array");
  return *local;
}

}  // namespace tilerun::compiler
