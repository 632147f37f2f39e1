#include "tools/cli_run.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "graph/runtime/cuda_driver.h"
#include "tools/cli_report.h"

namespace tilerun::cli {

namespace {

void print_progress(const char* line) {
  if (::isatty(2)) std::fprintf(stderr, "\r%s", printable(line).c_str());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Where the run goes, decided before compiling: --mode both on the CPU is a usage mistake, and
// a session given Auto would decide it only after the compile.
Device resolve_device(const Options& o) {
  Device device = o.device == "cpu"      ? Device::Cpu
                  : o.device == "cuda"   ? Device::Cuda
                  : graph::cuda_driver() ? Device::Cuda
                                         : Device::Cpu;
  if (o.mode == "both" && device == Device::Cpu)
    throw Error(
        "--mode both compares CUDA graph replay with standalone launches and needs a CUDA "
        "device; there is none here (--device auto chose the CPU)");
  return device;
}

SessionOptions session_options(const Options& o, Device device, LaunchMode mode) {
  SessionOptions so;
  so.device = device;
  so.mode = mode;
  so.pdl = o.pdl;
  so.fold = o.fold;
  so.fp4_weights = o.fp4_weights;
  so.profile = o.profile;
  so.seed = o.seed;
  so.dump_dir = o.dump_dir;
  so.forward_only = o.forward_only;
  so.progress = print_progress;
  return so;
}

std::unique_ptr<Session> open_session(const Options& o, const Model& model, Device device,
                                      LaunchMode mode, const TensorMap& weights) {
  auto session = std::make_unique<Session>(model, session_options(o, device, mode));
  if (::isatty(2)) std::fputs("\n", stderr);
  print_compiled(model, *session);
  session->set_tensors(weights);
  return session;
}

// Outputs and gradients of the pass just run; after training, also the weights as they are now.
TensorMap results(const Session& session, bool forward_only) {
  TensorMap all = session.outputs();
  if (!forward_only)
    for (auto& [name, t] : session.gradients()) all["grad." + name] = std::move(t);
  return all;
}

void add_weights(const Session& session, TensorMap& all) {
  for (const TensorDecl& t : session.model().tensors)
    if (t.role == TensorRole::Weight) all[t.name] = session.tensor(t.name);
}

// What the steps leave: each layer's timings, the last step's losses, and what --save writes
// and --check checks, taken from the last step itself (the profiling pass after the steps runs
// forward and backward again, on the trained weights: its outputs are not the last step's).
struct Steps {
  std::vector<LayerRow> rows;
  std::vector<LossValue> losses;
  TensorMap results;           // the last step's outputs and gradients; after training, the weights
  TensorMap selection_inputs;  // the last step's values that topk-like ops chose indices by
  std::optional<CheckResult> check;
};

// Runs the steps and reports each layer's median host and device time over them, the first
// step left out as a warm-up when there are more (it may pay one-time costs: caches, clocks).
// Under --print-loss each step's loss goes to stdout as it is computed. With an optimizer each
// step ends with the update, so the steps train the model: the saved weights are those after
// exactly --steps updates, the saved outputs and gradients those the last update used, and
// --check (when `check`) checks that last forward and backward before its update.
Steps time_steps(Session& session, const Options& o, bool check) {
  Steps out;
  std::vector<LayerRow>& rows = out.rows;
  std::vector<std::vector<double>> host, device;
  const bool train = !o.forward_only && session.model().optimizer.kind != OptimizerDecl::Kind::None;
  for (int step = 0; step < o.steps; ++step) {
    session.forward();
    out.losses = session.losses();
    if (o.print_loss) print_loss(step + 1, out.losses);
    if (!o.forward_only) session.backward();
    if (step == o.steps - 1) {
      out.results = results(session, o.forward_only);
      out.selection_inputs = session.selection_inputs();
      if (check) out.check = session.check();
    }
    if (train) session.update();
    std::vector<LayerTiming> timings = session.timings();
    if (rows.empty()) {
      rows.resize(timings.size());
      host.resize(timings.size());
      device.resize(timings.size());
    }
    if (step == 0 && o.steps > 1) continue;
    for (size_t i = 0; i < timings.size(); ++i) {
      if (rows[i].samples++ == 0) rows[i].t = timings[i];
      host[i].push_back(timings[i].host_us);
      device[i].push_back(timings[i].device_us);
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].t.host_us = median(host[i]);
    rows[i].t.device_us = median(device[i]);
  }
  if (train) add_weights(session, out.results);
  return out;
}

// One more step kernel by kernel gives each layer's own kernel time, and so its gaps. Run after
// every timed step of every session: CUPTI, once attached, slows the driver calls that follow.
std::vector<KernelTiming> add_profile(Session& session, std::vector<LayerRow>& rows) {
  std::vector<KernelTiming> kernels = session.profile();
  std::vector<LayerTiming> profiled = session.timings();
  for (size_t i = 0; i < rows.size() && i < profiled.size(); ++i) {
    rows[i].t.kernels_us = profiled[i].kernels_us;
    rows[i].t.critical_us = profiled[i].critical_us;
    rows[i].t.gap_us = rows[i].t.kernels > 0
                           ? (rows[i].t.device_us - rows[i].t.kernels_us) / rows[i].t.kernels
                           : 0;
  }
  return kernels;
}

// The first tensor whose bytes differ, or "" when every tensor is bit-identical.
std::string first_difference(const TensorMap& a, const TensorMap& b) {
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.data != t.data) return name;
  }
  return a.size() == b.size() ? "" : "(tensor count)";
}

// Element i of a float tensor has every exponent bit set: a NaN or an infinity. Integer and
// FP4 tensors are always finite; F8E4M3 has no infinity, and its NaN is S.1111.111.
bool non_finite_at(DType dtype, const uint8_t* data, int64_t i) {
  auto bits16 = [&] {
    uint16_t b;
    std::memcpy(&b, data + 2 * i, 2);
    return b;
  };
  switch (dtype) {
    case DType::F32: {
      uint32_t b;
      std::memcpy(&b, data + 4 * i, 4);
      return (b & 0x7f800000u) == 0x7f800000u;
    }
    case DType::BF16:
      return (bits16() & 0x7f80u) == 0x7f80u;
    case DType::F16:
      return (bits16() & 0x7c00u) == 0x7c00u;
    case DType::F8E4M3:
      return (data[i] & 0x7fu) == 0x7fu;
    case DType::F8E5M2:
      return (data[i] & 0x7cu) == 0x7cu;
    case DType::E8M0:
      return data[i] == 0xffu;
    default:
      return false;
  }
}

}  // namespace

