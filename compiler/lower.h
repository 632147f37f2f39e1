// The compiler's pipeline from Tile IR to SIMT IR as data: one table of named passes (lower.cc),
// which lower(), its trace, --dump-kernels, tilerun-opt and the pass tests all iterate.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "compiler/analysis/analyze_accesses.h"
#include "compiler/ir/kernel.h"
#include "compiler/ir/simt_verifier.h"

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

// A kernel at either level, as passes hand it on.
using AnyKernel = std::variant<Kernel, SimtKernel>;

// The IR form a verifier checks: Tile IR, or SIMT IR at one of its stages.
struct IrForm {
  bool tile = true;
  SimtForm simt = SimtForm::Lowered;  // meaningful when !tile
  bool operator==(const IrForm&) const = default;
};
inline constexpr IrForm kTileForm{true, SimtForm::Lowered};
constexpr IrForm simt_form(SimtForm f) { return {false, f}; }
// "tile", "simt lowered", "simt flat", "simt storage-typed", "simt complete".
std::string form_name(IrForm form);
// The first problem `kernel` has as IR of `form` ("" when none; a Tile IR problem is the
// verifier's Error message).
std::string form_problem(const AnyKernel& kernel, IrForm form);

// One step of the pipeline.
struct PassInfo {
  const char* name;
  IrForm input;     // what the pass reads (the previous entry's output; Tile for the first)
  IrForm output;    // what its verifier checks afterwards
  const char* why;  // why it runs at this point of the pipeline
  AnyKernel (*run)(const AnyKernel& kernel, const LowerOptions& options);
};

// The passes in pipeline order.
const std::vector<PassInfo>& pipeline();
// The entry named `name`, or nullptr.
const PassInfo* find_pass(const std::string& name);

// Runs the named passes of pipeline() on `kernel` in the given order. Each pass's input is
// checked against its input form first (tilerun::Error, Usage, "pass P reads <form> IR: ...",
// so a pass applied to the wrong level is the caller's mistake), its output after it (Error,
// Runtime). Unknown names are an Error (Usage) listing the valid ones.
AnyKernel run_passes(const AnyKernel& kernel, const std::vector<std::string>& names,
                     const LowerOptions& options = {});

// Verifies `kernel` (tilerun::Error for an author's mistake) and lowers it to a complete,
// verified SimtKernel through every pass of pipeline(). Deterministic: the same kernel always
// gives the same SIMT IR.
SimtKernel lower(const Kernel& kernel, const LowerOptions& options = {});

}  // namespace tilerun::compiler
