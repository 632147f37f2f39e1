#include "graph/fold_adds.h"

#include <vector>

#include "graph/fold_util.h"

namespace tilerun::graph {

namespace {

// Whether `op` (of `schema`) with `addend` expands to no more kernels than without it.
bool adds_in_kernel(const OpGraph& g, const kernels::OpSchema& schema, const GraphOp& op,
                    int addend) {
  std::vector<kernels::TensorType> in, out;
  for (int t : op.inputs) in.push_back(g.tensors[t].type);
  for (int t : op.outputs) out.push_back(g.tensors[t].type);
  const size_t plain = schema.expand(in, out, op.attrs).calls.size();
  in.push_back(g.tensors[addend].type);
  return schema.expand(in, out, op.attrs).calls.size() <= plain;
}

}  // namespace

int fold_matmul_adds(OpGraph& g) {
  const std::vector<int> readers = reader_counts(g);
  const std::vector<bool> keep = kept_tensors(g);
  std::vector<bool> removed(g.ops.size(), false);
  int folded = 0;
  for (size_t b = 0; b < g.ops.size(); ++b) {
    GraphOp& add = g.ops[b];
    if (add.type != "add" || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    for (int side : {0, 1}) {
      const int product = add.inputs[side], other = add.inputs[1 - side];
      const int a = g.tensors[product].producer;
      if (a < 0 || removed[a] || product == other) continue;
      GraphOp& op = g.ops[a];
      const kernels::OpSchema& schema = *kernels::op_registry().find(op.type);
      const auto& type = g.tensors[product].type;
      if (schema.addend_input < 0 || static_cast<int>(op.inputs.size()) != schema.addend_input ||
          op.outputs[0] != product || readers[product] != 1 || keep[product] ||
          op.direction != add.direction || op.layer != add.layer ||
          !(g.tensors[other].type == type) || !(g.tensors[add.outputs[0]].type == type))
        continue;
      // The fused op runs where the op ran when the addend is ready by then, else where the add
      // ran (its inputs, written once, are still there; an op with other outputs stays, as
      // their readers may come before the add).
      const bool at_add = g.tensors[other].producer >= a;
      if (at_add && op.outputs.size() != 1) continue;
      // Only where the op's kernels add it themselves (the tensor cores' epilogue): else the
      // fold would run the same kernels and leave the product's tensor behind.
      if (!adds_in_kernel(g, schema, op, other)) continue;
      GraphOp fused = op;
      fused.inputs.push_back(other);
      fused.outputs[0] = add.outputs[0];
      const int at = at_add ? static_cast<int>(b) : a;
      g.tensors[add.outputs[0]].producer = at;
      // The product is now written and read by nothing; it keeps the fused op as its producer,
      // so that it counts neither as an input nor as a zero gradient (no bytes, no memset).
      g.tensors[product].producer = at;
      removed[at_add ? a : b] = true;
      g.ops[at] = std::move(fused);
      ++folded;
      break;
    }
  }
  if (folded > 0) drop_ops(g, removed);
  return folded;
}

}  // namespace tilerun::graph
