// What the tilerun command line prints and writes: the compile summary, the per-layer tables,
// the check line and warnings, the JSON report, the Chrome/Perfetto trace and --save.
#pragma once

#include <string>
#include <string_view>

#include "tilerun/tilerun.h"
#include "tools/cli_options.h"
#include "tools/cli_run.h"

namespace tilerun::cli {

// `text` safe to echo to a terminal: control characters, DEL and NUL as "\xHH" ('\n' kept when
// `keep_newlines`), so a name or path cannot move the cursor, recolour or cut a message.
std::string printable(std::string_view text, bool keep_newlines = false);

// The two lines after a session is compiled: kernels, compile time, arena; index proofs.
void print_compiled(const Model& model, const Session& session);

// "step N: loss X" and, with several terms, each as "name value (x weight)"; N = 0: "loss X".
void print_loss(int step, const std::vector<LossValue>& losses);
// The loss as the sum of weight * value over the terms, added in order in double.
double total_loss(const std::vector<LossValue>& losses);

// The per-layer table (or the graph-vs-launch table under --mode both), what its figures are,
// the check line and, on stderr, a warning naming the first NaN/Inf output or gradient.
void print_results(const Options& o, const RunResult& r);

// --save, --trace and --report, each written whole or not at all (a failure throws
// tilerun::Error naming the file, kind Runtime, and leaves an existing file as it was).
void write_outputs(const Options& o, const Model& model, const RunResult& r);

}  // namespace tilerun::cli
