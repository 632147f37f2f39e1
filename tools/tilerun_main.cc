// The tilerun command line: validate a model, compile it, run forward and backward steps, and
// report host vs device time per layer. Exit codes: 0 success, 1 run-time failure or a --check
// mismatch, 2 bad usage or bad model.
//
// Structure: parse_args turns argv into Options (usage errors throw tilerun::Error), then one
// function per mode does the work. Adding an option means a field, a line in kUsage and a case
// in parse_args.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tilerun/tilerun.h"

namespace {

constexpr const char* kUsage = R"(usage: tilerun MODEL.yaml [options]

Compiles MODEL.yaml (see docs/model-format.md), runs forward + backward steps and prints the
host and device time per layer and direction.

options:
  --device auto|cpu|cuda   where to run (auto: the GPU when there is one, else the CPU)
  --mode graph|launch|both how a CUDA step is issued: CUDA graph replay (default), standalone
                           launches, or both side by side (exit 1 unless bit-identical)
  --steps N                steps to run (default 1); timings are medians over them after one
                           warm-up step
  --forward-only           compile and run the forward direction only
  --check                  compare outputs and gradients with the double-precision reference
                           (exit 1 on a mismatch)
  --weights FILE           load inputs and weights from a .safetensors file (others: --seed)
  --seed S                 seed of the initialiser for tensors not loaded (default 0)
  --save FILE              write outputs and gradients ("grad.NAME") as .safetensors
  --report FILE            write a JSON report
  --pdl on|off             programmatic dependent launch between kernels (CUDA; default on)
  --profile on|off         time kernels with CUPTI (on, default) or with events only (off)
  --trace FILE             write a Chrome/Perfetto trace of a step (host and device spans per
                           layer, device spans per kernel from a profiling pass)
  --dump-kernels DIR       write each kernel's Tile IR, SIMT IR and generated code
  --validate               only check the model and print its summary
  -h, --help               show this help and exit
  --version                print the version and exit
  --                       treat every later argument as the model path

exit codes: 0 success, 1 run-time failure or --check mismatch, 2 bad usage or bad model
)";

struct Options {
  bool help = false, version = false, validate = false, forward_only = false, check = false;
  std::string model_path, device = "auto", mode = "graph", weights, save, report, dump_dir, trace;
  bool pdl = true, profile = true;
  int steps = 1;
  uint64_t seed = 0;
};

uint64_t parse_number(const std::string& flag, const std::string& text, uint64_t max) {
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || text[0] == '-' || v > max)
    throw tilerun::Error("option " + flag + " expects a non-negative integer up to " +
                         std::to_string(max) + ", found '" + text + "'");
  return v;
}

std::string one_of(const std::string& flag, const std::string& value,
                   const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : "|") + a;
  throw tilerun::Error("option " + flag + " expects " + list + ", found '" + value + "'");
}

Options parse_args(const std::vector<std::string>& args) {
  Options o;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size())
        throw tilerun::Error("option " + a + " expects a value (see 'tilerun --help')");
      return args[++i];
    };
    if (options_done || a.size() < 2 || a[0] != '-') {
      if (!o.model_path.empty())
        throw tilerun::Error("more than one model given ('" + o.model_path + "' and '" + a +
                             "'); expected one MODEL.yaml (see 'tilerun --help')");
      o.model_path = a;
    } else if (a == "--") {
      options_done = true;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--version") {
      o.version = true;
    } else if (a == "--validate") {
      o.validate = true;
    } else if (a == "--forward-only") {
      o.forward_only = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--device") {
      o.device = one_of(a, value(), {"auto", "cpu", "cuda"});
    } else if (a == "--mode") {
      o.mode = one_of(a, value(), {"graph", "launch", "both"});
    } else if (a == "--steps") {
      o.steps = static_cast<int>(parse_number(a, value(), 1000000));
      if (o.steps == 0) throw tilerun::Error("option --steps expects at least 1, found '0'");
    } else if (a == "--seed") {
      o.seed = parse_number(a, value(), UINT64_MAX);
    } else if (a == "--weights") {
      o.weights = value();
    } else if (a == "--save") {
      o.save = value();
    } else if (a == "--report") {
      o.report = value();
    } else if (a == "--pdl") {
      o.pdl = one_of(a, value(), {"on", "off"}) == "on";
    } else if (a == "--profile") {
      o.profile = one_of(a, value(), {"on", "off"}) == "on";
    } else if (a == "--trace") {
      o.trace = value();
    } else if (a == "--dump-kernels") {
      o.dump_dir = value();
    } else {
      throw tilerun::Error("unknown option '" + a + "' (see 'tilerun --help')");
    }
  }
  return o;
}

