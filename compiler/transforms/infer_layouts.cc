#include "compiler/transforms/infer_layouts.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "compiler/analysis/index_eval.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/layout.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

struct Member {
  ParallelLayout layout;
  int64_t numel = -1;  // -1: symbolic
  std::set<std::string> fragments;
};

// The Parallels in visiting order, with the fragments each touches.
class Collector : public IRVisitor {
 public:
  explicit Collector(const Kernel& k) : k_(k) {
    for (const DimParam& d : k.sig.dims)
      if (d.bounds.min == d.bounds.max) pinned_[d.name] = d.bounds.min;
  }
  std::vector<Member> members;
  // Fragments a gemm accumulates into: the tensor core fixes their layout.
  std::map<std::string, Layout> accumulators;

 protected:
  void visit_stmt(const Gemm* op) override {
    accumulators[op->c] = wgmma_accumulator_layout(op->m, op->n, k_.sig.threads);
  }
  void visit_stmt(const Parallel* op) override {
    Member m;
    m.layout = op->layout;
    // Constant, or made constant by dims pinned to the launch shape (analyze_accesses).
    int64_t n = 1;
    for (const Expr& x : op->extents) n = n >= 0 && all_pinned(x) ? n * eval_index(x, pinned_) : -1;
    m.numel = n;
    members.push_back(m);
    current_ = static_cast<int>(members.size()) - 1;
    IRVisitor::visit_stmt(op);
    current_ = -1;
  }
  void visit_expr(const Load* op) override {
    touch(op->buffer);
    IRVisitor::visit_expr(op);
  }
  void visit_stmt(const Store* op) override {
    touch(op->buffer);
    IRVisitor::visit_stmt(op);
  }

 private:
  bool all_pinned(const Expr& e) const {
    struct V : IRVisitor {
      const std::map<std::string, int64_t>* known;
      bool ok = true;
      void visit_expr(const Var* op) override { ok = ok && known->count(op->name); }
      void visit_expr(const Load*) override { ok = false; }
    } v;
    v.known = &pinned_;
    v.visit(e);
    return v.ok;
  }
  void touch(const std::string& name) {
    const TileAlloc* a = find_alloc(k_, name);
    if (current_ >= 0 && a && a->scope == MemScope::Fragment)
      members[current_].fragments.insert(name);
  }
  const Kernel& k_;
  std::map<std::string, int64_t> pinned_;
  int current_ = -1;
};

class Applier : public IRMutator {
 public:
  explicit Applier(const std::vector<Member>& m) : members_(m) {}

 protected:
  Stmt mutate_stmt(const Parallel* op, const Stmt& self) override {
    const ParallelLayout& l = members_[next_++].layout;
    Stmt body = mutate(op->body);
    return Parallel::make(op->vars, op->extents, body, l);
  }

 private:
  const std::vector<Member>& members_;
  size_t next_ = 0;
};

int find(std::vector<int>& parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

}  // namespace

std::vector<std::string> describe_layouts(const Kernel& kernel) {
  Collector c(kernel);
  c.visit(kernel.body);
  struct Lines : IRVisitor {
    std::vector<std::string> out;
    void visit_stmt(const Parallel* op) override {
      std::string loop;
      for (size_t i = 0; i < op->vars.size(); ++i)
        loop += (i ? ", " : "") + op->vars[i] + " in [0, " + to_string(op->extents[i]) + ")";
      out.push_back(loop);
      IRVisitor::visit_stmt(op);
    }
  } lines;
  lines.visit(kernel.body);
  std::vector<std::string> out;
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Member& m = c.members[i];
    const int w = std::max(m.layout.width, 1);
    std::string line = "parallel " + lines.out[i] + ": width " + std::to_string(w) +
                       (m.layout.annotated ? " (annotated)" : "") +
                       (m.layout.vectorize ? ", vector moves" : ", scalar moves") + ", provable " +
                       std::to_string(m.layout.provable);
    if (m.numel >= 0)
      line +=
          ", (thread, local) -> element " + parallel_layout_text(m.numel, kernel.sig.threads, w);
    out.push_back(line);
  }
  // Fragments: the width of the Parallels touching them (one, by construction); a gemm's
  // accumulator follows the tensor core's layout.
  for (const TileAlloc& a : kernel.allocs) {
    if (a.scope != MemScope::Fragment) continue;
    if (auto it = c.accumulators.find(a.name); it != c.accumulators.end()) {
      out.push_back("fragment " + a.name + ": gemm accumulator, (thread, value) -> element " +
                    to_string(it->second));
      continue;
    }
    int w = 1;
    for (const Member& m : c.members)
      if (m.fragments.count(a.name)) w = std::max(m.layout.width, 1);
    int64_t numel = 1;
    for (int64_t e : a.shape) numel *= e;
    out.push_back("fragment " + a.name + ": width " + std::to_string(w) +
                  ", (thread, local) -> element " +
                  parallel_layout_text(numel, kernel.sig.threads, w));
  }
  return out;
}

