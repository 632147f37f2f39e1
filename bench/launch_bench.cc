// tilerun_launch_bench: what issuing a step costs, per kernel, through the public Session API.
//
// For every config (default: configs/bench/chain200.yaml and dag200.yaml) and every way a step
// can be issued (CUDA graph replay and standalone cuLaunchKernel on a GPU; the CPU backend when
// there is no CUDA device), it runs steps and reports, from Session::timings(), the MEDIAN over
// the measured steps (after a warm-up) of
//   host_us            host time spent issuing the step (sum over layers)
//   dev_us             device time of the step (events around each layer, summed)
//   host_us/kernel     host_us / kernels: the per-kernel issue cost
//   dev_us/kernel      dev_us / kernels
//   host_us_p90, dev_us_p90   the 90th percentiles, to show the spread
//   kernels            kernel nodes in the measured direction(s)
//   fwd_host_us, fwd_dev_us, bwd_host_us, bwd_dev_us   per direction (the "step" runs only)
//   kern_us            with --tilerun_profile only: the kernels' own device time, from one
//                      profiling pass after the measured steps (Session::profile: standalone
//                      launches timed by CUPTI, or events). Off by default: CUPTI stays attached
//                      once used and would slow the host side of every later benchmark.
//   gap_us/kernel      (dev_us - kern_us) / kernels: device time per kernel that is not kernel
//                      work (launch latency, dependency waits, idle while the host issues)
// as Google Benchmark counters. The benchmark's own time column is the wall time of a whole
// step including the synchronisation at the end of each direction and reading the timings.
// Benchmarks are named CONFIG/WAY/WHAT: WAY is graph|launch (CUDA) or cpu, WHAT is forward
// (forward() only) or step (forward() + backward()).
// On the CPU backend host and device time are both the layer's wall time (the CPU executor has
// no separate issue cost); the context line "tilerun_device" says which backend ran.
//
// Flags (besides every --benchmark_* flag):
//   --tilerun_config=A.yaml[,B.yaml...]  models to run (default: the two configs/bench models)
//   --tilerun_device=auto|cpu|cuda       auto (default): CUDA when a device is present, else CPU
//   --tilerun_forward_only               compile the forward direction only (no "step" runs)
//   --tilerun_warmup=N                   steps run once per session before measuring (default 20)
//   --tilerun_steps=N                    measured steps per benchmark (default: Google
//                                        Benchmark's automatic count, at least 0.5 s of steps)
//   --tilerun_seed=S                     initialiser seed (default 0)
//   --tilerun_profile                    add kern_us and gap_us/kernel (see above; run it alone)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tilerun/tilerun.h"

namespace {

struct Flags {
  std::vector<std::string> configs;
  std::string device = "auto";
  bool forward_only = false;
  int warmup = 20;
  int64_t steps = 0;
  uint64_t seed = 0;
  bool profile = false;
};

Flags g_flags;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "tilerun_launch_bench: %s\n", what.c_str());
  std::exit(2);
}

int64_t parse_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0) usage_error(flag + " expects a non-negative integer");
  return v;
}

