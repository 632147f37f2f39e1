#include "graph/fold_fp4_weights.h"

#include <vector>

#include "graph/fold_util.h"
#include "kernels/grouped_matmul_tc.h"

namespace tilerun::graph {

namespace {

// The fake_quant's attributes name MXFP4 with power-of-two scales over all of each row.
bool mxfp4(const GraphOp& fq) {
  auto text = [&](const char* name) {
    auto it = fq.attrs.find(name);
    return it == fq.attrs.end() ? std::string() : std::get<std::string>(it->second);
  };
  auto extent = fq.attrs.find("extent");
  const bool whole = extent == fq.attrs.end() || std::get<int64_t>(extent->second) == 0;
  return text("format") == "fp4e2m1" && text("scale") == "ue8m0" && whole;
}

// Op `r` reads `w` as its weights (input 1, nowhere else) and would run the decoding kernel.
bool decoding_reader(const OpGraph& g, const GraphOp& r, int w) {
  if (r.type != "grouped_matmul" || r.inputs.size() != 4 || r.inputs[1] != w) return false;
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (i != 1 && r.inputs[i] == w) return false;
  const kernels::TensorType& x = g.tensors[r.inputs[0]].type;
  const kernels::TensorType& y = g.tensors[r.outputs[0]].type;
  const auto tb = r.attrs.find("transpose_b");
  return kernels::grouped_fp4_decodes(y.dtype, tb != r.attrs.end() && std::get<bool>(tb->second),
                                      x.shape[1], y.shape[1], /*sorted=*/true);
}

}  // namespace

int fold_fp4_weights(OpGraph& g) {
  const std::vector<int> readers = reader_counts(g);
  const std::vector<bool> keep = kept_tensors(g);
  int folded = 0;
  for (size_t b = 0; b < g.ops.size(); ++b) {
    GraphOp& fq = g.ops[b];
    if (fq.type != "fake_quant" || fq.inputs.size() != 1 || fq.outputs.size() != 1 || !mxfp4(fq))
      continue;
    const int wq = fq.outputs[0];
    const kernels::TensorType type = g.tensors[wq].type;
    if (keep[wq] || readers[wq] == 0 || type.dtype != DType::BF16 || type.shape.size() != 3)
      continue;
    std::vector<int> users;
    for (size_t r = 0; r < g.ops.size(); ++r)
      for (int t : g.ops[r].inputs)
        if (t == wq) {
          users.push_back(static_cast<int>(r));
          break;
        }
    bool all = static_cast<int>(users.size()) == readers[wq];
    for (int r : users) all = all && decoding_reader(g, g.ops[r], wq);
    if (!all) continue;
    const int64_t block = std::get<int64_t>(fq.attrs.at("block"));
    std::vector<int64_t> scale_shape = type.shape;
    scale_shape.back() /= block;
    const std::string base = g.tensors[wq].name;
    const int codes = g.add_tensor({.name = g.unique_name(base + ".codes"),
                                    .type = {DType::FP4E2M1, type.shape},
                                    .producer = static_cast<int>(b)});
    const int scales = g.add_tensor({.name = g.unique_name(base + ".scales"),
                                     .type = {DType::E8M0, scale_shape},
                                     .producer = static_cast<int>(b)});
    GraphOp& q = g.ops[b];  // (add_tensor leaves the ops where they are)
    q.type = "quantize";
    q.attrs = {{"format", std::string("fp4e2m1")},
               {"block", std::vector<int64_t>{block}},
               {"scale", std::string("e8m0")}};
    q.outputs = {codes, scales};
    // The rounded weights are written and read by nothing; they keep the op as their producer,
    // so that they count neither as an input nor as a zero gradient (no bytes, no memset).
    for (int r : users) {
      GraphOp& op = g.ops[r];
      op.type = "grouped_matmul_fp4";
      op.inputs = {op.inputs[0], codes, scales, op.inputs[2], op.inputs[3]};
      for (GraphIndexCheck& check : g.index_checks)
        if (check.op == r && check.slot == 2) check.slot = 3;
    }
    ++folded;
  }
  return folded;
}

}  // namespace tilerun::graph
