#include "compiler/ir/names.h"

#include "compiler/ir/ir_visitor.h"

namespace tilerun::compiler {
namespace {
class NameCollector : public IRVisitor {
 public:
  explicit NameCollector(std::set<std::string>* names) : names_(names) {}

 protected:
  void visit_expr(const Var* op) override { names_->insert(op->name); }
  void visit_expr(const Let* op) override {
    names_->insert(op->name);
    IRVisitor::visit_expr(op);
  }
  void visit_stmt(const LetStmt* op) override {
    names_->insert(op->name);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const For* op) override {
    names_->insert(op->var);
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const Parallel* op) override {
    names_->insert(op->vars.begin(), op->vars.end());
    IRVisitor::visit_stmt(op);
  }
  void visit_stmt(const Reduce* op) override {
    names_->insert(op->name);
    names_->insert(op->var);
    IRVisitor::visit_stmt(op);
  }

 private:
  std::set<std::string>* names_;
};
}  // namespace

void NameGen::add_signature(const KernelSignature& sig) {
  for (const DimParam& d : sig.dims) taken_.insert(d.name);
  for (const BufferParam& b : sig.buffers) taken_.insert(b.name);
  for (const ScalarParam& s : sig.scalars) taken_.insert(s.name);
}

void NameGen::add_body(const Stmt& body) {
  if (!body.defined()) return;
  NameCollector c(&taken_);
  c.visit(body);
}

NameGen::NameGen(const Kernel& k) {
  add_signature(k.sig);
  for (const TileAlloc& a : k.allocs) taken_.insert(a.name);
  add_body(k.body);
}

NameGen::NameGen(const SimtKernel& k) {
  add_signature(k.sig);
  for (const SimtArray& a : k.shared) taken_.insert(a.name);
  for (const SimtArray& a : k.local_arrays) taken_.insert(a.name);
  for (const SimtLocal& l : k.locals) taken_.insert(l.name);
  add_body(k.body);
}

std::string NameGen::fresh(const std::string& base) {
  for (int n = 0;; ++n) {
    std::string name = base + "." + std::to_string(n);
    if (taken_.insert(name).second) return name;
  }
}

}  // namespace tilerun::compiler
