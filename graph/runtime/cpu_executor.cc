// The CPU executor: one arena in host memory, every node's arguments packed once, a step is a
// loop over pre-bound launches of JIT-compiled kernels.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "compiler/base/check.h"
#include "compiler/codegen/cpu_backend.h"
#include "graph/runtime/executor.h"

namespace tilerun::graph {

namespace {

using Clock = std::chrono::steady_clock;

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const KernelGraph& g, const Model& model, const SessionOptions& options,
              CompileStats& stats)
      : graph_(g), model_(model) {
    auto start = Clock::now();
    kernels_.resize(g.kernels.size());
    compile_kernels(g, options, stats, [&](size_t i, const compiler::SimtKernel& k) {
      kernels_[i] = compiler::compile_cpu(k);
    });
    stats.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    stats.kernels_distinct = static_cast<int>(kernels_.size());
    stats.kernels_total = static_cast<int>(g.nodes.size());
    // 64-byte aligned storage for the whole arena; zeroed, which is also the value of every
    // gradient that nothing writes.
    arena_.reset(static_cast<uint8_t*>(
        ::operator new[](static_cast<size_t>(std::max<int64_t>(g.plan.arena_bytes, 1)),
                         std::align_val_t(kArenaAlignment))));
    std::memset(arena_.get(), 0, static_cast<size_t>(std::max<int64_t>(g.plan.arena_bytes, 1)));
    for (const KernelNode& node : g.nodes) {
      compiler::KernelArgs args{.buffers = {}, .dims = node.dims, .scalars = node.scalars};
      for (int t : node.buffers) args.buffers.push_back(arena_.get() + g.plan.offsets[t]);
      args_.push_back(std::move(args));
    }
  }

  std::string device_name() const override { return "cpu"; }

  void write_tensor(int tensor, const void* data, int64_t bytes) override {
    std::memcpy(arena_.get() + graph_.plan.offsets[tensor], data, static_cast<size_t>(bytes));
  }
  void write_tensor_from_device(int tensor, const void*, int64_t) override {
    throw Error("tensor '" + graph_.ops.tensors[tensor].name +
                "': binding from device memory needs a CUDA session; this one runs on the CPU");
  }
  void read_tensor(int tensor, void* data, int64_t bytes) const override {
    std::memcpy(data, arena_.get() + graph_.plan.offsets[tensor], static_cast<size_t>(bytes));
  }

  std::string profile_source() const override { return "wall time of each kernel"; }

  std::vector<double> profile(Direction direction) override {
    std::vector<double> us(graph_.nodes.size(), 0.0);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (graph_.nodes[i].direction != direction) continue;
      auto start = Clock::now();
      kernels_[graph_.nodes[i].kernel]->launch(args_[i]);
      us[i] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    }
    return us;
  }

  std::vector<LayerTiming> run(Direction direction) override {
    std::vector<LayerTiming> timings;
    size_t i = 0;
    const size_t n = graph_.nodes.size();
    while (i < n) {
      if (graph_.nodes[i].direction != direction) {
        ++i;
        continue;
      }
      // One group = consecutive nodes of one layer.
      const int layer = graph_.nodes[i].layer;
      auto start = Clock::now();
      int count = 0;
      for (; i < n && graph_.nodes[i].direction == direction && graph_.nodes[i].layer == layer;
           ++i, ++count)
        kernels_[graph_.nodes[i].kernel]->launch(args_[i]);
      double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      timings.push_back({.layer = model_.layers[layer].name,
                         .direction = direction_name(direction),
                         .kernels = count,
                         .host_us = us,
                         .device_us = us});
    }
    return timings;
  }

 private:
  struct ArenaDelete {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(kArenaAlignment)); }
  };

  const KernelGraph& graph_;
  const Model& model_;
  std::vector<std::unique_ptr<compiler::CpuKernel>> kernels_;
  std::unique_ptr<uint8_t[], ArenaDelete> arena_;
  std::vector<compiler::KernelArgs> args_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const KernelGraph& graph, const Model& model,
                                            const SessionOptions& options, CompileStats& stats) {
  return std::make_unique<CpuExecutor>(graph, model, options, stats);
}

}  // namespace tilerun::graph