// Removes the --tilerun_* flags from argv (Google Benchmark rejects flags it does not know).
void parse_flags(int* argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string a = argv[i];
    auto value_of = [&](const std::string& prefix, std::string* out) {
      if (a.rfind(prefix + "=", 0) != 0) return false;
      *out = a.substr(prefix.size() + 1);
      return true;
    };
    std::string v;
    if (value_of("--tilerun_config", &v)) {
      g_flags.configs = split(v, ',');
    } else if (value_of("--tilerun_device", &v)) {
      if (v != "auto" && v != "cpu" && v != "cuda")
        usage_error("--tilerun_device expects auto|cpu|cuda, found '" + v + "'");
      g_flags.device = v;
    } else if (a == "--tilerun_forward_only") {
      g_flags.forward_only = true;
    } else if (a == "--tilerun_profile") {
      g_flags.profile = true;
    } else if (value_of("--tilerun_warmup", &v)) {
      g_flags.warmup = static_cast<int>(parse_int("--tilerun_warmup", v));
    } else if (value_of("--tilerun_steps", &v)) {
      g_flags.steps = parse_int("--tilerun_steps", v);
      if (g_flags.steps == 0) usage_error("--tilerun_steps expects at least 1");
    } else if (value_of("--tilerun_seed", &v)) {
      g_flags.seed = static_cast<uint64_t>(parse_int("--tilerun_seed", v));
    } else if (a.rfind("--tilerun_", 0) == 0) {
      usage_error("unknown flag '" + a + "' (see the comment at the top of bench/launch_bench.cc)");
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;
}

// The shipped benchmark models, found next to the sources this was built from, else relative to
// the working directory (the repository root on a benchmark host).
std::vector<std::string> default_configs() {
  std::vector<std::string> out;
  for (const char* name : {"chain200.yaml", "dag200.yaml"}) {
    std::string built = std::string(TILERUN_SOURCE_DIR) + "/configs/bench/" + name;
    out.push_back(std::filesystem::exists(built) ? built : std::string("configs/bench/") + name);
  }
  return out;
}

// One compiled session per (config, issue mode), created on first use and warmed up once.
struct Entry {
  std::unique_ptr<tilerun::Model> model;
  std::unique_ptr<tilerun::Session> session;
  std::string error;  // non-empty: creating it failed
};
std::map<std::string, Entry> g_sessions;

tilerun::Session* session_for(const std::string& config, tilerun::Device device,
                              tilerun::LaunchMode mode, std::string* error) {
  std::string key = config + (device == tilerun::Device::Cpu       ? "|cpu"
                              : mode == tilerun::LaunchMode::Graph ? "|graph"
                                                                   : "|launch");
  Entry& e = g_sessions[key];
  if (!e.session && e.error.empty()) {
    try {
      e.model = std::make_unique<tilerun::Model>(tilerun::load_model(config));
      tilerun::SessionOptions options;
      options.device = device;
      options.mode = mode;
      options.seed = g_flags.seed;
      options.forward_only = g_flags.forward_only;
      e.session = std::make_unique<tilerun::Session>(*e.model, options);
      for (int i = 0; i < g_flags.warmup; ++i) {
        e.session->forward();
        if (!g_flags.forward_only) e.session->backward();
      }
    } catch (const std::exception& ex) {
      e.error = ex.what();
      e.session.reset();
    }
  }
  *error = e.error;
  return e.session.get();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank on [0, n-1], averaging the two middle values for the median of an even count.
  double pos = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

// The kernels' own device time of one step (Session::profile(): one extra step, kernel by
// kernel) in the measured direction(s); a negative value where this tilerun has no profile().
// A template so that the bench builds against a Session with or without profile().
template <class S>
double kernels_us_of(S& s, bool with_backward) {
  if constexpr (requires { s.profile(); }) {
    s.profile();
    double us = 0;
    for (const auto& t : s.timings())
      if (with_backward || t.direction == "forward") us += t.kernels_us;
    return us;
  } else {
    return -1;
  }
}

void run_steps(benchmark::State& state, std::string config, tilerun::Device device,
               tilerun::LaunchMode mode, bool with_backward) {
  std::string error;
  tilerun::Session* s = session_for(config, device, mode, &error);
  if (!s) {
    state.SkipWithError(error.c_str());
    return;
  }
  // Per measured step: host and device µs of the whole step and of each direction.
  std::vector<double> host, dev, host_dir[2], dev_dir[2];
  int kernels = 0;
  try {
    for (auto _ : state) {
      s->forward();
      if (with_backward) s->backward();
      double h[2] = {0, 0}, d[2] = {0, 0};
      int k = 0;
      for (const tilerun::LayerTiming& t : s->timings()) {
        // timings() also holds the last backward after a forward-only step: skip it.
        const int dir = t.direction == "forward" ? 0 : 1;
        if (!with_backward && dir != 0) continue;
        h[dir] += t.host_us;
        d[dir] += t.device_us;
        k += t.kernels;
      }
      host.push_back(h[0] + h[1]);
      dev.push_back(d[0] + d[1]);
      for (int i = 0; i < 2; ++i) host_dir[i].push_back(h[i]), dev_dir[i].push_back(d[i]);
      kernels = k;
    }
  } catch (const std::exception& ex) {
    state.SkipWithError(ex.what());
    return;
  }
  const double per = kernels > 0 ? 1.0 / kernels : 0.0;
  const double host_med = percentile(host, 0.5), dev_med = percentile(dev, 0.5);
  state.counters["kernels"] = kernels;
  state.counters["host_us"] = host_med;
  state.counters["dev_us"] = dev_med;
  state.counters["host_us/kernel"] = host_med * per;
  state.counters["dev_us/kernel"] = dev_med * per;
  state.counters["host_us_p90"] = percentile(host, 0.9);
  state.counters["dev_us_p90"] = percentile(dev, 0.9);
  try {
    // After the timed loop, so the profiling pass is not among the measured steps.
    const double kern = g_flags.profile ? kernels_us_of(*s, with_backward) : -1;
    if (kern >= 0) {
      state.counters["kern_us"] = kern;
      state.counters["gap_us/kernel"] = (dev_med - kern) * per;
    }
  } catch (const std::exception& ex) {
    state.SkipWithError(ex.what());
    return;
  }
  if (with_backward) {
    state.counters["fwd_host_us"] = percentile(host_dir[0], 0.5);
    state.counters["fwd_dev_us"] = percentile(dev_dir[0], 0.5);
    state.counters["bwd_host_us"] = percentile(host_dir[1], 0.5);
    state.counters["bwd_dev_us"] = percentile(dev_dir[1], 0.5);
  }
  state.SetLabel(s->device_name() == "cpu" ? "cpu backend: host = device = wall time"
                                           : "median of " + std::to_string(host.size()) + " steps");
}

// Whether a CUDA session can be created (compiling the first config for graph mode, which is
// then reused by its benchmark).
bool cuda_available(const std::string& first_config, std::string* why) {
  return session_for(first_config, tilerun::Device::Cuda, tilerun::LaunchMode::Graph, why) !=
         nullptr;
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

}  // namespace

int main(int argc, char** argv) {
  parse_flags(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  if (g_flags.configs.empty()) g_flags.configs = default_configs();

  bool cuda = false;
  std::string why;
  if (g_flags.device != "cpu") {
    cuda = cuda_available(g_flags.configs.front(), &why);
    if (!cuda && g_flags.device == "cuda") {
      std::fprintf(stderr, "tilerun_launch_bench: --tilerun_device=cuda: %s\n", why.c_str());
      return 1;
    }
    if (!cuda)
      std::fprintf(stderr,
                   "tilerun_launch_bench: no CUDA session (%s); benchmarking the CPU backend, "
                   "where host and device time are both wall time\n",
                   why.c_str());
  }
  benchmark::AddCustomContext("tilerun_version", tilerun::version());
  benchmark::AddCustomContext("tilerun_device", cuda ? "cuda"
                                                : g_flags.device == "cpu"
                                                    ? "cpu (--tilerun_device=cpu)"
                                                    : "cpu (no CUDA device)");
  benchmark::AddCustomContext("tilerun_warmup_steps", std::to_string(g_flags.warmup));
  benchmark::AddCustomContext("tilerun_statistic", "median over the measured steps");

  struct Way {
    const char* name;
    tilerun::Device device;
    tilerun::LaunchMode mode;
  };
  std::vector<Way> ways;
  if (cuda)
    ways = {{"graph", tilerun::Device::Cuda, tilerun::LaunchMode::Graph},
            {"launch", tilerun::Device::Cuda, tilerun::LaunchMode::Launch}};
  else
    ways = {{"cpu", tilerun::Device::Cpu, tilerun::LaunchMode::Graph}};

  for (const std::string& config : g_flags.configs) {
    for (const Way& w : ways) {
      for (bool with_backward : {false, true}) {
        if (with_backward && g_flags.forward_only) continue;
        std::string name = stem(config) + "/" + w.name + (with_backward ? "/step" : "/forward");
        auto* b = benchmark::RegisterBenchmark(name.c_str(), run_steps, config, w.device, w.mode,
                                               with_backward);
        b->Unit(benchmark::kMicrosecond)->UseRealTime();
        if (g_flags.steps > 0)
          b->Iterations(g_flags.steps);
        else
          b->MinTime(0.5);
      }
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
