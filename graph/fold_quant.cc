#include "graph/fold_quant.h"

#include <vector>

#include "graph/fold_util.h"
#include "kernels/quant_format.h"

namespace tilerun::graph {

int fold_quant_epilogues(OpGraph& g) {
  const std::vector<int> readers = reader_counts(g);
  const std::vector<bool> keep = kept_tensors(g);
  std::vector<bool> removed(g.ops.size(), false);
  int folded = 0;
  for (size_t b = 0; b < g.ops.size(); ++b) {
    const GraphOp& fq = g.ops[b];
    if (fq.type != "fake_quant" || fq.inputs.size() != 1 || fq.outputs.size() != 1) continue;
    const int product = fq.inputs[0];
    const int a = g.tensors[product].producer;
    if (a < 0 || removed[a] || readers[product] != 1 || keep[product]) continue;
    GraphOp& op = g.ops[a];
    const kernels::OpSchema& schema = *kernels::op_registry().find(op.type);
    if (!schema.quant_epilogue || op.outputs[0] != product || op.layer != fq.layer ||
        op.direction != fq.direction || !(g.tensors[fq.outputs[0]].type == g.tensors[product].type))
      continue;
    Attrs attrs = op.attrs;
    auto has = attrs.find("quant_format");
    if (has != attrs.end() && !std::get<std::string>(has->second).empty())
      continue;  // it quantises already
    kernels::quant::add_row_quant(attrs, fq.attrs);
    std::vector<kernels::TensorType> in, out;
    for (int t : op.inputs) in.push_back(g.tensors[t].type);
    for (int t : op.outputs) out.push_back(g.tensors[t].type);
    if (!schema.quant_epilogue(in, out, attrs)) continue;
    op.attrs = std::move(attrs);
    op.outputs[0] = fq.outputs[0];
    g.tensors[fq.outputs[0]].producer = a;
    // The product is now written and read by nothing; it keeps the op as its producer, so that it
    // counts neither as an input nor as a zero gradient (no bytes, no memset).
    removed[b] = true;
    ++folded;
  }
  if (folded > 0) drop_ops(g, removed);
  return folded;
}

}  // namespace tilerun::graph
