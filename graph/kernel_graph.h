// The KernelGraph: every op of the step expanded into kernel instances with concrete shapes and
// tensor bindings, in execution order, with their data-dependency edges and the memory plan.
#pragma once

#include <memory>
#include <vector>

#include "graph/op_graph.h"
#include "graph/plan.h"

namespace tilerun::graph {

struct KernelNode {
  int kernel = 0;            // index into KernelGraph::kernels
  std::vector<int> buffers;  // tensor id per kernel buffer parameter
  std::vector<int64_t> dims;
  std::vector<double> scalars;
  int op = 0;  // the GraphOp it comes from
  int layer = 0;
  Direction direction = Direction::Forward;
  // Nodes that must finish first: producers of what it reads (read after write), and earlier
  // users of the arena bytes it overwrites (write after read/write, from the memory plan).
  std::vector<int> deps;
};

// A tensor that is another tensor's bytes (the output of a view op such as reshape): `base` is
// a tensor with bytes of its own (never itself a view), `offset` the byte offset into them.
struct TensorView {
  int base = -1;  // -1: the tensor has bytes of its own
  int64_t offset = 0;
};

struct KernelGraph {
  OpGraph ops;  // with the expansion's scratch tensors appended to ops.tensors
  std::vector<std::shared_ptr<const compiler::Kernel>> kernels;  // distinct, in first-use order
  std::vector<KernelNode> nodes;                                 // in execution order
  MemoryPlan plan;                // an offset per tensor of ops.tensors (a view's: in its base)
  std::vector<TensorView> views;  // per tensor
  std::vector<bool> persistent;   // per tensor: bound or read from outside (never reused)
  std::vector<bool> zero_init;    // per tensor: a gradient nothing writes, zero at bind time
};

// Expands every op (forward then backward) through its registered expansion, dedups kernels,
// plans memory and computes dependency edges. Throws tilerun::Error naming the op and its YAML
// location when an op has no kernels. `fold`: matmuls' single-use adds and the row kernels'
// single-use fake_quants folded in first (fold_adds.h, fold_quant.h; the same bits either way).
// `fp4_weights`: also keep MXFP4-trained grouped-GEMM weights as FP4 codes (fold_fp4_weights.h).
KernelGraph expand(OpGraph ops, bool fold = true, bool fp4_weights = false);

}  // namespace tilerun::graph