// Parse and check the model, then print what it contains.
int validate(const tilerun::Model& model) {
  std::fputs(tilerun::model_summary(model).c_str(), stdout);
  return 0;
}

void print_progress(const char* line) {
  if (::isatty(2)) std::fprintf(stderr, "\r%s", line);
}

// Per layer and direction, medians over the steps, in the order of the first step.
struct LayerRow {
  tilerun::LayerTiming t;  // host and device µs: medians over the timed steps
  int samples = 0;
};

// The per-kernel durations of the last profiling pass (for --trace).
std::vector<tilerun::KernelTiming> last_profile;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs the steps and reports each layer's median host and device time over them, the first
// step left out as a warm-up when there are more (it may pay one-time costs: caches, clocks).
std::vector<LayerRow> run_session(tilerun::Session& session, const Options& o) {
  std::vector<LayerRow> rows;
  std::vector<std::vector<double>> host, device;
  for (int step = 0; step < o.steps; ++step) {
    session.forward();
    if (!o.forward_only) session.backward();
    std::vector<tilerun::LayerTiming> timings = session.timings();
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
  return rows;
}

// One more step kernel by kernel gives each layer's own kernel time, and so its gaps. Run after
// every timed step of every session: CUPTI, once attached, slows the driver calls that follow.
void add_profile(tilerun::Session& session, std::vector<LayerRow>& rows) {
  last_profile = session.profile();
  std::vector<tilerun::LayerTiming> profiled = session.timings();
  for (size_t i = 0; i < rows.size() && i < profiled.size(); ++i) {
    rows[i].t.kernels_us = profiled[i].kernels_us;
    rows[i].t.gap_us = rows[i].t.kernels > 0
                           ? (rows[i].t.device_us - rows[i].t.kernels_us) / rows[i].t.kernels
                           : 0;
  }
}

tilerun::TensorMap results(const tilerun::Session& session, bool forward_only) {
  tilerun::TensorMap all = session.outputs();
  if (!forward_only)
    for (auto& [name, t] : session.gradients()) all["grad." + name] = std::move(t);
  return all;
}

// The first tensor whose bytes differ, or "" when every tensor is bit-identical.
std::string first_difference(const tilerun::TensorMap& a, const tilerun::TensorMap& b) {
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.data != t.data) return name;
  }
  return a.size() == b.size() ? "" : "(tensor count)";
}

tilerun::SessionOptions session_options(const Options& o, tilerun::LaunchMode mode) {
  tilerun::SessionOptions so;
  so.device = o.device == "cpu"    ? tilerun::Device::Cpu
              : o.device == "cuda" ? tilerun::Device::Cuda
                                   : tilerun::Device::Auto;
  so.mode = mode;
  so.pdl = o.pdl;
  so.profile = o.profile;
  so.seed = o.seed;
  so.dump_dir = o.dump_dir;
  so.forward_only = o.forward_only;
  so.progress = print_progress;
  return so;
}

std::unique_ptr<tilerun::Session> open_session(const Options& o, const tilerun::Model& model,
                                               tilerun::LaunchMode mode) {
  auto session = std::make_unique<tilerun::Session>(model, session_options(o, mode));
  if (::isatty(2)) std::fputs("\n", stderr);
  const tilerun::CompileStats& cs = session->compile_stats();
  std::printf(
      "model %s on %s: %d kernels (%d distinct) compiled in %.0f ms; arena %.2f MiB "
      "(tensors %.2f MiB)\n",
      model.name.c_str(), session->device_name().c_str(), cs.kernels_total, cs.kernels_distinct,
      cs.compile_ms, session->arena_bytes() / 1048576.0, session->tensor_bytes() / 1048576.0);
  std::printf(
      "index proofs: %d proved, %d unknown (guard kept), %d disproved; %d Z3 queries, "
      "%.0f ms of solver time (%.0f%% of the compile threads' %.0f ms)\n",
      cs.proved, cs.unknown, cs.disproved, cs.z3_queries, cs.z3_ms,
      cs.compile_thread_ms > 0 ? 100.0 * cs.z3_ms / cs.compile_thread_ms : 0.0,
      cs.compile_thread_ms);
  if (!o.weights.empty()) session->set_tensors(tilerun::load_tensors(model, o.weights, o.seed));
  return session;
}

