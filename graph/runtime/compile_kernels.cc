// Compiling a program's distinct kernels: lowered with their proofs (or read back from the
// lowering cache, compiler/lower_cache.h) and handed to a backend on all cores. Each result lands
// at its own index and the proof stats are summed in kernel order, so nothing depends on
// scheduling.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "compiler/base/disk_cache.h"
#include "compiler/lower_cache.h"
#include "graph/runtime/executor.h"

namespace tilerun::graph {

namespace {

void add_counts(const compiler::ProofCounts& c, const compiler::AnalysisStats& s,
                CompileStats& stats) {
  stats.proved += c.proved;
  stats.unknown += c.unknown;
  stats.disproved += c.disproved;
  stats.z3_queries += s.z3_queries;
  stats.z3_disk_hits += s.z3_disk_hits;
  stats.z3_ms += s.z3_ms;
}

}  // namespace

compiler::LowerOptions lower_options(const KernelGraph& g, size_t k) {
  compiler::LowerOptions options;
  const std::vector<int64_t>* dims = nullptr;
  for (const KernelNode& n : g.nodes) {
    if (n.kernel != static_cast<int>(k)) continue;
    if (dims && *dims != n.dims) return options;  // launched at several shapes: symbolic only
    dims = &n.dims;
  }
  if (!dims) return options;
  const compiler::KernelSignature& sig = g.kernels[k]->sig;
  for (size_t d = 0; d < sig.dims.size() && d < dims->size(); ++d)
    options.analysis.concrete[sig.dims[d].name] = (*dims)[d];
  return options;
}

void compile_kernels(const KernelGraph& g, const SessionOptions& options, CompileStats& stats,
                     const std::function<void(size_t, const compiler::SimtKernel&)>& compile) {
  const size_t n = g.kernels.size();
  const std::string cache_dir = compiler::default_cache_dir();
  std::vector<compiler::ProofCounts> proofs(n);
  std::vector<compiler::AnalysisStats> analysis(n);
  std::vector<char> from_cache(n, 0);
  std::vector<std::exception_ptr> errors(n);
  std::vector<double> busy_ms(n, 0.0);   // per kernel: the compile thread's time on it
  std::vector<double> lower_ms(n, 0.0);  // of it, lowering and proofs (or the cache's answer)
  std::atomic<size_t> next{0}, done{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      auto start = std::chrono::steady_clock::now();
      try {
        compiler::CachedLowering lowered =
            compiler::lower_cached(*g.kernels[i], lower_options(g, i), cache_dir);
        proofs[i] = lowered.proofs;
        analysis[i] = lowered.stats;
        from_cache[i] = lowered.hit;
        lower_ms[i] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        compile(i, lowered.kernel);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      busy_ms[i] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      size_t d = done.fetch_add(1) + 1;
      if (options.progress) {
        std::string line = "compiling kernels " + std::to_string(d) + "/" + std::to_string(n);
        options.progress(line.c_str());
      }
    }
  };
  size_t threads = std::max<size_t>(1, std::min<size_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  for (size_t i = 0; i < n; ++i) {
    add_counts(proofs[i], analysis[i], stats);
    stats.lowered_from_cache += from_cache[i];
    stats.compile_thread_ms += busy_ms[i];
    stats.lower_thread_ms += lower_ms[i];
  }
}

}  // namespace tilerun::graph
