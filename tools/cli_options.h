// The tilerun command line's options: what argv asks for, parsed and checked before any work.
// Usage mistakes throw tilerun::Error (kind Usage: exit 2).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tilerun::cli {

struct Options {
  bool help = false, version = false, list_ops = false, validate = false, forward_only = false,
       check = false;
  bool allow_missing = false;  // --weights may lack tensors: the initialiser fills them
  bool print_loss = false;     // print the loss (each term) after every step
  std::string model_path, device = "auto", mode = "graph";
  std::string weights, save, report, dump_dir, trace;  // paths; empty = not given
  bool pdl = true;
  bool fold = true;          // --fold off: no add folded into the op before it (graph/fold_adds.h)
  bool fp4_weights = false;  // --fp4-weights on: graph/fold_fp4_weights.h
  bool profile = true;       // --profile off: the profiling pass times kernels with events only
  int steps = 1;
  uint64_t seed = 0;
  // --dim NAME=N, in the order given: each replaces the value of a dim the model declares.
  std::vector<std::pair<std::string, int64_t>> dims;
  int64_t layers = 0;  // --layers N: the repeat count of every layer that declares `repeat:`
};

// The help text, generated from the option table so that it cannot miss an option.
std::string usage();

// argv (without the program name) to Options. Adding an option means a field above and one row
// in the table in cli_options.cc. An option's value is the next argument and never starts with
// "--" (that is the next option: its value is missing); a path value never starts with '-' at
// all (write ./-name for a file whose name does). Throws tilerun::Error on a usage mistake.
Options parse_args(const std::vector<std::string>& args);

// The checks that need no model and no compile, run before either: option conflicts (--validate
// with an output or --weights, --mode both with --device cpu) and paths (--weights must be a
// regular file; outputs must not overwrite the model, --weights or each other, and their folder
// must exist). Throws tilerun::Error (kind Usage).
void check_options(const Options& o);

}  // namespace tilerun::cli
