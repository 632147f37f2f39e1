#include "compiler/transforms/expand_strict_math.h"

#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"
#include "compiler/transforms/strict_math.h"

namespace tilerun::compiler {
namespace {

class StrictMathExpander : public IRMutator {
 public:
  explicit StrictMathExpander(NameGen* names) : names_(names) {}

 protected:
  Expr mutate_expr(const Call* op, const Expr& self) override {
    Expr e = IRMutator::mutate_expr(op, self);
    const Call* c = e.as<Call>();
    switch (c->op) {
      case CallOp::Exp:
        return strict_exp(c->args[0], names_->fresh("exp"));
      case CallOp::Log:
        return strict_log(c->args[0], names_->fresh("log"));
      case CallOp::Tanh:
        return strict_tanh(c->args[0], names_->fresh("tanh"));
      case CallOp::Sigmoid:
        return strict_sigmoid(c->args[0], names_->fresh("sigmoid"));
      case CallOp::Rsqrt:
        return strict_rsqrt(c->args[0], names_->fresh("rsqrt"));
      case CallOp::Sin:
        return strict_sin(c->args[0], names_->fresh("sin"));
      case CallOp::Cos:
        return strict_cos(c->args[0], names_->fresh("cos"));
      case CallOp::Erf:
        return strict_erf(c->args[0], names_->fresh("erf"));
      case CallOp::Fma:
      case CallOp::Sqrt:
      case CallOp::Bf16Bits:
        return e;
    }
    return e;
  }

  Expr mutate_expr(const Binary* op, const Expr& self) override {
    Expr e = IRMutator::mutate_expr(op, self);
    const Binary* b = e.as<Binary>();
    if (b->a.type() != Type::F32) return e;
    if (b->op == BinaryOp::Min) return strict_min(b->a, b->b, names_->fresh("min"));
    if (b->op == BinaryOp::Max) return strict_max(b->a, b->b, names_->fresh("max"));
    return e;
  }

 private:
  NameGen* names_;
};

}  // namespace

SimtKernel expand_strict_math(const SimtKernel& kernel) {
  NameGen names(kernel);
  SimtKernel out = kernel;
  out.body = StrictMathExpander(&names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
