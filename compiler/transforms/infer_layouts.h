// Pass: layout inference. Decides every Parallel's ParallelLayout (ir.h): how its elements are
// dealt to threads, (T,(W,R)):(W,(1,T·W)), and whether its global accesses move as vectors.
// A pure function of the IR, visiting Parallels in program order:
//   1. Parallels that touch a common fragment form a group (union-find in visiting order):
//      a fragment's element stays with one thread, so a group shares one width.
//   2. An annotated group (builder's annotate_layout) takes the author's width; members must
//      agree, and the width must divide every member's element count (tilerun::Error naming
//      the kernel otherwise).
//   3. Otherwise W = the smallest `provable` width (analyze_accesses) among members that have
//      one (>= 2), halved until every member fits: a constant element count n needs n % W == 0
//      and n >= T·W (every thread holds whole vectors, none idles); a symbolic one needs its
//      own proof of divisibility (provable >= W). No provable member: W = 1.
//   4. A member whose provable >= W >= 2 is marked `vectorize`.
// Runs after analyze_accesses, before lower_parallel.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

Kernel infer_layouts(const Kernel& kernel);

// One line per Parallel of an inferred kernel, in visiting order: its loop, element count,
// width, whether it moves vectors, and its layout (the "layouts" section of dumps).
std::vector<std::string> describe_layouts(const Kernel& kernel);

// The (thread, local index) → element layout of a Parallel of `n` elements over `threads`
// threads at `width`, in layout.h's notation (dumps and reports).
std::string parallel_layout_text(int64_t n, int64_t threads, int width);

}  // namespace tilerun::compiler
