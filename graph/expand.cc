#include <algorithm>
#include <limits>
#include <map>

#include "compiler/analysis/launch_geometry.h"
#include "compiler/base/check.h"
#include "compiler/ir/kernel.h"
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

// Which nodes are ancestors of which, through read-after-write edges, in O(n · kWindow / 64):
// exactly for the kWindow nodes before each node (a bit set), and beyond that through `floor`,
// the longest prefix of the program that is entirely among a node's ancestors. An older
// ancestor outside both is missed, which only makes the memory plan reuse less, never wrongly.
class Ancestry {
 public:
  static constexpr int kWindowWords = 32;  // 2048 nodes

  explicit Ancestry(const std::vector<std::vector<int>>& preds)
      : floor_(preds.size(), -1), bits_(preds.size() * kWindowWords, 0) {
    for (size_t j = 0; j < preds.size(); ++j) {
      const int v = static_cast<int>(j);
      int floor = -1;
      for (int p : preds[j]) {
        if (p >= v) continue;
        set(v, p);
        // p's own ancestors, word by word where the windows overlap.
        const int64_t base_v = base_word(v), base_p = base_word(p);
        for (int w = 0; w < kWindowWords; ++w) {
          int64_t word = base_p + w;
          if (word >= base_v && word < base_v + kWindowWords)
            bits_[j * kWindowWords + (word - base_v)] |= bits_[p * kWindowWords + w];
        }
        floor = std::max(floor, floor_[p] == p - 1 ? p : floor_[p]);
      }
      while (floor + 1 < v && in_window(floor + 1, v)) {
        if (!test(floor + 1, v)) break;
        ++floor;
      }
      floor_[j] = floor;
    }
  }

  bool is_ancestor(int u, int v) const {
    if (u >= v) return false;
    if (u <= floor_[v]) return true;
    return in_window(u, v) && test(u, v);
  }

 private:
  // Node v's window: the kWindowWords 64-node words ending with the one holding v - 1.
  static int64_t base_word(int v) { return std::max<int64_t>(0, (v - 1) / 64 - kWindowWords + 1); }
  static bool in_window(int u, int v) { return u >= 0 && u / 64 >= base_word(v); }
  bool test(int u, int v) const {
    return bits_[static_cast<size_t>(v) * kWindowWords + (u / 64 - base_word(v))] >> (u % 64) & 1;
  }
  void set(int v, int u) {
    if (in_window(u, v))
      bits_[static_cast<size_t>(v) * kWindowWords + (u / 64 - base_word(v))] |= uint64_t{1}
                                                                                << (u % 64);
  }

