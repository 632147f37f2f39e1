#include "compiler/ir/simt_verifier.h"

#include <algorithm>

#include <map>

#include "compiler/base/check.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"

namespace tilerun::compiler {
namespace {

struct Problem {
  std::string what;
};

class SimtVerifier : public IRVisitor {
 public:
  SimtVerifier(const SimtKernel& k, SimtForm form) : k_(k), form_(form) {}

  void run() {
    const KernelSignature& sig = k_.sig;
    if (sig.threads < 1 || (sig.threads & (sig.threads - 1)) != 0)
      fail("threads not a power of two");
    for (const DimParam& d : sig.dims) define(d.name, Type::I64, false);
    for (const ScalarParam& s : sig.scalars) define(s.name, s.type, false);
    for (size_t i = 0; i < sig.grid.size(); ++i) define(kBlockIdx[i], Type::I64, false);
    define(kThreadIdx, Type::I64, true);
    for (const SimtLocal& l : k_.locals) define(l.name, l.type, true);
    visit(k_.body);
  }

 private:
  struct Binding {
    Type type;
    bool varying;
  };

  [[noreturn]] void fail(const std::string& msg) { throw Problem{msg}; }

  void define(const std::string& name, Type t, bool varying) {
    if (!scope_.emplace(name, Binding{t, varying}).second) fail("'" + name + "' bound twice");
  }
  void undefine(const std::string& name) { scope_.erase(name); }

  // Visits `e` and says whether its value may differ between the threads of a block.
  bool varying(const Expr& e) {
    bool saved = varying_;
    varying_ = false;
    visit(e);
    bool v = varying_;
    varying_ = saved || v;
    return v;
  }

  enum class Space { Global, Shared, Local };
  struct Decl {
    Space space;
    DType dtype;
    size_t rank;
    bool writable;
  };
  Decl decl(const std::string& name) {
    if (const BufferParam* b = find_buffer(k_.sig, name))
      return {Space::Global, b->dtype, b->shape.size(), b->is_output};
    if (const SimtArray* a = find_shared(k_, name))
      return {Space::Shared, a->dtype, a->shape.size(), true};
    if (const SimtArray* a = find_local_array(k_, name)) return {Space::Local, a->dtype, 1, true};
    fail("no buffer named '" + name + "'");
  }

  bool check_access(const std::string& buffer, const std::vector<Expr>& idx, Type value_type) {
    Decl d = decl(buffer);
    size_t want = form_ >= SimtForm::Flat ? 1 : d.rank;
    if (idx.size() != want)
      fail("'" + buffer + "' indexed with " + std::to_string(idx.size()) + " indices");
    Type want_type =
        form_ >= SimtForm::StorageTyped ? storage_type(d.dtype) : compute_type(d.dtype);
    if (value_type != want_type)
      fail("'" + buffer + "' accessed as " + type_name(value_type) + ", expected " +
           type_name(want_type));
    bool v = false;
    for (const Expr& i : idx) v = varying(i) || v;
    return v || d.space == Space::Local;
  }

  void visit_expr(const Var* op) override {
    auto it = scope_.find(op->name);
    if (it == scope_.end()) fail("'" + op->name + "' used outside its scope");
    if (it->second.type != op->type) fail("'" + op->name + "' used with the wrong type");
    varying_ = varying_ || it->second.varying;
  }
  void visit_expr(const Let* op) override {
    bool v = varying(op->value);
    define(op->name, op->value.type(), v);
    visit(op->body);
    undefine(op->name);
  }
  void visit_expr(const Load* op) override {
    if (check_access(op->buffer, op->indices, op->type)) varying_ = true;
  }
  void visit_expr(const Call* op) override {
    if (form_ == SimtForm::Complete && op->op != CallOp::Fma && op->op != CallOp::Sqrt &&
        op->op != CallOp::Bf16Bits)
      fail(std::string("call to ") + call_op_name(op->op) + " survived expand_strict_math");
    IRVisitor::visit_expr(op);
  }
  void visit_expr(const Binary* op) override {
    if (form_ == SimtForm::Complete && op->a.type() == Type::F32 &&
        (op->op == BinaryOp::Min || op->op == BinaryOp::Max))
      fail("f32 min/max survived expand_strict_math");
    IRVisitor::visit_expr(op);
  }