bool RunResult::failed() const {
  return !difference.empty() || (check && (!check->ok || !non_finite.empty()));
}

std::string first_non_finite(const TensorMap& tensors) {
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i)
      if (non_finite_at(t.dtype, t.data.data(), i)) return name;
  }
  return "";
}

RunResult run_steps(const Options& o, const Model& model) {
  const Device device = resolve_device(o);
  // Read and checked against the model before the compile, so a bad file costs nothing.
  TensorMap weights;
  if (!o.weights.empty())
    weights = load_tensors(model, o.weights, o.seed,
                           o.allow_missing ? MissingTensors::Initialize : MissingTensors::Refuse);
  const bool both = o.mode == "both";
  auto session = open_session(o, model, device,
                              o.mode == "launch" ? LaunchMode::Launch : LaunchMode::Graph, weights);
  RunResult r;
  r.device = session->device_name();
  r.stats = session->compile_stats();
  r.arena_bytes = session->arena_bytes();
  r.tensor_bytes = session->tensor_bytes();
  Steps steps = time_steps(*session, o, o.check);
  r.rows = std::move(steps.rows);
  r.losses = std::move(steps.losses);
  r.results = std::move(steps.results);
  r.check = std::move(steps.check);
  if (both) {
    auto standalone = open_session(o, model, device, LaunchMode::Launch, weights);
    Steps launch = time_steps(*standalone, o, false);
    r.launch_rows = std::move(launch.rows);
    r.difference = first_difference(r.results, launch.results);
  }
  r.profile = add_profile(*session, r.rows);  // after every session's timed steps
  // A selection's input first: a NaN there may reach no output, only the routing.
  r.non_finite = first_non_finite(steps.selection_inputs);
  if (r.non_finite.empty()) r.non_finite = first_non_finite(r.results);
  return r;
}

}  // namespace tilerun::cli
