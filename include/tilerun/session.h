// A Session runs a model's training step (forward, backward) on a device: it compiles every
// kernel once, plans one arena, binds inputs and weights, and replays the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilerun/model.h"
#include "tilerun/tensor.h"

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
  uint64_t seed = 0;          // for tensors not bound explicitly (the documented initialiser)
  std::string dump_dir;       // non-empty: write each kernel's IR and code there
  bool forward_only = false;  // compile no backward kernels (backward() is then an error)
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
};

// One kernel's own duration, from Session::profile().
struct KernelTiming {
  std::string layer, direction, kernel;
  double us = 0;
  // How `us` was measured: "CUPTI activity records" (the GPU's own timestamps), "events around
  // each launch (why CUPTI was not used)", or on the CPU "wall time of each kernel".
  std::string source;
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
  double z3_ms = 0;
  // The compile threads' time summed over the distinct kernels (lowering, proofs, code
  // generation), the measure z3_ms is a share of (both are summed over threads).
  double compile_thread_ms = 0;
};

// The last step compared with the double-precision reference composed over the same graph.
struct CheckResult {
  bool ok = true;
  int tensors_checked = 0;
  std::string worst_tensor;  // e.g. "block.1.y" or "grad(block.0.w1)"
  double worst_error = 0;    // relative L2 error of the worst tensor
  double tolerance = 0;      // its dtype's tolerance
};

class Session {
 public:
  // Compiles the model for the device. Throws tilerun::Error (kind Runtime) when the device is
  // not available, e.g. "no CUDA device".
  explicit Session(const Model& model, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Model& model() const;
  std::string device_name() const;  // "cpu" or "cuda"
  const CompileStats& compile_stats() const;
  int64_t arena_bytes() const;   // the memory plan's arena
  int64_t tensor_bytes() const;  // the sum of the planned tensors' sizes

  // Binds an input or weight by name (dtype and shape must match the model).
  void set_tensor(const std::string& name, const HostTensor& value);
  void set_tensors(const TensorMap& values);
  // Binds an input or weight from CUDA device memory (a CUdeviceptr as a pointer, 16-byte
  // aligned, holding the tensor's bytes): they are copied into the session's arena. CUDA
  // sessions only; a misaligned pointer or a CPU session is a tilerun::Error.
  void set_tensor_from_device(const std::string& name, const void* device_ptr);

  void forward();   // computes the outputs
  void backward();  // after forward(): the gradient of every input and weight under the loss

  HostTensor tensor(const std::string& name) const;    // any input, weight or output
  HostTensor gradient(const std::string& name) const;  // of an input or weight, after backward()
  TensorMap outputs() const;
  TensorMap gradients() const;  // keyed by the input's or weight's name

  // Compares every output (and, after backward(), every gradient) of the last step with the
  // reference: relative L2 error within 1e-4 for f32 tensors, 2e-2 for bf16/f16.
  CheckResult check() const;

  // Per layer and direction, for the last forward() and backward().
  std::vector<LayerTiming> timings() const;

  // Runs one extra step kernel by kernel (standalone launches timed by CUPTI activity records,
  // or events around each where libcupti is missing, on a GPU; wall time per kernel on the CPU)
  // Profile after timing: once CUPTI is attached it stays attached to the process, and every
  // later launch costs more host time (a graph launch ~1.5 -> ~5 µs on the H200). and
  // returns every kernel's own duration; afterwards timings() also carries kernels_us and gap_us.
  std::vector<KernelTiming> profile();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilerun
