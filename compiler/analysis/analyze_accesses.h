// The index analysis (compiler/README.md, pipeline step analyze_accesses): on Tile IR after
// lower_reductions, every global and shared load/store index map becomes integer constraints over
// block indices, parallel element coordinates, loop variables and dims (bounds, divisibility),
// asked through index_solver.h:
//   in_bounds  each access, under its guards                          (reported)
//   guard      an integer `if` condition holds everywhere it is reached → the guard is removed
//   unique     a store's (block, element) → address map is injective; disproved → tilerun::Error
//              "<kernel>: <buf> written twice: (block=.., tid=..) and (..) → offset N"
//   vector     contiguous and 16-byte aligned along the innermost parallel axis → the
//              Parallel's `provable` width, which infer_layouts and vectorize_accesses turn
//              into vector loads/stores
// Unknown is never proved: the guard stays, the access stays scalar, no error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/analysis/index_solver.h"
#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

struct AccessVerdict {
  std::string question;  // "in_bounds", "guard", "unique", "vector"
  std::string buffer;    // empty for guards
  std::string access;    // the access or condition as IR text
  ProofResult result;
  std::string note;  // what the verdict did (e.g. "guard removed") or the collision text
  // The access's Tile IR indices and the buffer's shape, for replaying a counterexample
  // (unique: the model names per-execution variables with suffixes "@a" and "@b").
  std::vector<Expr> indices, shape;
};

// What a kernel's analysis cost and found; graph/ sums these over a model.
struct AnalysisStats {
  int proved = 0, unknown = 0, disproved = 0;  // every question
  int z3_queries = 0, cache_hits = 0;
  int z3_disk_hits = 0;  // of z3_queries, verdicts read from the on-disk cache
  double z3_ms = 0;
  int guards_removed = 0, guards_kept = 0, vectorizable = 0, scalar = 0;
  AnalysisStats& operator+=(const AnalysisStats& o);
};

struct AnalysisReport {
  std::string kernel;
  bool pinned = false;  // the kernel's dims were pinned to AnalysisOptions::concrete
  AnalysisStats stats;
  std::vector<AccessVerdict> verdicts;  // in IR visiting order (deterministic)
  // One line per verdict plus a stats line: the <name>.proofs.txt of --dump-kernels.
  std::string text() const;
};

struct AnalysisOptions {
  bool enabled = true;
  ProofBudget budget;  // safety questions: in_bounds, unique
  // Optimisation questions (guard, vector) only decide whether code gets faster; an unknown
  // keeps the guard or the scalar access, so they get a small step budget of their own.
  ProofBudget optimisation_budget{.rlimit = 200'000};
  bool throw_on_race = true;  // false: a disproved `unique` is only reported (tests)
  // The dims' values at every launch of the kernel, when the caller knows them (a model whose
  // launches of this kernel all agree). A question not proved over the symbolic dims is asked
  // again over these ("@concrete" in the report); when such a verdict removes a guard or makes
  // an access vector, the returned kernel's dims are pinned to these values, so a launch with
  // any other shape is refused by the launch check instead of running unproved code.
  std::map<std::string, int64_t> concrete;
};

// Returns `kernel` with proved-redundant guards removed; fills `report` when given.
Kernel analyze_accesses(const Kernel& kernel, const AnalysisOptions& options,
                        AnalysisReport* report);

}  // namespace tilerun::compiler
