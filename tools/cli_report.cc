#include "tools/cli_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "compiler/base/atomic_file.h"

namespace tilerun::cli {

namespace {

using nlohmann::json;

json layer_json(const LayerTiming& t) {
  return {{"name", t.layer},      {"direction", t.direction},    {"kernels", t.kernels},
          {"host_us", t.host_us}, {"device_us", t.device_us},    {"kernels_us", t.kernels_us},
          {"gap_us", t.gap_us},   {"critical_us", t.critical_us}};
}

json layers_json(const RunResult& r) {
  json layers = json::array();
  for (size_t i = 0; i < r.rows.size(); ++i) {
    json j = layer_json(r.rows[i].t);
    if (i < r.launch_rows.size()) {
      j["launch_host_us"] = r.launch_rows[i].t.host_us;
      j["launch_device_us"] = r.launch_rows[i].t.device_us;
    }
    layers.push_back(j);
  }
  return layers;
}

// The H200's HBM3e bandwidth (data sheet): each kernel's floor is its bytes over it.
constexpr double kFloorGBps = 4800;

// Every kernel of the profiling pass in step order: its op, time, bytes, bandwidth floor and
// whether it is on its layer's critical path.
json kernels_json(const RunResult& r) {
  json kernels = json::array();
  for (const KernelTiming& k : r.profile)
    kernels.push_back({{"layer", k.layer},
                       {"direction", k.direction},
                       {"kernel", k.kernel},
                       {"op", k.op},
                       {"us", k.us},
                       {"bytes", k.bytes},
                       {"floor_us", static_cast<double>(k.bytes) / (kFloorGBps * 1e3)},
                       {"critical", k.critical}});
  return kernels;
}

std::string kernel_timing_source(const RunResult& r) {
  return r.profile.empty() ? "" : r.profile.front().source;
}

json loss_json(const std::vector<LossValue>& losses) {
  json terms = json::array();
  for (const LossValue& l : losses)
    terms.push_back({{"name", l.name}, {"weight", l.weight}, {"value", l.value}});
  return {{"total", total_loss(losses)}, {"terms", terms}};
}

json report_json(const Options& o, const Model& model, const RunResult& r) {
  const CompileStats& cs = r.stats;
  const bool on_gpu = r.device == "cuda";
  json check = nullptr;
  if (r.check)
    check = {{"ok", r.check->ok},
             {"tensors", r.check->tensors_checked},
             {"worst_tensor", r.check->worst_tensor},
             {"worst_error", r.check->worst_error},
             {"tolerance", r.check->tolerance}};
  return {
      {"model", model.name},
      {"device", r.device},
      {"mode", on_gpu ? o.mode : "cpu"},
      {"pdl", on_gpu && o.pdl},
      {"steps", o.steps},
      {"statistic", o.steps == 1 ? "one step" : "median after one warm-up step"},
      {"layers", layers_json(r)},
      {"kernels_total", cs.kernels_total},
      {"kernels_distinct", cs.kernels_distinct},
      {"compile_ms", cs.compile_ms},
      {"arena_bytes", r.arena_bytes},
      {"tensor_bytes", r.tensor_bytes},
      {"check", check},
      {"loss", loss_json(r.losses)},
      {"non_finite", r.non_finite.empty() ? json(nullptr) : json(r.non_finite)},
      {"kernel_timing", kernel_timing_source(r)},
      {"floor_gbps", kFloorGBps},
      {"kernels", kernels_json(r)},
      {"proofs",
       {{"proved", cs.proved},
        {"unknown", cs.unknown},
        {"disproved", cs.disproved},
        {"z3_queries", cs.z3_queries},
        {"z3_disk_hits", cs.z3_disk_hits},
        {"z3_ms", cs.z3_ms},
        {"compile_ms", cs.compile_ms},
        {"compile_thread_ms", cs.compile_thread_ms},
        {"lower_thread_ms", cs.lower_thread_ms},
        {"lowered_from_cache", cs.lowered_from_cache},
        {"kernels_distinct", cs.kernels_distinct},
        {"load_ms", cs.load_ms},
        {"z3_share", cs.compile_thread_ms > 0 ? cs.z3_ms / cs.compile_thread_ms : 0.0}}},
  };
}

// A Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev) of one median step: host spans
// per layer (issuing), device spans per layer, and device spans per kernel from the profiling
// pass. Spans of a track are laid end to end in step order.
json trace_json(const RunResult& r) {
  json events = json::array();
  auto meta = [&](int pid, const char* name) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", name}}}});
  };
  auto span = [&](int pid, const std::string& name, double ts, double dur, json args) {
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"pid", pid},
                      {"tid", 0},
                      {"ts", ts},
                      {"dur", dur},
                      {"args", std::move(args)}});
  };
  meta(1, "host: issuing");
  meta(2, "device: layers");
  meta(3, "device: kernels (profiling pass)");
  double host_t = 0, dev_t = 0, kern_t = 0;
  for (const LayerRow& row : r.rows) {
    const LayerTiming& t = row.t;
    const std::string name = t.layer + " " + t.direction;
    span(1, name, host_t, t.host_us, {{"kernels", t.kernels}});
    span(2, name, dev_t, t.device_us, {{"kernels_us", t.kernels_us}, {"gap_us", t.gap_us}});
    host_t += t.host_us;
    dev_t += t.device_us;
  }
  for (const KernelTiming& k : r.profile) {
    span(3, k.kernel, kern_t, k.us,
         {{"layer", k.layer}, {"direction", k.direction}, {"critical", k.critical}});
    kern_t += k.us;
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
}