  std::vector<int> floor_;
  std::vector<uint64_t> bits_;
};

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
      check_limits(op, call, scratch);
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

  // The kernels index with 32-bit integers and launch within CUDA's grid limits: a tensor or a
  // grid beyond them would wrap silently (and show up, if at all, as a race found in the
  // proofs), so it is an error here, at the op's YAML position, naming the limit.
  void check_limits(const GraphOp& op, const kernels::KernelCall& call,
                    const std::vector<int>& scratch) const {
    const std::string what = "op '" + op.type + "' (" + direction_name(op.direction) + ")";
    for (const kernels::KernelArg& a : call.buffers) {
      int t = a.kind == kernels::KernelArg::Kind::Input    ? op.inputs.at(a.index)
              : a.kind == kernels::KernelArg::Kind::Output ? op.outputs.at(a.index)
                                                           : scratch.at(a.index);
      int64_t n = 1;
      for (int64_t d : g_.tensors[t].type.shape)
        if (__builtin_mul_overflow(n, d, &n)) n = INT64_MAX;
      if (n > kMaxIndexedElements)
        throw Error(op.loc,
                    what + ": tensor '" + g_.tensors[t].name + "' " +
                        kernels::to_string(g_.tensors[t].type) + " has " + std::to_string(n) +
                        " elements; kernel '" + call.kernel->sig.name +
                        "' indexes with 32-bit integers, limit " +
                        std::to_string(kMaxIndexedElements) + " elements per tensor",
                    ErrorKind::Usage);
    }
    try {
      compiler::launch_geometry(call.kernel->sig, call.dims);
    } catch (const Error& e) {
      throw Error(op.loc, what + ": " + e.message(), ErrorKind::Usage);
    }
  }

  static constexpr int64_t kMaxIndexedElements = std::numeric_limits<int32_t>::max();

  // Identical kernels (the same shared Kernel object) are compiled once.
  int kernel_index(const std::shared_ptr<const compiler::Kernel>& k) {
    auto [it, added] = kernel_ids_.emplace(k.get(), static_cast<int>(kg_.kernels.size()));
    if (added) kg_.kernels.push_back(k);
    return it->second;
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
    Ancestry ancestry(read_after_write_preds());
    users_.assign(g_.tensors.size(), {});
    for (size_t node = 0; node < kg_.nodes.size(); ++node)
      for (int t : kg_.nodes[node].buffers)
        if (users_[t].empty() || users_[t].back() != static_cast<int>(node))
          users_[t].push_back(static_cast<int>(node));
    auto ordered = [&](int a, int b) {
      if (users_[a].empty() || users_[b].empty()) return true;  // never touched: no hazard
      const int v = users_[b].front();
      for (int u : users_[a])
        if (!ancestry.is_ancestor(u, v)) return false;
      return true;
    };
    kg_.plan = plan_memory(uses, ordered);
    bytes_ = std::move(uses);
  }

  // Per node, the earlier nodes that wrote a tensor it touches (read after write).
  std::vector<std::vector<int>> read_after_write_preds() const {
    std::vector<std::vector<int>> writers(g_.tensors.size()), preds(kg_.nodes.size());
    for (size_t j = 0; j < kg_.nodes.size(); ++j) {
      for (int r : access_[j].reads)
        preds[j].insert(preds[j].end(), writers[r].begin(), writers[r].end());
      for (int w : access_[j].writes)
        if (writers[w].empty() || writers[w].back() != static_cast<int>(j))
          writers[w].push_back(static_cast<int>(j));
    }
    return preds;
  }

  // j depends on an earlier i when i writes what j reads (a true dependency), when j writes what
  // i read or wrote, or when j touches bytes the plan gave to a tensor i touched before (reuse):
  // in graph mode the two may not run at the same time. Per tensor, every earlier access of the
  // same tensor that conflicts is listed; across tensors sharing bytes, the accesses of the
  // previous occupant of those bytes (older occupants are ordered before that one by the reuse
  // rule, through nodes listed here). Linear in the accesses, O(n log n) with the byte map.
  void add_dependencies() {
    const size_t tensors = g_.tensors.size();
    std::vector<std::vector<int>> readers(tensors), writers(tensors);
    for (size_t j = 0; j < kg_.nodes.size(); ++j) {
      std::vector<int>& deps = kg_.nodes[j].deps;
      for (int r : access_[j].reads) deps.insert(deps.end(), writers[r].begin(), writers[r].end());
      for (int w : access_[j].writes) {
        deps.insert(deps.end(), writers[w].begin(), writers[w].end());
        deps.insert(deps.end(), readers[w].begin(), readers[w].end());
      }
      for (int r : access_[j].reads) readers[r].push_back(static_cast<int>(j));
      for (int w : access_[j].writes) writers[w].push_back(static_cast<int>(j));
    }
    // Reuse: tensors in order of their first use; each previous occupant's accesses conflict
    // with this tensor's where one of the two writes.
    std::vector<int> order;
    for (size_t t = 0; t < tensors; ++t)
      if (!users_[t].empty() && !kg_.persistent[t]) order.push_back(static_cast<int>(t));
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return std::pair(users_[a].front(), a) < std::pair(users_[b].front(), b);
    });
    std::map<int64_t, std::pair<int64_t, int>> occupant;  // byte segment begin -> (end, tensor)
    for (int y : order) {
      if (bytes_[y].bytes == 0) continue;
      const int64_t begin = kg_.plan.offsets[y], end = begin + bytes_[y].bytes;
      std::vector<int> previous;
      auto it = occupant.upper_bound(begin);
      if (it != occupant.begin()) --it;
      while (it != occupant.end() && it->first < end) {
        auto [seg_end, x] = it->second;
        const int64_t seg_begin = it->first;
        if (seg_end <= begin) {
          ++it;
          continue;
        }
        previous.push_back(x);
        it = occupant.erase(it);
        if (seg_begin < begin) occupant[seg_begin] = {begin, x};
        if (seg_end > end) occupant[end] = {seg_end, x};
      }
      occupant[begin] = {end, y};
      std::sort(previous.begin(), previous.end());
      previous.erase(std::unique(previous.begin(), previous.end()), previous.end());
      for (int x : previous) {
        for (int j : readers[y]) add_edges(writers[x], j);
        for (int j : writers[y]) {
          add_edges(writers[x], j);
          add_edges(readers[x], j);
        }
      }
    }
    for (KernelNode& node : kg_.nodes) {
      std::sort(node.deps.begin(), node.deps.end());
      node.deps.erase(std::unique(node.deps.begin(), node.deps.end()), node.deps.end());
    }
    for (size_t j = 0; j < kg_.nodes.size(); ++j)
      std::erase(kg_.nodes[j].deps, static_cast<int>(j));
  }

  void add_edges(const std::vector<int>& from, int j) {
    for (int i : from)
      if (i < j) kg_.nodes[j].deps.push_back(i);
  }

  KernelGraph& kg_;
  OpGraph& g_;
  std::vector<Access> access_;
  std::vector<BufferUse> bytes_;
  std::vector<std::vector<int>> users_;  // per tensor: the nodes touching it, in order
  std::map<const compiler::Kernel*, int> kernel_ids_;
};

}  // namespace

KernelGraph expand(OpGraph ops) {
  KernelGraph kg;
  kg.ops = std::move(ops);
  Expander(kg).run();
  return kg;
}

}  // namespace tilerun::graph