nlohmann::json layer_json(const tilerun::LayerTiming& t) {
  return {{"name", t.layer},      {"direction", t.direction}, {"kernels", t.kernels},
          {"host_us", t.host_us}, {"device_us", t.device_us}, {"kernels_us", t.kernels_us},
          {"gap_us", t.gap_us}};
}

// A Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev) of one median step: host spans
// per layer (issuing), device spans per layer, and device spans per kernel from the profiling
// pass. Spans of a track are laid end to end in step order.
void write_trace(const std::string& path, const std::vector<LayerRow>& rows,
                 const std::vector<tilerun::KernelTiming>& kernels) {
  nlohmann::json events = nlohmann::json::array();
  auto meta = [&](int pid, const char* name) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", name}}}});
  };
  meta(1, "host: issuing");
  meta(2, "device: layers");
  meta(3, "device: kernels (profiling pass)");
  double host_t = 0, dev_t = 0, kern_t = 0;
  for (const LayerRow& r : rows) {
    std::string name = r.t.layer + " " + r.t.direction;
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"pid", 1},
                      {"tid", 0},
                      {"ts", host_t},
                      {"dur", r.t.host_us},
                      {"args", {{"kernels", r.t.kernels}}}});
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"pid", 2},
                      {"tid", 0},
                      {"ts", dev_t},
                      {"dur", r.t.device_us},
                      {"args", {{"kernels_us", r.t.kernels_us}, {"gap_us", r.t.gap_us}}}});
    host_t += r.t.host_us;
    dev_t += r.t.device_us;
  }
  for (const tilerun::KernelTiming& k : kernels) {
    events.push_back({{"ph", "X"},
                      {"name", k.kernel},
                      {"pid", 3},
                      {"tid", 0},
                      {"ts", kern_t},
                      {"dur", k.us},
                      {"args", {{"layer", k.layer}, {"direction", k.direction}}}});
    kern_t += k.us;
  }
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ns"}}.dump(1) << "\n";
  if (!out)
    throw tilerun::Error("cannot write the trace '" + path + "'", tilerun::ErrorKind::Runtime);
}