void print_both_table(const RunResult& r) {
  std::printf("\n%-16s %-9s %8s %14s %14s %14s %14s\n", "layer", "direction", "kernels",
              "graph host us", "graph dev us", "launch host us", "launch dev us");
  for (size_t i = 0; i < r.rows.size() && i < r.launch_rows.size(); ++i) {
    const LayerTiming &g = r.rows[i].t, &l = r.launch_rows[i].t;
    std::printf("%-16s %-9s %8d %14.2f %14.2f %14.2f %14.2f\n", printable(g.layer).c_str(),
                g.direction.c_str(), g.kernels, g.host_us, g.device_us, l.host_us, l.device_us);
  }
  if (r.difference.empty())
    std::printf("graph and standalone results: bit-identical\n");
  else
    std::printf("graph and standalone results DIFFER: %s\n", printable(r.difference).c_str());
}

void print_table(const RunResult& r) {
  std::printf("\n%-16s %-9s %8s %12s %12s %12s %12s\n", "layer", "direction", "kernels", "host us",
              "device us", "kernels us", "gap us/k");
  double host_total = 0, device_total = 0, kernels_total = 0;
  for (const LayerRow& row : r.rows) {
    const LayerTiming& t = row.t;
    host_total += t.host_us;
    device_total += t.device_us;
    kernels_total += t.kernels_us;
    std::printf("%-16s %-9s %8d %12.2f %12.2f %12.2f %12.3f\n", printable(t.layer).c_str(),
                t.direction.c_str(), t.kernels, t.host_us, t.device_us, t.kernels_us, t.gap_us);
  }
  const int k = r.stats.kernels_total;
  std::printf("%-16s %-9s %8d %12.2f %12.2f %12.2f %12.3f\n", "total", "", k, host_total,
              device_total, kernels_total, k ? (device_total - kernels_total) / k : 0.0);
  std::printf("host us per kernel: %.3f\n", k ? host_total / k : 0.0);
  if (!r.profile.empty()) std::printf("(kernels us: %s)\n", kernel_timing_source(r).c_str());
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u != 0x7f) || (c == '\n' && keep_newlines)) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return out;
}

