#include "compiler/analysis/index_eval.h"

#include <algorithm>

#include "compiler/base/check.h"
#include "compiler/ir/ir_printer.h"

namespace tilerun::compiler {

int64_t eval_index(const Expr& e, const std::map<std::string, int64_t>& values) {
  if (const IntImm* imm = e.as<IntImm>()) return imm->value;
  if (const Var* v = e.as<Var>()) {
    auto it = values.find(v->name);
    TR_CHECK(it != values.end(), "no value for '" + v->name + "'");
    return it->second;
  }
  const Binary* op = e.as<Binary>();
  TR_CHECK(op && is_int(e.type()), "not a host-evaluable index expression: " + to_string(e));
  int64_t a = eval_index(op->a, values), b = eval_index(op->b, values);
  switch (op->op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
    case BinaryOp::Mod: {
      TR_CHECK(b != 0, "division by zero in " + to_string(e));
      int64_t q = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --q;
      return op->op == BinaryOp::Div ? q : a - q * b;
    }
    case BinaryOp::Min:
      return std::min(a, b);
    case BinaryOp::Max:
      return std::max(a, b);
    default:
      TR_CHECK(false, "not a host-evaluable index expression: " + to_string(e));
  }
}

}  // namespace tilerun::compiler
