// Expansion: matmuls' single-use adds folded into them (fold_adds.h) and single-use fake_quants
// into the row kernels before them (fold_quant.h), on request FP4 weights of grouped GEMMs kept
// as codes (fold_fp4_weights.h), then every op of the
// OpGraph into kernel instances (its family's expand), kernels
// deduplicated, limits checked at the op's position; then the dead kernels dropped (prune.h),
// the memory plan (reuse.h) and the hazard edges (dependencies.h). An op whose outputs are views
// (OpSchema::view) runs no kernel: its outputs become offsets into their base, and every access
// through a view counts as an access of the base, so the plan keeps the base alive while a view
// is read and the hazard edges order the base's writers and later occupants against the view's
// readers.
#include <limits>
#include <map>

#include "compiler/analysis/launch_geometry.h"
#include "compiler/base/check.h"
#include "compiler/ir/kernel.h"
#include "graph/dependencies.h"
#include "graph/fold_adds.h"
#include "graph/fold_fp4_weights.h"
#include "graph/fold_quant.h"
#include "graph/kernel_graph.h"
#include "graph/prune.h"
#include "graph/reuse.h"

namespace tilerun::graph {

namespace {

class Expander {
 public:
  explicit Expander(KernelGraph& kg) : kg_(kg), g_(kg.ops) {}

  void run() {
    for (size_t op_id = 0; op_id < g_.ops.size(); ++op_id) expand_op(static_cast<int>(op_id));
    kg_.views.resize(g_.tensors.size());
    prune_dead_nodes(kg_, access_);
    const ReusePlan reuse = plan_reuse(kg_, access_);
    add_dependencies(kg_, access_, reuse);
  }

 private:
  void expand_op(int op_id) {
    const GraphOp op = g_.ops[op_id];  // a copy: scratch tensors grow g_.tensors
    const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
    TR_CHECK(schema != nullptr, "unknown op after checking: " + op.type);
    kg_.views.resize(g_.tensors.size());
    if (alias_outputs(op, *schema)) return;
    if (!schema->expand)
      throw Error(op.loc,
                  "op '" + op.type + "' (" + direction_name(op.direction) + ") has no kernels yet",
                  ErrorKind::Runtime);
    std::vector<kernels::TensorType> in, out;
    for (int t : op.inputs) in.push_back(g_.tensors[t].type);
    for (int t : op.outputs) out.push_back(g_.tensors[t].type);
    kernels::OpExpansion ex = schema->expand(in, out, op.attrs);
    std::vector<int> scratch;
    for (size_t s = 0; s < ex.scratch.size(); ++s)
      scratch.push_back(
          g_.add_tensor({.name = "scratch." + std::to_string(op_id) + "." + std::to_string(s),
                         .type = ex.scratch[s],
                         .kind = TensorKind::Activation,
                         .producer = op_id}));
    for (const kernels::KernelCall& call : ex.calls) {
      TR_CHECK(call.kernel != nullptr, op.type + " expanded to a call without a kernel");
      check_limits(op, call, scratch);
      KernelNode node{.kernel = kernel_index(call.kernel),
                      .dims = call.dims,
                      .scalars = call.scalars,
                      .op = op_id,
                      .layer = op.layer,
                      .direction = op.direction};
      NodeAccess acc;
      for (const kernels::KernelArg& a : call.buffers) {
        int t = -1;
        switch (a.kind) {
          case kernels::KernelArg::Kind::Input:
            t = op.inputs.at(a.index);
            acc.reads.push_back(base_of(t));
            break;
          case kernels::KernelArg::Kind::Output:
            t = op.outputs.at(a.index);
            acc.writes.push_back(base_of(t));
            break;
          case kernels::KernelArg::Kind::Scratch:  // written by one call, read by a later one
            t = scratch.at(a.index);
            acc.reads.push_back(t);
            acc.writes.push_back(t);
            break;
        }
        node.buffers.push_back(t);
      }
      kg_.nodes.push_back(std::move(node));
      access_.push_back(std::move(acc));
    }
  }

  // The tensor whose bytes `t` is: itself, or the base of the view it is.
  int base_of(int t) const { return kg_.views[t].base >= 0 ? kg_.views[t].base : t; }

