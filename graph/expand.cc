#include "compiler/base/check.h"
#include "graph/kernel_graph.h"

namespace tilerun::graph {

namespace {

int64_t tensor_bytes(const GraphTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.type.shape) n *= d;
  return dtype_bytes(t.type.dtype, n);
}

// Everything bound or read from outside outlives the step's kernels: inputs, weights, outputs,
// the gradients of inputs and weights, and zero gradients that nothing writes.
std::vector<bool> persistent_tensors(const OpGraph& g) {
  std::vector<bool> p(g.tensors.size(), false);
  for (size_t i = 0; i < g.tensors.size(); ++i)
    p[i] = g.tensors[i].kind == TensorKind::Input || g.tensors[i].kind == TensorKind::Weight ||
           g.tensors[i].producer < 0;
  for (int out : g.outputs) p[out] = true;
  for (const auto& [x, dx] : g.grad) {
    TensorKind k = g.tensors[x].kind;
    if (k == TensorKind::Input || k == TensorKind::Weight) p[dx] = true;
  }
  return p;
}

struct Access {
  std::vector<int> reads, writes;
};

class Expander {
 public:
  explicit Expander(KernelGraph& kg) : kg_(kg), g_(kg.ops) {}

  void run() {
    for (size_t op_id = 0; op_id < g_.ops.size(); ++op_id) expand_op(static_cast<int>(op_id));
    plan();
    add_dependencies();
  }

 private:
  void expand_op(int op_id) {
    const GraphOp op = g_.ops[op_id];  // a copy: scratch tensors grow g_.tensors
    const kernels::OpSchema* schema = kernels::op_registry().find(op.type);
    TR_CHECK(schema != nullptr, "unknown op after checking: " + op.type);
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
      KernelNode node{.kernel = kernel_index(call.kernel),
                      .dims = call.dims,
                      .scalars = call.scalars,
                      .op = op_id,
                      .layer = op.layer,
                      .direction = op.direction};
      Access acc;
      for (const kernels::KernelArg& a : call.buffers) {
        int t = -1;
        switch (a.kind) {
          case kernels::KernelArg::Kind::Input:
            t = op.inputs.at(a.index);
            acc.reads.push_back(t);
            break;
          case kernels::KernelArg::Kind::Output:
            t = op.outputs.at(a.index);
            acc.writes.push_back(t);
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

  // Identical kernels (the same shared Kernel object) are compiled once.
  int kernel_index(const std::shared_ptr<const compiler::Kernel>& k) {
    for (size_t i = 0; i < kg_.kernels.size(); ++i)
      if (kg_.kernels[i] == k) return static_cast<int>(i);
    kg_.kernels.push_back(k);
    return static_cast<int>(kg_.kernels.size()) - 1;
  }

  void plan() {
    kg_.persistent = persistent_tensors(g_);
    kg_.zero_init.assign(g_.tensors.size(), false);
    for (size_t t = 0; t < g_.tensors.size(); ++t)
      kg_.zero_init[t] = g_.tensors[t].kind == TensorKind::Gradient && g_.tensors[t].producer < 0;
    std::vector<BufferUse> uses(g_.tensors.size());
    std::vector<bool> touched(g_.tensors.size(), false);
    for (size_t n = 0; n < kg_.nodes.size(); ++n)
      for (int t : kg_.nodes[n].buffers) {
        BufferUse& u = uses[t];
        if (!touched[t]) u.first = static_cast<int>(n);
        u.last = static_cast<int>(n);
        touched[t] = true;
      }
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      uses[t].bytes = tensor_bytes(g_.tensors[t]);
      uses[t].persistent = kg_.persistent[t];
    }
    // Reuse only along data dependencies: a buffer may take bytes another one used only if
    // every node touching that one is an ancestor (through read-after-write edges) of the
    // node that first touches this one. Then the hazard edges reuse implies are already
    // implied by the data, and independent branches stay free to overlap.
    const size_t n = kg_.nodes.size();
    std::vector<std::vector<uint64_t>> ancestors(n, std::vector<uint64_t>((n + 63) / 64, 0));
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < j; ++i) {
        bool raw = false;
        for (int w : access_[i].writes)
          for (int r : access_[j].reads) raw = raw || w == r;
        if (!raw) continue;
        ancestors[j][i / 64] |= uint64_t{1} << (i % 64);
        for (size_t k = 0; k < ancestors[j].size(); ++k) ancestors[j][k] |= ancestors[i][k];
      }
    std::vector<std::vector<int>> users(g_.tensors.size());
    for (size_t node = 0; node < n; ++node)
      for (int t : kg_.nodes[node].buffers)
        if (users[t].empty() || users[t].back() != static_cast<int>(node))
          users[t].push_back(static_cast<int>(node));
    auto ordered = [&](int a, int b) {
      if (users[a].empty() || users[b].empty()) return true;  // never touched: no hazard
      const std::vector<uint64_t>& before = ancestors[users[b].front()];
      for (int u : users[a])
        if (!(before[u / 64] >> (u % 64) & 1)) return false;
      return true;
    };
    kg_.plan = plan_memory(uses, ordered);
    bytes_ = std::move(uses);
  }

  bool share_bytes(int a, int b) const {
    if (a == b) return true;
    int64_t a0 = kg_.plan.offsets[a], b0 = kg_.plan.offsets[b];
    return a0 < b0 + bytes_[b].bytes && b0 < a0 + bytes_[a].bytes;
  }

  bool any_shared(const std::vector<int>& xs, const std::vector<int>& ys) const {
    for (int x : xs)
      for (int y : ys)
        if (share_bytes(x, y)) return true;
    return false;
  }

  // j depends on an earlier i when i writes what j reads (a true dependency) or when j
  // overwrites bytes i reads or writes (the plan reused them): in graph mode the two may not run
  // at the same time.
  void add_dependencies() {
    for (size_t j = 0; j < kg_.nodes.size(); ++j)
      for (size_t i = 0; i < j; ++i) {
        const Access &a = access_[i], &b = access_[j];
        if (any_shared(a.writes, b.reads) || any_shared(a.writes, b.writes) ||
            any_shared(a.reads, b.writes))
          kg_.nodes[j].deps.push_back(static_cast<int>(i));
      }
  }

  KernelGraph& kg_;
  OpGraph& g_;
  std::vector<Access> access_;
  std::vector<BufferUse> bytes_;
};

}  // namespace

KernelGraph expand(OpGraph ops) {
  KernelGraph kg;
  kg.ops = std::move(ops);
  Expander(kg).run();
  return kg;
}

}  // namespace tilerun::graph