// Compile, bind, run the steps; print the per-layer table; check, save and report.
int run_steps(const Options& o, const tilerun::Model& model) {
  const bool both = o.mode == "both";
  auto session = open_session(
      o, model, o.mode == "launch" ? tilerun::LaunchMode::Launch : tilerun::LaunchMode::Graph);
  const bool on_gpu = session->device_name() == "cuda";
  if (both && !on_gpu)
    throw tilerun::Error(
        "--mode both compares CUDA graph replay with standalone launches and "
        "needs a CUDA device; this run is on the CPU",
        tilerun::ErrorKind::Runtime);
  std::vector<LayerRow> rows = run_session(*session, o);
  int rc = 0;
  nlohmann::json layers = nlohmann::json::array();
  double host_total = 0, device_total = 0;
  if (both) {
    auto standalone = open_session(o, model, tilerun::LaunchMode::Launch);
    std::vector<LayerRow> launch_rows = run_session(*standalone, o);
    add_profile(*session, rows);  // for --trace and the report; after both sessions' steps
    std::printf("\n%-16s %-9s %8s %14s %14s %14s %14s\n", "layer", "direction", "kernels",
                "graph host us", "graph dev us", "launch host us", "launch dev us");
    for (size_t i = 0; i < rows.size(); ++i) {
      const tilerun::LayerTiming &g = rows[i].t, &l = launch_rows[i].t;
      std::printf("%-16s %-9s %8d %14.2f %14.2f %14.2f %14.2f\n", g.layer.c_str(),
                  g.direction.c_str(), g.kernels, g.host_us, g.device_us, l.host_us, l.device_us);
      nlohmann::json j = layer_json(g);
      j["launch_host_us"] = l.host_us;
      j["launch_device_us"] = l.device_us;
      layers.push_back(j);
    }
    std::string diff =
        first_difference(results(*session, o.forward_only), results(*standalone, o.forward_only));
    if (diff.empty()) {
      std::printf("graph and standalone results: bit-identical\n");
    } else {
      std::printf("graph and standalone results DIFFER: %s\n", diff.c_str());
      rc = 1;
    }
  } else {
    add_profile(*session, rows);
    std::printf("\n%-16s %-9s %8s %12s %12s %12s %12s\n", "layer", "direction", "kernels",
                "host us", "device us", "kernels us", "gap us/k");
    double kernels_total = 0;
    for (const LayerRow& r : rows) {
      host_total += r.t.host_us;
      device_total += r.t.device_us;
      kernels_total += r.t.kernels_us;
      std::printf("%-16s %-9s %8d %12.2f %12.2f %12.2f %12.3f\n", r.t.layer.c_str(),
                  r.t.direction.c_str(), r.t.kernels, r.t.host_us, r.t.device_us, r.t.kernels_us,
                  r.t.gap_us);
      layers.push_back(layer_json(r.t));
    }
    const int k = session->compile_stats().kernels_total;
    std::printf("%-16s %-9s %8d %12.2f %12.2f %12.2f %12.3f\n", "total", "", k, host_total,
                device_total, kernels_total, k ? (device_total - kernels_total) / k : 0.0);
    std::printf("host us per kernel: %.3f\n", k ? host_total / k : 0.0);
    if (!last_profile.empty())
      std::printf("(kernels us: %s)\n", last_profile.front().source.c_str());
  }
  const std::string over = o.steps == 1 ? "1 step"
                                        : "the median of " + std::to_string(o.steps - 1) +
                                              " steps after one warm-up step";
  if (!on_gpu)
    std::printf("(CPU backend: host and device time are both the layer's wall time; %s)\n",
                over.c_str());
  else
    std::printf("(%s)\n", over.c_str());

  nlohmann::json check = nullptr;
  if (o.check) {
    tilerun::CheckResult c = session->check();
    std::printf("check: %s, %d tensors; worst %s: relative L2 error %.3g (tolerance %.0e)\n",
                c.ok ? "ok" : "MISMATCH", c.tensors_checked, c.worst_tensor.c_str(), c.worst_error,
                c.tolerance);
    check = {{"ok", c.ok},
             {"tensors", c.tensors_checked},
             {"worst_tensor", c.worst_tensor},
             {"worst_error", c.worst_error},
             {"tolerance", c.tolerance}};
    if (!c.ok) rc = 1;
  }
  if (!o.save.empty()) tilerun::write_safetensors(o.save, results(*session, o.forward_only));
  if (!o.trace.empty()) write_trace(o.trace, rows, last_profile);
  if (!o.report.empty()) {
    const tilerun::CompileStats& cs = session->compile_stats();
    nlohmann::json report = {
        {"model", model.name},
        {"device", session->device_name()},
        {"mode", on_gpu ? o.mode : "cpu"},
        {"pdl", on_gpu && o.pdl},
        {"steps", o.steps},
        {"statistic", o.steps == 1 ? "one step" : "median after one warm-up step"},
        {"layers", layers},
        {"kernels_total", cs.kernels_total},
        {"kernels_distinct", cs.kernels_distinct},
        {"compile_ms", cs.compile_ms},
        {"arena_bytes", session->arena_bytes()},
        {"tensor_bytes", session->tensor_bytes()},
        {"check", check},
        {"kernel_timing", last_profile.empty() ? "" : last_profile.front().source},
        {"proofs",
         {{"proved", cs.proved},
          {"unknown", cs.unknown},
          {"disproved", cs.disproved},
          {"z3_queries", cs.z3_queries},
          {"z3_ms", cs.z3_ms},
          {"compile_ms", cs.compile_ms},
          {"compile_thread_ms", cs.compile_thread_ms},
          {"z3_share", cs.compile_thread_ms > 0 ? cs.z3_ms / cs.compile_thread_ms : 0.0}}},
    };
    std::ofstream out(o.report);
    out << report.dump(2) << "\n";
    if (!out)
      throw tilerun::Error("cannot write the report '" + o.report + "'",
                           tilerun::ErrorKind::Runtime);
  }
  return rc;
}

int run(const std::vector<std::string>& args) {
  Options o = parse_args(args);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (o.version) {
    std::printf("tilerun %s\n", tilerun::version());
    return 0;
  }
  if (o.model_path.empty()) throw tilerun::Error("no model given\n" + std::string(kUsage));
  tilerun::Model model = tilerun::load_model(o.model_path);
  if (o.validate) return validate(model);
  return run_steps(o, model);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tilerun::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilerun: internal error: %s\n", e.what());
    return 1;
  }
}
