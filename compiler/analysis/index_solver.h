// Proves facts about integer index arithmetic: a cheap check first (facts already known, interval
// bounds), Z3 (QF_NIA) only when that cannot decide. Every Z3 query runs in a fresh context with
// a fixed seed and step budget (rlimit), so a verdict never depends on machine load; a wall-clock
// backstop interrupts a query Z3 fails to bound and throws tilerun::Error naming it. Verdicts
// are cached process-wide by sha256(canonical query text, budget, Z3 version), and on disk
// under the same key (default_cache_dir(), folder z3-verdict-v1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"

namespace tilerun::compiler {

struct ProofBudget {
  uint64_t rlimit = 4'000'000;  // Z3 resource steps per query (deterministic)
  unsigned seed = 0;
  double backstop_s = 60;  // wall clock; exceeding it is an Error, never a silent unknown
  bool use_z3 = true;      // false: cheap checks only (undecided → unknown)
};

enum class Outcome : uint8_t { Proved, Disproved, Unknown };
const char* outcome_name(Outcome o);

struct Interval {
  int64_t lo, hi;
};

// Prove `goal` (Bool, integer arithmetic over named Vars) for every assignment satisfying all
// `facts`. Loads are free values of their type. `ranges` feeds the interval check.
struct IndexQuery {
  std::string name;  // names the query in errors and reports
  std::vector<Expr> facts;
  std::map<std::string, Interval> ranges;
  Expr goal;
  // False when facts were dropped or terms over-approximated: then a Z3 model is not a real
  // counterexample and `sat` reads as Unknown.
  bool exact = true;
};

struct ProofResult {
  Outcome outcome = Outcome::Unknown;
  std::string method;      // "fact", "interval", "z3", "none"
  bool cached = false;     // answered by an earlier identical question in this process
  bool from_disk = false;  // a Z3 verdict read from the on-disk cache (no solver time)
  uint64_t steps = 0;      // Z3 rlimit count
  double ms = 0;           // Z3 wall time of this call (0 when cheap or cached)
  // On Disproved: the counterexample, every integer Var of the query by name.
  std::map<std::string, int64_t> model;
};

ProofResult prove(const IndexQuery& query, const ProofBudget& budget);

// Interval of an i64 expression under `ranges` (unknown names: the type's range).
Interval interval_of(const Expr& e, const std::map<std::string, Interval>& ranges);

// The Z3 version linked in, e.g. "4.8.12".
std::string z3_version();

}  // namespace tilerun::compiler
