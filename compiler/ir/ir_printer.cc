#include "compiler/ir/ir_printer.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "compiler/ir/ir_visitor.h"

namespace tilerun::compiler {
namespace {

std::string float_text(float v) {
  if (std::isnan(v)) return "f32(nan)";
  if (std::isinf(v)) return v > 0 ? "f32(inf)" : "f32(-inf)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return std::string(buf) + "f";
}

std::string join(const std::vector<Expr>& es) {
  std::string out;
  for (size_t i = 0; i < es.size(); ++i) out += (i ? ", " : "") + to_string(es[i]);
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out;
}

class Printer : public IRVisitor {
 public:
  std::ostringstream os;
  int indent = 0;
  int64_t k_threads_ = 0;  // the kernel's block size, when printing a whole kernel

 protected:
  void line_start() { os << std::string(indent * 2, ' '); }

  void visit_expr(const IntImm* op) override {
    if (op->type == Type::Bool) {
      os << (op->value ? "true" : "false");
    } else if (op->type == Type::I64) {
      os << op->value;
    } else {
      os << type_name(op->type) << "(" << op->value << ")";
    }
  }
  void visit_expr(const FloatImm* op) override { os << float_text(op->value); }
  void visit_expr(const Var* op) override { os << op->name; }
  void visit_expr(const Binary* op) override {
    if (op->op == BinaryOp::Min || op->op == BinaryOp::Max) {
      os << binary_op_name(op->op) << "(";
      visit(op->a);
      os << ", ";
      visit(op->b);
      os << ")";
      return;
    }
    os << "(";
    visit(op->a);
    os << " " << binary_op_name(op->op) << " ";
    visit(op->b);
    os << ")";
  }
  void visit_expr(const Unary* op) override {
    os << unary_op_name(op->op);
    // `-1f` is the literal; the negation of the literal 1f prints `-(1f)`, so that the parser
    // (ir_parser.h) can tell the two apart.
    const IntImm* i = op->a.as<IntImm>();
    bool bare_number = op->a.as<FloatImm>() || (i && i->type == Type::I64);
    if (bare_number) os << "(";
    visit(op->a);
    if (bare_number) os << ")";
  }
  void visit_expr(const Select* op) override {
    os << "select(";
    visit(op->cond);
    os << ", ";
    visit(op->true_value);
    os << ", ";
    visit(op->false_value);
    os << ")";
  }
  void visit_expr(const Cast* op) override {
    // `i32(5)` is the i32 constant; a cast of the i64 constant 5 prints `i32((5))`.
    const IntImm* i = op->value.as<IntImm>();
    bool literal = i && i->type == Type::I64 && is_int(op->type);
    os << type_name(op->type) << (literal ? "((" : "(");
    visit(op->value);
    os << (literal ? "))" : ")");
  }
  void visit_expr(const Bitcast* op) override {
    os << "bitcast<" << type_name(op->type) << ">(";
    visit(op->value);
    os << ")";
  }
  void visit_expr(const Call* op) override {
    os << call_op_name(op->op) << "(" << join(op->args) << ")";
  }
  void visit_expr(const Let* op) override {
    os << "(let " << op->name << " = ";
    visit(op->value);
    os << " in ";
    visit(op->body);
    os << ")";
  }
  void visit_expr(const Load* op) override { os << op->buffer << "[" << join(op->indices) << "]"; }

  void block(const Stmt& s) {
    os << " {\n";
    ++indent;
    visit(s);
    --indent;
    line_start();
    os << "}";
  }

