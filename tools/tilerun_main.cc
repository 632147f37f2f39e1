// The tilerun command line: validate a model, compile it, run forward and backward steps, and
// report host vs device time per layer. Exit codes: 0 success, 1 run-time failure, a --check
// mismatch or a failed write, 2 bad usage or bad model.
//
// cli_options parses and checks argv (before any work), cli_run compiles and runs, cli_report
// prints and writes what the run measured. This file maps the outcome to an exit code.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tilerun/tilerun.h"
#include "tools/cli_options.h"
#include "tools/cli_report.h"
#include "tools/cli_run.h"

namespace {

using namespace tilerun::cli;

int run(const std::vector<std::string>& args) {
  Options o = parse_args(args);
  if (o.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (o.version) {
    std::printf("tilerun %s\n", tilerun::version());
    return 0;
  }
  if (o.list_ops) {
    std::fputs(tilerun::op_catalog_text().c_str(), stdout);
    return 0;
  }
  if (o.model_path.empty()) throw tilerun::Error("no model given\n" + usage());
  check_options(o);
  tilerun::Model model = tilerun::load_model(o.model_path, {.dims = o.dims, .layers = o.layers});
  if (o.validate) {
    std::fputs(tilerun::model_summary(model).c_str(), stdout);
    return 0;
  }
  RunResult r = run_steps(o, model);
  print_results(o, r);
  write_outputs(o, model, r);
  return r.failed() ? 1 : 0;
}

// The message rebuilt from its parts, since what() ends at the first NUL a name may carry.
std::string error_text(const tilerun::Error& e) {
  const tilerun::SourceLoc& loc = e.loc();
  std::string prefix = loc.file.empty() && !loc.valid() ? "" : printable(loc.str()) + ": ";
  return prefix + "error: " + printable(e.message(), /*keep_newlines=*/true);
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails the write with EFBIG, reported by name, instead of
  // killing the process half-way through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tilerun::Error& e) {
    std::fprintf(stderr, "%s\n", error_text(e).c_str());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilerun: internal error: %s\n", printable(e.what()).c_str());
    return 1;
  }
}
