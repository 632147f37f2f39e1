// The run behind the tilerun command line: compile, bind --weights, run the steps (both launch
// modes side by side under --mode both), profile, check. What it measured goes to cli_report.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tilerun/tilerun.h"
#include "tools/cli_options.h"

namespace tilerun::cli {

// One layer in one direction: medians over the timed steps, in the order of the first step.
struct LayerRow {
  LayerTiming t;
  int samples = 0;
};

struct RunResult {
  std::string device;  // "cpu" | "cuda"
  CompileStats stats;  // of the (first) session
  int64_t arena_bytes = 0, tensor_bytes = 0;
  std::vector<LayerRow> rows;         // the run; under --mode both, CUDA graph replay
  std::vector<LayerRow> launch_rows;  // under --mode both: standalone launches
  std::string difference;         // under --mode both: the first tensor whose bits differ, or ""
  std::vector<LossValue> losses;  // each loss term after the last step
  std::vector<KernelTiming> profile;  // every kernel's own time, from the profiling pass
  std::optional<CheckResult> check;   // under --check
  // The first tensor holding a NaN or an Inf, or "": a value an index-writing op (topk)
  // chose by (Session::selection_inputs), else an output or gradient.
  std::string non_finite;
  TensorMap results;  // outputs, gradients ("grad.NAME") and trained weights, for --save

  // Exit 1: the two modes differ, or --check found a mismatch or a non-finite value.
  bool failed() const;
};

// Resolves the device (--mode both on the CPU is refused here, before compiling), loads
// --weights, compiles one session (two under --mode both), printing each one's compile summary,
// and runs the steps. Throws tilerun::Error.
RunResult run_steps(const Options& o, const Model& model);

// The first tensor of `tensors` (in name order) that holds a NaN or an infinity, or "".
std::string first_non_finite(const TensorMap& tensors);

}  // namespace tilerun::cli
