// lower() behind an on-disk cache, for warm compiles: the lowered kernel's SIMT IR text and its
// proof counts, keyed by this library's build id (base/build_id.h: any change to the compiler's
// code is another key), the Z3 version, the analysis options and the tile kernel's text (its
// signature, dims' bounds and body). A hit reads the text back with parse_simt_kernel, print's
// exact inverse (tested on every kernel of every shipped config after every pass: the same bytes
// and a structurally equal kernel), so the kernel is the one lowering gives and so is the code
// generated from it; the proofs are not asked again. A miss, a damaged entry (base/disk_cache.h)
// or one that does not parse lowers and stores. Without a build id nothing is cached.
#pragma once

#include <string>

#include "compiler/lower.h"

namespace tilerun::compiler {

// The safety verdicts of a lowering: in_bounds and unique questions proved, left unknown (the
// guard stays) and disproved.
struct ProofCounts {
  int proved = 0, unknown = 0, disproved = 0;
};
ProofCounts proof_counts(const AnalysisReport& report);

struct CachedLowering {
  SimtKernel kernel;
  ProofCounts proofs;
  AnalysisStats stats;  // of the lowering that ran (Z3 queries and time); zeros on a hit
  bool hit = false;
};

// lower(kernel, options) through the cache in `cache_dir` (folder lowered-v1; "" disables it).
// options' report, trace and layouts are not filled (the caller asks lower() for those).
CachedLowering lower_cached(const Kernel& kernel, const LowerOptions& options,
                            const std::string& cache_dir);

}  // namespace tilerun::compiler