  void visit_stmt(const LetStmt* op) override {
    bool v = varying(op->value);
    if (v && contains_barrier(op->body))
      fail("per-thread let '" + op->name + "' lives across a barrier (make it a local)");
    define(op->name, op->value.type(), v);
    visit(op->body);
    undefine(op->name);
  }
  void visit_stmt(const For* op) override {
    bool v = varying(op->min) || varying(op->extent);
    bool loop_varying = v || control_varying_ > 0;
    if (loop_varying && contains_barrier(op->body))
      fail("barrier inside loop '" + op->var + "' whose trip count is per-thread");
    define(op->var, Type::I64, v);
    control_varying_ += v;
    visit(op->body);
    control_varying_ -= v;
    undefine(op->var);
  }
  void visit_stmt(const IfThenElse* op) override {
    varying(op->cond);
    if (contains_barrier(op->then_case) ||
        (op->else_case.defined() && contains_barrier(op->else_case)))
      fail("barrier inside if (" + to_string(op->cond) +
           "): barriers need block-uniform control flow");
    ++control_varying_;
    visit(op->then_case);
    if (op->else_case.defined()) visit(op->else_case);
    --control_varying_;
  }
  void visit_stmt(const Store* op) override {
    Decl d = decl(op->buffer);
    if (!d.writable) fail("store to input '" + op->buffer + "'");
    check_access(op->buffer, op->indices, op->value.type());
    varying(op->value);
  }
  void visit_stmt(const Assign* op) override {
    auto it = scope_.find(op->name);
    bool is_local = false;
    for (const SimtLocal& l : k_.locals) is_local = is_local || l.name == op->name;
    if (!is_local || it == scope_.end())
      fail("assignment to '" + op->name + "', which is not a local");
    if (it->second.type != op->value.type())
      fail("assignment to '" + op->name + "' of the wrong type");
    varying(op->value);
  }
  void visit_stmt(const WarpShuffle* op) override {
    if (control_varying_ > 0) fail("shuffle under per-thread control flow");
    Decl d = decl(op->dst), s = decl(op->src);
    if (d.space != Space::Local || s.space != Space::Local || d.dtype != s.dtype)
      fail("shuffle between '" + op->dst + "' and '" + op->src +
           "': both must be local arrays of one dtype");
    if (op->lane_xor >= std::min(k_.sig.threads, 32))
      fail("shuffle lane_xor " + std::to_string(op->lane_xor) + " leaves the warp");
  }
  void visit_stmt(const WarpBallot* op) override {
    if (control_varying_ > 0) fail("ballot under per-thread control flow");
    Decl d = decl(op->dst), s = decl(op->src);
    if (d.space != Space::Local || s.space != Space::Local || d.dtype != DType::I32 ||
        s.dtype != DType::I32)
      fail("ballot of '" + op->src + "' into '" + op->dst + "': both must be i32 local arrays");
  }
  void visit_stmt(const Gemm* op) override {
    if (control_varying_ > 0) fail("gemm under per-thread control flow");
    Decl a = decl(op->a), b = decl(op->b), c = decl(op->c);
    const SimtArray* acc = find_local_array(k_, op->c);
    if (a.space != Space::Shared || b.space != Space::Shared || c.space != Space::Local ||
        c.dtype != DType::F32 ||
        !(a.dtype == b.dtype || (dtype_bits(a.dtype) == 8 && dtype_bits(b.dtype) == 8)) || !acc ||
        acc->size() * k_.sig.threads != op->m * op->n)
      fail("gemm into '" + op->c + "': shared operands of one dtype, an f32 local array of " +
           "m*n/threads elements");
    if (op->stage.defined() && varying(op->stage))
      fail("gemm into '" + op->c + "' at stage " + to_string(op->stage) +
           ", which may differ between the threads of a block");
  }
  void visit_stmt(const VectorMove* op) override {
    if (form_ < SimtForm::StorageTyped) fail("vector move before lower_storage_types");
    Decl d = decl(op->dst), s = decl(op->src);
    if (!d.writable) fail("vector move into input '" + op->dst + "'");
    if (d.dtype != s.dtype)
      fail("vector move between '" + op->src + "' and '" + op->dst + "' of different dtypes");
    if ((d.space == Space::Local) == (s.space == Space::Local))
      fail("vector move must be between a local array and a global or shared one");
    int64_t bytes = dtype_bytes(d.dtype, op->lanes);
    if (bytes > 16) fail("vector move of " + std::to_string(bytes) + " bytes (16 at most)");
    varying(op->dst_index);
    varying(op->src_index);
  }
  void visit_stmt(const AsyncCopy* op) override {
    Decl d = decl(op->dst), s = decl(op->src);
    if (d.space != Space::Shared || s.space != Space::Global || s.writable || d.dtype != s.dtype)
      fail("async copy from '" + op->src + "' to '" + op->dst +
           "': from a global input into a shared array of one dtype");
    if (dtype_bytes(d.dtype, op->lanes) != 16) fail("async copy of other than 16 bytes");
    const size_t want = form_ >= SimtForm::Flat ? 1 : 0;
    if (want && (op->dst_indices.size() != 1 || op->src_indices.size() != 1))
      fail("async copy with multi-dimensional indices after flatten_buffers");
    for (const Expr& i : op->dst_indices) varying(i);
    for (const Expr& i : op->src_indices) varying(i);
    varying(op->valid);
  }
  void visit_stmt(const TmaCopy* op) override {
    Decl d = decl(op->dst), s = decl(op->src), b = decl(op->barrier);
    if (d.space != Space::Shared || s.space != Space::Global || s.writable || d.dtype != s.dtype)
      fail("tma_copy from '" + op->src + "' to '" + op->dst +
           "': from a global input into a shared array of one dtype");
    if (b.space != Space::Shared || b.dtype != DType::I64)
      fail("tma_copy on '" + op->barrier + "': not a shared i64 array of mbarriers");
    if (form_ >= SimtForm::Flat && op->dst_indices.size() != 1)
      fail("tma_copy with a multi-dimensional destination after flatten_buffers");
    for (const Expr& i : op->dst_indices) varying(i);
    for (const Expr& i : op->src_indices) varying(i);
    varying(op->barrier_index);
  }
  void visit_stmt(const MbarrierInit* op) override {
    Decl b = decl(op->barrier);
    if (b.space != Space::Shared || b.dtype != DType::I64)
      fail("mbarrier_init of '" + op->barrier + "': not a shared i64 array");
  }
  void visit_stmt(const MbarrierWait* op) override {
    Decl b = decl(op->barrier);
    if (b.space != Space::Shared || b.dtype != DType::I64)
      fail("mbarrier_wait on '" + op->barrier + "': not a shared i64 array");
    varying(op->index);
    varying(op->parity);
  }
  void visit_stmt(const Parallel*) override { fail("parallel loop in SIMT IR"); }
  void visit_stmt(const Reduce*) override { fail("reduce in SIMT IR"); }
  void visit_stmt(const Copy*) override { fail("copy in SIMT IR"); }

  const SimtKernel& k_;
  SimtForm form_;
  std::map<std::string, Binding> scope_;
  bool varying_ = false;
  int control_varying_ = 0;
};

}  // namespace

std::string simt_problem(const SimtKernel& kernel, SimtForm form) {
  try {
    SimtVerifier(kernel, form).run();
  } catch (const Problem& p) {
    return "simt kernel '" + kernel.sig.name + "': " + p.what;
  }
  return "";
}

void verify_simt(const SimtKernel& kernel, SimtForm form) {
  std::string problem = simt_problem(kernel, form);
  TR_CHECK(problem.empty(), problem);
}

}  // namespace tilerun::compiler