  // When the op's outputs are views of its inputs (for these types): records each output's
  // base and byte offset (a view of a view points at the first base) and returns true.
  bool alias_outputs(const GraphOp& op, const kernels::OpSchema& schema) {
    if (!schema.view) return false;
    std::vector<kernels::TensorType> in, out;
    for (int t : op.inputs) in.push_back(g_.tensors[t].type);
    for (int t : op.outputs) out.push_back(g_.tensors[t].type);
    std::optional<std::vector<kernels::ViewOf>> views = schema.view(in, out, op.attrs);
    if (!views) return false;
    TR_CHECK(views->size() == op.outputs.size(), op.type + ": a view per output");
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      const kernels::ViewOf& v = (*views)[o];
      const int source = op.inputs.at(v.input);
      const int64_t bytes = dtype_bytes(in[v.input].dtype, v.offset);
      TR_CHECK(bytes % 16 == 0, op.type + ": a view at a byte offset kernels cannot take");
      kg_.views[op.outputs[o]] = {.base = base_of(source),
                                  .offset = kg_.views[source].offset + bytes};
    }
    return true;
  }

  // Every kernel's index arithmetic is 64-bit (i64 in the IR, long long in CUDA, i64 in LLVM),
  // so a float tensor may hold more than 2^31 elements. Two limits stay, each an error here, at
  // the op's YAML position, naming it, instead of a value that wraps silently:
  //  - an integer tensor holds at most 2^31 - 1 elements: its i32 values are positions and
  //    counts of elements (counting_sort's order, bincount's counts, check_index's element);
  //  - any tensor at most 2^40 elements, so that no index product (an element index times a
  //    small factor) nears 2^63; and the launch's dims and grid lie within the kernel's bounds
  //    and CUDA's limits (launch_geometry).
  void check_limits(const GraphOp& op, const kernels::KernelCall& call,
                    const std::vector<int>& scratch) const {
    const std::string what = "op '" + op.type + "' (" + direction_name(op.direction) + ")";
    for (const kernels::KernelArg& a : call.buffers) {
      int t = a.kind == kernels::KernelArg::Kind::Input    ? op.inputs.at(a.index)
              : a.kind == kernels::KernelArg::Kind::Output ? op.outputs.at(a.index)
                                                           : scratch.at(a.index);
      const kernels::TensorType& type = g_.tensors[t].type;
      int64_t n = 1;
      for (int64_t d : type.shape)
        if (__builtin_mul_overflow(n, d, &n)) n = INT64_MAX;
      const bool integer = !dtype_is_float(type.dtype);
      const int64_t limit = integer ? kMaxIntegerElements : kMaxElements;
      if (n > limit)
        throw Error(op.loc,
                    what + ": tensor '" + g_.tensors[t].name + "' " + kernels::to_string(type) +
                        " has " + std::to_string(n) + " elements; kernel '" +
                        call.kernel->sig.name + "' takes at most " + std::to_string(limit) +
                        (integer ? " elements in an integer tensor (its values count and place "
                                   "elements in 32 bits)"
                                 : " elements per tensor"),
                    ErrorKind::Usage);
    }
    try {
      compiler::launch_geometry(call.kernel->sig, call.dims);
    } catch (const Error& e) {
      throw Error(op.loc, what + ": " + e.message(), ErrorKind::Usage);
    }
  }

  static constexpr int64_t kMaxIntegerElements = std::numeric_limits<int32_t>::max();
  static constexpr int64_t kMaxElements = int64_t{1} << 40;

  // Identical kernels (the same shared Kernel object) are compiled once.
  int kernel_index(const std::shared_ptr<const compiler::Kernel>& k) {
    auto [it, added] = kernel_ids_.emplace(k.get(), static_cast<int>(kg_.kernels.size()));
    if (added) kg_.kernels.push_back(k);
    return it->second;
  }

  KernelGraph& kg_;
  OpGraph& g_;
  std::vector<NodeAccess> access_;
  std::map<const compiler::Kernel*, int> kernel_ids_;
};

}  // namespace

KernelGraph expand(OpGraph ops, bool fold, bool fp4_weights) {
  KernelGraph kg;
  kg.ops = std::move(ops);
  if (fold) {
    fold_matmul_adds(kg.ops);
    fold_quant_epilogues(kg.ops);
  }
  if (fp4_weights) fold_fp4_weights(kg.ops);
  Expander(kg).run();
  return kg;
}

}  // namespace tilerun::graph