  // A let's scope runs to the end of its block. One followed by more statements of its Seq ends
  // earlier, so its body is printed as a block of its own (`let x = v {...}`): the two shapes
  // differ for the verifier and the backends (a per-thread let may not live across a barrier),
  // and the parser (ir_parser.h) must tell them apart.
  // A let's scope runs to the end of its block. One followed by more statements of its Seq ends
  // earlier, so its body is printed as a block of its own (`let x = v {...}`): the two shapes
  // differ for the verifier and the backends (a per-thread let may not live across a barrier),
  // and the parser (ir_parser.h) must tell them apart.
  void visit_stmt(const Seq* op) override {
    for (size_t i = 0; i < op->stmts.size(); ++i) {
      const Stmt& s = op->stmts[i];
      bool more = i + 1 < op->stmts.size();
      if (const LetStmt* let = s.as<LetStmt>(); let && more) {
        let_header(let);
        block(let->body);
        os << "\n";
      } else if (const Reduce* red = s.as<Reduce>(); red && more) {
        reduce_header(red);
        block(red->body);
        os << "\n";
      } else {
        visit(s);
      }
    }
  }
  void let_header(const LetStmt* op) {
    line_start();
    os << "let " << op->name << " = " << to_string(op->value);
  }
  void visit_stmt(const LetStmt* op) override {
    let_header(op);
    os << "\n";
    visit(op->body);
  }
  void visit_stmt(const For* op) override {
    line_start();
    os << "for " << op->var << " in [" << to_string(op->min) << ", "
       << to_string(add(op->min, op->extent)) << ")" << (op->vectorized ? " vectorized" : "");
    block(op->body);
    os << "\n";
  }
  void visit_stmt(const Parallel* op) override {
    line_start();
    os << "parallel ";
    for (size_t i = 0; i < op->vars.size(); ++i)
      os << (i ? ", " : "") << op->vars[i] << " in [0, " << to_string(op->extents[i]) << ")";
    const ParallelLayout& l = op->layout;
    if (l.width > 0)
      os << " width " << l.width << (l.annotated ? " annotated" : "")
         << (l.vectorize ? " vectorize" : "");
    else if (l.annotated)
      os << " annotated";
    if (l.provable >= 0) os << " provable " << l.provable;
    // The thread-value layout only where it is not the default of its width (the text of every
    // kernel inference lays out stays as it was; a parser reads the absence as the default).
    if (l.tv.rank() > 0 &&
        !(l.width > 0 && k_threads_ > 0 && l.tv == thread_value_layout(k_threads_, l.width)))
      os << " layout " << to_string(l.tv);
    block(op->body);
    os << "\n";
  }
  void reduce_header(const Reduce* op) {
    line_start();
    os << "let " << op->name << " = reduce_" << reduce_op_name(op->op) << " " << op->var
       << " in [0, " << to_string(op->extent) << ") of " << to_string(op->value);
  }
  void visit_stmt(const Reduce* op) override {
    reduce_header(op);
    os << "\n";
    visit(op->body);
  }
  void visit_stmt(const IfThenElse* op) override {
    line_start();
    os << "if " << to_string(op->cond);
    block(op->then_case);
    if (op->else_case.defined()) {
      os << " else";
      block(op->else_case);
    }
    os << "\n";
  }
  void visit_stmt(const Store* op) override {
    line_start();
    os << op->buffer << "[" << join(op->indices) << "] = " << to_string(op->value) << "\n";
  }
  void visit_stmt(const Assign* op) override {
    line_start();
    os << op->name << " := " << to_string(op->value) << "\n";
  }
  void visit_stmt(const Copy* op) override {
    line_start();
    auto region = [](const Region& r) {
      std::string out = r.buffer + "[";
      for (size_t i = 0; i < r.extents.size(); ++i)
        out += (i ? ", " : "") + to_string(r.origin[i]) + " +: " + std::to_string(r.extents[i]);
      return out + "]";
    };
    os << (op->async ? "copy_async " : "copy ") << region(op->dst) << " <- " << region(op->src)
       << "\n";
  }
  void visit_stmt(const AsyncCopy* op) override {
    line_start();
    os << "async_copy " << op->dst << "[" << join(op->dst_indices) << "] <- " << op->src << "["
       << join(op->src_indices) << "] +: " << op->lanes << " valid " << to_string(op->valid)
       << "\n";
  }
  void visit_stmt(const AsyncCommit*) override {
    line_start();
    os << "async_commit\n";
  }
  void visit_stmt(const GemmWait* op) override {
    line_start();
    os << "gemm_wait " << op->pending << "\n";
  }
  void visit_stmt(const AsyncWait* op) override {
    line_start();
    os << "async_wait " << op->pending << "\n";
  }
  void visit_stmt(const TmaCopy* op) override {
    line_start();
    std::string box;
    for (size_t i = 0; i < op->box.size(); ++i) box += (i ? ", " : "") + std::to_string(op->box[i]);
    os << "tma_copy " << op->dst << "[" << join(op->dst_indices) << "] <- " << op->src << "["
       << join(op->src_indices) << "] box [" << box << "] on " << op->barrier << "["
       << to_string(op->barrier_index) << "]\n";
  }
  void visit_stmt(const MbarrierInit* op) override {
    line_start();
    if (op->invalidate)
      os << "mbarrier_inval " << op->barrier << "\n";
    else
      os << "mbarrier_init " << op->barrier << " count " << op->count << "\n";
  }
  void visit_stmt(const MbarrierWait* op) override {
    line_start();
    os << "mbarrier_wait " << op->barrier << "[" << to_string(op->index) << "] parity "
       << to_string(op->parity) << "\n";
  }
  void visit_stmt(const Barrier*) override {
    line_start();
    os << "barrier\n";
  }
  void visit_stmt(const WarpShuffle* op) override {
    line_start();
    os << op->dst << " = shuffle_xor(" << op->src << ", " << op->lane_xor << ")\n";
  }
  void visit_stmt(const WarpBallot* op) override {
    line_start();
    os << op->dst << " = ballot(" << op->src << ")\n";
  }
  void visit_stmt(const Gemm* op) override {
    line_start();
    os << "gemm " << op->c << " += " << op->a << (op->trans_a ? "^T" : "") << " * " << op->b
       << (op->trans_b ? "^T" : "") << " over [" << op->m << ", " << op->n << ", " << op->k << "]";
    if (op->stage.defined())
      os << (op->stage_a && op->stage_b ? " stage("
             : op->stage_a              ? " stage_a("
                                        : " stage_b(")
         << to_string(op->stage) << ")";
    if (op->pending) os << " pending " << op->pending;
    os << "\n";
  }
  void visit_stmt(const VectorMove* op) override {
    line_start();
    os << op->dst << "[" << to_string(op->dst_index) << " +: " << op->lanes << "] = " << op->src
       << "[" << to_string(op->src_index) << " +: " << op->lanes << "]  // vector\n";
  }
};

void print_signature(std::ostringstream& os, const KernelSignature& sig) {
  for (const DimParam& d : sig.dims) {
    os << "  dim " << d.name << " in [" << d.bounds.min << ", " << d.bounds.max << "]";
    if (d.bounds.divisible_by != 1) os << " divisible_by " << d.bounds.divisible_by;
    os << "\n";
  }
  for (const BufferParam& b : sig.buffers) {
    os << "  " << (b.is_output ? "output " : "input ") << b.name << ": " << dtype_name(b.dtype)
       << "[" << join(b.shape) << "]";
    if (b.values_below.defined()) os << " values in [0, " << to_string(b.values_below) << ")";
    if (b.values_distinct) os << " distinct";
    if (b.values_sorted) os << " sorted";
    os << "\n";
  }
  for (const ScalarParam& s : sig.scalars)
    os << "  scalar " << s.name << ": " << type_name(s.type) << "\n";
}

// ` layout L`, ` layout Sw<b,m,s> o L`, or nothing for a row-major unswizzled tile.
std::string layout_text(const Layout& l, const Swizzle& sw) {
  if (sw.none()) return l.rank() ? " layout " + to_string(l) : "";
  return " layout " + to_string(ComposedLayout{sw, l});
}

std::string body_text(const Stmt& body, int64_t threads) {
  if (!body.defined()) return "{\n<undefined>\n}\n";
  Printer p;
  p.indent = 1;
  p.k_threads_ = threads;
  p.visit(body);
  return "{\n" + p.os.str() + "}\n";
}

}  // namespace

std::string to_string(const Expr& e) {
  if (!e.defined()) return "<undefined>";
  Printer p;
  p.visit(e);
  return p.os.str();
}

std::string to_string(const Stmt& s, int indent) {
  if (!s.defined()) return "<undefined>\n";
  Printer p;
  p.indent = indent;
  p.visit(s);
  return p.os.str();
}

std::string print(const Kernel& k) {
  std::ostringstream os;
  os << "tile_kernel " << k.sig.name << "\n";
  print_signature(os, k.sig);
  for (const TileAlloc& a : k.allocs)
    os << "  " << mem_scope_name(a.scope) << " " << a.name << ": " << dtype_name(a.dtype) << "["
       << shape_text(a.shape) << "]" << layout_text(a.layout, a.swizzle) << "\n";
  os << "  grid [" << join(k.sig.grid) << "] threads " << k.sig.threads << "\n";
  return os.str() + body_text(k.body, k.sig.threads);
}

std::string print(const SimtKernel& k) {
  std::ostringstream os;
  os << "simt_kernel " << k.sig.name << "\n";
  print_signature(os, k.sig);
  for (const SimtArray& a : k.shared)
    os << "  shared " << a.name << ": " << dtype_name(a.dtype) << "[" << shape_text(a.shape) << "]"
       << layout_text(a.layout, a.swizzle) << "\n";
  for (const SimtArray& a : k.local_arrays)
    os << "  local " << a.name << ": " << dtype_name(a.dtype) << "[" << shape_text(a.shape)
       << "]\n";
  for (const SimtLocal& l : k.locals) os << "  var " << l.name << ": " << type_name(l.type) << "\n";
  os << "  grid [" << join(k.sig.grid) << "] threads " << k.sig.threads << "\n";
  return os.str() + body_text(k.body, k.sig.threads);
}

}  // namespace tilerun::compiler
