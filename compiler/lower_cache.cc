#include "compiler/lower_cache.h"

#include <sstream>

#include "compiler/analysis/index_solver.h"
#include "compiler/base/build_id.h"
#include "compiler/base/disk_cache.h"
#include "compiler/base/sha256.h"
#include "compiler/ir/ir_parser.h"
#include "compiler/ir/ir_printer.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

namespace {

std::string budget_text(const ProofBudget& b) {
  return std::to_string(b.rlimit) + " " + std::to_string(b.seed) + " " +
         std::to_string(b.backstop_s) + " " + (b.use_z3 ? "z3" : "cheap");
}

// Everything the lowered kernel depends on, as text.
std::string key_text(const Kernel& kernel, const AnalysisOptions& a) {
  std::ostringstream key;
  key << "lowered 1\nbuild " << library_build_id() << "\nz3 " << z3_version() << "\nanalysis "
      << a.enabled << " " << a.throw_on_race << " " << budget_text(a.budget) << " "
      << budget_text(a.optimisation_budget) << "\nconcrete";
  for (const auto& [name, value] : a.concrete) key << " " << name << "=" << value;  // sorted
  key << "\n" << print(kernel);
  return key.str();
}

// The entry: "proved P unknown U disproved D\n" and the SIMT text.
std::string payload(const CachedLowering& l) {
  return "proved " + std::to_string(l.proofs.proved) + " unknown " +
         std::to_string(l.proofs.unknown) + " disproved " + std::to_string(l.proofs.disproved) +
         "\n" + print(l.kernel);
}

bool read_payload(const std::string& text, const std::string& kernel, CachedLowering* out) {
  std::istringstream in(text);
  std::string proved, unknown, disproved;
  if (!(in >> proved >> out->proofs.proved >> unknown >> out->proofs.unknown >> disproved >>
        out->proofs.disproved) ||
      proved != "proved" || unknown != "unknown" || disproved != "disproved")
    return false;
  const size_t body = text.find('\n');
  if (body == std::string::npos) return false;
  try {
    out->kernel = parse_simt_kernel(text.substr(body + 1), kernel + ".sir", SimtForm::Complete);
  } catch (const Error&) {
    return false;
  }
  return true;
}

}  // namespace

ProofCounts proof_counts(const AnalysisReport& report) {
  ProofCounts c;
  for (const AccessVerdict& v : report.verdicts) {
    if (v.question != "in_bounds" && v.question != "unique") continue;
    (v.result.outcome == Outcome::Proved    ? c.proved
     : v.result.outcome == Outcome::Unknown ? c.unknown
                                            : c.disproved)++;
  }
  return c;
}

CachedLowering lower_cached(const Kernel& kernel, const LowerOptions& options,
                            const std::string& cache_dir) {
  const bool enabled = !cache_dir.empty() && !library_build_id().empty();
  const DiskCache cache(enabled ? cache_dir : "", "lowered-v1", "tilerun-lowered 1",
                        "lowered kernel");
  std::string digest;
  if (cache.enabled()) {
    digest = sha256_hex(key_text(kernel, options.analysis));
    if (std::optional<std::string> text = cache.load(digest, kernel.sig.name)) {
      CachedLowering hit;
      if (read_payload(*text, kernel.sig.name, &hit)) {
        hit.hit = true;
        return hit;
      }
    }
  }
  LowerOptions lo;
  lo.analysis = options.analysis;
  AnalysisReport report;
  lo.report = &report;
  CachedLowering out;
  out.kernel = lower(kernel, lo);
  out.proofs = proof_counts(report);
  out.stats = report.stats;
  if (cache.enabled()) cache.store(digest, payload(out));
  return out;
}

}  // namespace tilerun::compiler