std::string parallel_layout_text(int64_t n, int64_t threads, int width) {
  return to_string(fragment_layout(n, threads, width));
}

Kernel infer_layouts(const Kernel& kernel) {
  const std::string& name = kernel.sig.name;
  const int64_t threads = kernel.sig.threads;
  Collector c(kernel);
  c.visit(kernel.body);
  std::vector<Member>& ms = c.members;

  // 1. Groups: union of Parallels sharing a fragment, the smaller index as the root.
  std::vector<int> parent(ms.size());
  std::iota(parent.begin(), parent.end(), 0);
  std::map<std::string, int> first_user;
  for (size_t i = 0; i < ms.size(); ++i) {
    for (const std::string& f : ms[i].fragments) {
      auto [it, fresh] = first_user.emplace(f, static_cast<int>(i));
      if (fresh) continue;
      int a = find(parent, it->second), b = find(parent, static_cast<int>(i));
      if (a != b) parent[std::max(a, b)] = std::min(a, b);
    }
  }
  std::map<int, std::vector<int>> groups;  // root → members, both in visiting order
  for (size_t i = 0; i < ms.size(); ++i) groups[find(parent, static_cast<int>(i))].push_back(i);

  auto fits = [&](const Member& m, int w) {
    if (m.numel >= 0) return m.numel % w == 0 && m.numel >= threads * w;
    return m.layout.provable >= w;
  };
  for (auto& [root, group] : groups) {
    // 0. A gemm's accumulator: every member follows the tensor core's layout (one round of
    // T x values), whatever the proofs or annotations say. Its values come in pairs of
    // consecutive elements (layout.h value_pairs): a member whose global accesses are proved
    // 2-lane vectors (analyze_accesses asks pairs of an accumulator's parallels, guards uniform
    // over a pair allowed) moves each pair as one vector; the fragment's placement is the same.
    const Layout* acc = nullptr;
    std::string acc_name;
    for (int i : group)
      for (const std::string& f : ms[i].fragments)
        if (auto it = c.accumulators.find(f); it != c.accumulators.end()) {
          if (acc && !(*acc == it->second))
            throw Error("kernel '" + name + "': parallels share gemm accumulators '" + acc_name +
                        "' and '" + f + "' of different layouts");
          acc = &it->second, acc_name = f;
        }
    if (acc) {
      for (int i : group) {
        if (ms[i].numel != acc->size())
          throw Error("kernel '" + name + "': a parallel touching gemm accumulator '" + acc_name +
                      "' must cover its " + std::to_string(acc->size()) + " elements exactly");
        ParallelLayout& l = ms[i].layout;
        l.width = 1;
        l.vectorize = l.provable >= 2 && value_pairs(*acc, threads);
        l.tv = *acc;
      }
      continue;
    }
    int width = 0;
    // 2. The author's width.
    for (int i : group) {
      const ParallelLayout& l = ms[i].layout;
      if (!l.annotated) continue;
      if (width && l.width != width)
        throw Error("kernel '" + name +
                    "': parallels sharing a fragment are annotated with widths " +
                    std::to_string(width) + " and " + std::to_string(l.width));
      width = l.width;
    }
    if (width) {
      for (int i : group) {
        const Member& m = ms[i];
        bool divides = m.numel >= 0 ? m.numel % width == 0 : m.layout.provable >= width;
        if (!divides)
          throw Error("kernel '" + name + "': annotate_layout width " + std::to_string(width) +
                      " does not divide a parallel of " +
                      (m.numel >= 0 ? std::to_string(m.numel) : std::string("symbolic")) +
                      " elements (a vector would cross the end of a row)");
      }
    } else {
      // 3. The smallest provable width, halved until every member fits.
      width = 16;
      bool any = false;
      for (int i : group)
        if (ms[i].layout.provable >= 2) width = std::min(width, ms[i].layout.provable), any = true;
      if (!any) width = 1;
      while (width > 1 &&
             !std::all_of(group.begin(), group.end(), [&](int i) { return fits(ms[i], width); }))
        width /= 2;
    }
    // 4. Vectors where the proofs allow this width.
    for (int i : group) {
      ParallelLayout& l = ms[i].layout;
      l.width = width;
      l.vectorize = width >= 2 && l.provable >= width;
      // The layout lower_parallel follows: one round deals T·W elements, W per thread.
      l.tv = thread_value_layout(kernel.sig.threads, width);
    }
  }
  Kernel out = kernel;
  out.body = Applier(ms).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
