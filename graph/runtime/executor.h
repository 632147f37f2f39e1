// The executor interface every device implements (CPU here; CUDA standalone launches and CUDA
// graph replay later), and the compiled program it runs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/analysis/analyze_accesses.h"
#include "compiler/lower.h"
#include "graph/kernel_graph.h"
#include "tilerun/model.h"
#include "tilerun/run_options.h"

namespace tilerun::graph {

// How kernel `k` of `graph` is lowered: when every launch of it binds the same dims, those
// values are the analysis's concrete shape (proofs the symbolic dims leave open are retried on
// them; compiling and dumping use the same options, so dumps show the code that runs).
compiler::LowerOptions lower_options(const KernelGraph& graph, size_t k);

// Lowers every distinct kernel of `graph` (with its proofs, summed into `stats`) and hands its
// SIMT IR to `compile(index, simt)` on all cores, with progress lines; rethrows the first failure
// by kernel index.
void compile_kernels(const KernelGraph& graph, const SessionOptions& options, CompileStats& stats,
                     const std::function<void(size_t, const compiler::SimtKernel&)>& compile);

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string device_name() const = 0;
  // Copies a tensor's bytes in or out of its planned place in the arena.
  virtual void write_tensor(int tensor, const void* data, int64_t bytes) = 0;
  virtual void read_tensor(int tensor, void* data, int64_t bytes) const = 0;
  // Copies a tensor in from device memory (CUDA executors; the CPU executor refuses).
  virtual void write_tensor_from_device(int tensor, const void* device_ptr, int64_t bytes) = 0;
  // Runs every node of one direction, in order; returns per-layer timings of that run.
  virtual std::vector<LayerTiming> run(Direction direction) = 0;
  // Runs every node of one direction on its own, timing each; returns µs per node (indexed like
  // KernelGraph::nodes, 0 for nodes of the other direction).
  virtual std::vector<double> profile(Direction direction) = 0;
  // Where the last profile()'s durations came from, in words.
  virtual std::string profile_source() const = 0;
};

// Compiles every distinct kernel of `graph` for the CPU backend (in parallel, results placed in
// a fixed order), allocates the arena and packs each node's arguments once.
std::unique_ptr<Executor> make_cpu_executor(const KernelGraph& graph, const Model& model,
                                            const SessionOptions& options, CompileStats& stats);

// The same for a CUDA device: NVRTC-compiled kernels, a device arena, and either standalone
// launches or CUDA graph replay (options.mode). Throws tilerun::Error (kind Runtime) "no CUDA
// device" where there is none.
std::unique_ptr<Executor> make_cuda_executor(const KernelGraph& graph, const Model& model,
                                             const SessionOptions& options, CompileStats& stats);

}  // namespace tilerun::graph
