// The compiler's pipeline from Tile IR to SIMT IR: the one place that says which passes run in
// which order (lower.cc).
#pragma once

#include <string>
#include <vector>

#include "compiler/analysis/analyze_accesses.h"
#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

struct LowerOptions {
  // When set, receives (pass name, IR text after the pass) for every step, in order.
  std::vector<std::pair<std::string, std::string>>* trace = nullptr;
  // The index analysis (analyze_accesses.h): budget, on/off.
  AnalysisOptions analysis;
  // When set, receives the analysis verdicts and stats (proved/unknown/disproved, Z3 queries/ms).
  AnalysisReport* report = nullptr;
  // When set, receives infer_layouts' decisions, a line per Parallel (describe_layouts).
  std::vector<std::string>* layouts = nullptr;
};

// Verifies `kernel` (tilerun::Error for an author's mistake) and lowers it to a complete,
// verified SimtKernel. Deterministic: the same kernel always gives the same SIMT IR.
SimtKernel lower(const Kernel& kernel, const LowerOptions& options = {});

}  // namespace tilerun::compiler
