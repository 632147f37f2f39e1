// A Session runs a model's training step (forward, backward) on a device: it compiles every
// kernel once, plans one arena, binds inputs and weights, and replays the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilerun/model.h"
#include "tilerun/run_options.h"
#include "tilerun/tensor.h"

namespace tilerun {

// One term of the model's loss, as computed by the last forward().
struct LossValue {
  std::string name;
  double weight = 1.0;
  double value = 0;
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
  // aligned, holding the tensor's bytes): they are copied into the session's arena, on the
  // session's own stream, before this returns. Work of yours that writes those bytes must be
  // finished first (synchronise its stream): the session's stream does not wait for others.
  // CUDA sessions only; a misaligned pointer or a CPU session is a tilerun::Error.
  void set_tensor_from_device(const std::string& name, const void* device_ptr);

  void forward();   // computes the outputs
  void backward();  // after forward(): the gradient of every input and weight under the loss
  // After backward(), for a model with `optimizer:`: updates every weight in place (sgd or
  // adamw, whose state lives in the session and starts at zero). The outputs, losses and
  // gradients then belong to the old weights, so reading them needs a new forward() (and
  // backward()).
  void update();

  HostTensor tensor(const std::string& name) const;    // any input, weight or output
  HostTensor gradient(const std::string& name) const;  // of an input or weight, after backward()
  TensorMap outputs() const;
  TensorMap gradients() const;  // keyed by the input's or weight's name
  // After forward(): the float tensors that ops writing indices choose them by (topk's input: a
  // router's logits), which no output need show: a NaN there only changes the routing.
  TensorMap selection_inputs() const;
  // After forward(): each loss term (the model's `loss:`, in order); the loss is the sum of
  // weight * value over them.
  std::vector<LossValue> losses() const;

  // Compares every output and loss value (and, after backward(), every gradient) of the last
  // step with the reference: L2 error within 1e-4 for f32 tensors, 2e-2 for bf16/f16, relative to
  // the reference's norm or, for a tensor whose true value is near zero, to a floor set by the
  // step's scale (the RMS of its inputs, weights and outputs: 1% of it for f32, all of it for
  // 16-bit types), so rounding noise around a ~0 gradient is not a mismatch.
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
