// What a Session is asked to do and what it reports back: options, per-layer and per-kernel
// timings, compile statistics and the check result. Plain values, below the Session facade, so
// the executors (graph/runtime/) can use them without reaching up to the facade.
#pragma once

#include <cstdint>
#include <string>

namespace tilerun {

enum class Device { Auto, Cpu, Cuda };
// How a CUDA step is issued; ignored on the CPU.
enum class LaunchMode { Graph, Launch };

struct SessionOptions {
  Device device = Device::Auto;  // Auto: the GPU when there is one, else the CPU backend
  LaunchMode mode = LaunchMode::Graph;
  // Programmatic dependent launch: a kernel's prologue overlaps its predecessor's tail (CUDA
  // only). Outputs are bit-identical either way.
  bool pdl = true;
  // Session::profile() on a GPU: true times each kernel from CUPTI activity records (events
  // where libcupti is missing or a tool such as compute-sanitizer is attached); false never
  // loads CUPTI and times each kernel with events around its launch.
  bool profile = true;
  uint64_t seed = 0;          // for tensors not bound explicitly (the documented initialiser)
  std::string dump_dir;       // non-empty: write each kernel's IR and code there
  bool forward_only = false;  // compile no backward kernels (backward() is then an error)
  // Fold an add of a matmul's product that nothing else reads into the matmul (its epilogue on
  // the tensor cores), and such a fake_quant of an rmsnorm's, rmsnorm_rope's or swiglu's output
  // into their kernel: one kernel fewer each, the same bits either way.
  bool fold = true;
  // Keep a weight's MXFP4 fake_quant that only grouped GEMMs read as FP4 codes and e8m0 scales,
  // which the GEMMs decode in shared memory (graph/fold_fp4_weights.h): a quarter of the weight
  // bytes, the same bits. Off by default: the decoding GEMMs measured slower than the bf16 ones
  // they replace (bench/RESULTS.md, fortieth session).
  bool fp4_weights = false;
  // Called with one line of compile progress at a time (e.g. "compiling 12/31 kernels").
  void (*progress)(const char* line) = nullptr;
};

// Time spent on one layer in one direction during the last step.
struct LayerTiming {
  std::string layer;      // e.g. "block.0"
  std::string direction;  // "forward" | "backward"
  int kernels = 0;
  double host_us = 0;    // issuing it (on the CPU: the layer's wall time)
  double device_us = 0;  // executing it (on the CPU: the layer's wall time)
  // After profile(): the sum of the layer's kernels' own durations, and from it the average
  // time per kernel that is not kernel work: (device_us - kernels_us) / kernels.
  double kernels_us = 0;
  double gap_us = 0;
  // After profile(): the longest chain of the layer's kernels through their dependencies (the
  // kernel graph's edges), each weighted by its own duration: the layer's device time if every
  // independent branch ran side by side with no gaps. kernels_us / critical_us is the overlap
  // the graph allows.
  double critical_us = 0;
};

// One kernel's own duration, from Session::profile().
struct KernelTiming {
  std::string layer, direction, kernel;
  std::string op;  // the op the kernel comes from (a backward op's own name, e.g. matmul)
  double us = 0;
  // The bytes of the tensors the kernel is handed (each read or written once at least): over
  // the device's bandwidth, the floor of a memory-bound kernel.
  int64_t bytes = 0;
  // How `us` was measured: "CUPTI activity records" (the GPU's own timestamps), "events around
  // each launch (why CUPTI was not used)", or on the CPU "wall time of each kernel".
  std::string source;
  // On its layer's critical path: the chain of dependent kernels whose times sum to the layer's
  // LayerTiming::critical_us (the first such chain where two are as long). Making a kernel off
  // it faster cannot shorten the layer below that; making one on it faster can.
  bool critical = false;
};

struct CompileStats {
  int kernels_distinct = 0;  // compiled kernels
  int kernels_total = 0;     // kernel nodes of a whole step
  double compile_ms = 0;     // wall time of compiling every distinct kernel (proofs included)
  // The index proofs of every distinct kernel: safety questions (in bounds, store uniqueness)
  // proved, left unknown (the guard stays), disproved (a race is a compile error, so 0 here);
  // Z3 queries over all questions (guards and vectorisation too) and their summed time.
  int proved = 0, unknown = 0, disproved = 0;
  int z3_queries = 0;
  int z3_disk_hits = 0;  // of the queries, verdicts read from the on-disk cache (no solver time)
  double z3_ms = 0;
  // The compile threads' time summed over the distinct kernels (lowering, proofs, code
  // generation), the measure z3_ms is a share of (both are summed over threads).
  double compile_thread_ms = 0;
  // Of compile_thread_ms: lowering with its proofs (the compiler's passes), the rest code
  // generation and the backend (LLVM or NVRTC, or their on-disk caches).
  double lower_thread_ms = 0;
  // Distinct kernels whose lowering (and proofs) came from the on-disk lowering cache.
  int lowered_from_cache = 0;
  // Of compile_ms (wall): loading the compiled kernels into the device (CUDA modules, serially
  // after the compile threads); 0 on the CPU.
  double load_ms = 0;
};

// The last step compared with the double-precision reference composed over the same graph.
struct CheckResult {
  bool ok = true;
  int tensors_checked = 0;
  std::string worst_tensor;  // e.g. "block.1.y" or "grad(block.0.w1)"
  double worst_error = 0;    // relative L2 error of the worst tensor
  double tolerance = 0;      // its dtype's tolerance
};

}  // namespace tilerun