void print_compiled(const Model& model, const Session& session) {
  const CompileStats& cs = session.compile_stats();
  std::printf(
      "model %s on %s: %d kernels (%d distinct) compiled in %.0f ms; arena %.2f MiB "
      "(tensors %.2f MiB)\n",
      printable(model.name).c_str(), session.device_name().c_str(), cs.kernels_total,
      cs.kernels_distinct, cs.compile_ms, session.arena_bytes() / 1048576.0,
      session.tensor_bytes() / 1048576.0);
  std::printf(
      "index proofs: %d proved, %d unknown (guard kept), %d disproved; %d Z3 queries (%d from the "
      "disk cache), %.0f ms of solver time (%.0f%% of the compile threads' %.0f ms: lowering and "
      "proofs %.0f ms (%d of %d kernels from the lowering cache), code generation %.0f ms); "
      "kernels loaded in %.0f ms\n",
      cs.proved, cs.unknown, cs.disproved, cs.z3_queries, cs.z3_disk_hits, cs.z3_ms,
      cs.compile_thread_ms > 0 ? 100.0 * cs.z3_ms / cs.compile_thread_ms : 0.0,
      cs.compile_thread_ms, cs.lower_thread_ms, cs.lowered_from_cache, cs.kernels_distinct,
      cs.compile_thread_ms - cs.lower_thread_ms, cs.load_ms);
}

double total_loss(const std::vector<LossValue>& losses) {
  double total = 0;
  for (const LossValue& l : losses) total += l.weight * l.value;
  return total;
}

void print_loss(int step, const std::vector<LossValue>& losses) {
  std::string line = step > 0 ? "step " + std::to_string(step) + ": loss " : "loss ";
  char number[64];
  std::snprintf(number, sizeof number, "%.9g", total_loss(losses));
  line += number;
  for (size_t i = 0; losses.size() > 1 && i < losses.size(); ++i) {
    std::snprintf(number, sizeof number, "%.9g", losses[i].value);
    line += (i ? ", " : " = ") + printable(losses[i].name) + " " + number;
    if (losses[i].weight != 1.0) {
      std::snprintf(number, sizeof number, "%g", losses[i].weight);
      line += std::string(" x ") + number;
    }
  }
  std::printf("%s\n", line.c_str());
}

void print_results(const Options& o, const RunResult& r) {
  if (r.launch_rows.empty())
    print_table(r);
  else
    print_both_table(r);
  const std::string over = o.steps == 1 ? "1 step"
                                        : "the median of " + std::to_string(o.steps - 1) +
                                              " steps after one warm-up step";
  if (r.device != "cuda")
    std::printf("(CPU backend: host and device time are both the layer's wall time; %s)\n",
                over.c_str());
  else
    std::printf("(%s)\n", over.c_str());
  print_loss(0, r.losses);
  if (r.check) {
    const CheckResult& c = *r.check;
    std::printf("check: %s, %d tensors; worst %s: relative L2 error %.3g (tolerance %.0e)\n",
                c.ok ? "ok" : "MISMATCH", c.tensors_checked, printable(c.worst_tensor).c_str(),
                c.worst_error, c.tolerance);
    if (!r.non_finite.empty())
      std::printf("check: FAILED, %s holds NaN or Inf\n", printable(r.non_finite).c_str());
  }
  // Flush the table first, so that on a terminal the warning comes after it.
  std::fflush(stdout);
  if (!r.non_finite.empty())
    std::fprintf(stderr,
                 "tilerun: warning: %s holds NaN or Inf (the first such input of an index "
                 "selection such as topk's, else output or gradient)\n",
                 printable(r.non_finite).c_str());
}

void write_outputs(const Options& o, const Model& model, const RunResult& r) {
  if (!o.save.empty()) write_safetensors(o.save, r.results);
  if (!o.trace.empty()) compiler::write_file_atomically(o.trace, trace_json(r).dump(1) + "\n");
  if (!o.report.empty())
    compiler::write_file_atomically(o.report, report_json(o, model, r).dump(2) + "\n");
}

}  // namespace tilerun::cli
