// The tilerun command line: validate a model and print its summary (later: compile and run it).
// Exit codes: 0 success, 1 run-time failure, 2 bad usage or bad model.
//
// Structure: parse_args turns argv into Options (usage errors throw tilerun::Error), then one
// function per mode does the work. Adding an option means a field, a line in kUsage and a case
// in parse_args; adding a mode means a function and its dispatch in run().
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tilerun/tilerun.h"

namespace {

constexpr const char* kUsage = R"(usage: tilerun MODEL.yaml [options]

Validates MODEL.yaml (see docs/model-format.md) and prints a summary of its layers, ops,
tensors and parameters.

options:
  -h, --help       show this help and exit
  --version        print the version and exit
  --               treat every later argument as the model path

exit codes: 0 success, 1 run-time failure, 2 bad usage or bad model
)";

struct Options {
  bool help = false;
  bool version = false;
  std::string model_path;
};

Options parse_args(const std::vector<std::string>& args) {
  Options o;
  bool options_done = false;
  for (const std::string& a : args) {
    if (!options_done && a == "--") {
      options_done = true;
    } else if (!options_done && (a == "-h" || a == "--help")) {
      o.help = true;
    } else if (!options_done && a == "--version") {
      o.version = true;
    } else if (!options_done && a.size() > 1 && a[0] == '-') {
      throw tilerun::Error("unknown option '" + a + "' (see 'tilerun --help')");
    } else if (!o.model_path.empty()) {
      throw tilerun::Error("more than one model given ('" + o.model_path + "' and '" + a +
                           "'); expected one MODEL.yaml (see 'tilerun --help')");
    } else {
      o.model_path = a;
    }
  }
  return o;
}

// Parse and check the model, then print what it contains.
int validate(const Options& o) {
  tilerun::Model model = tilerun::load_model(o.model_path);
  std::fputs(tilerun::model_summary(model).c_str(), stdout);
  return 0;
}

int run(const std::vector<std::string>& args) {
  Options o = parse_args(args);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (o.version) {
    std::printf("tilerun %s\n", tilerun::version());
    return 0;
  }
  if (o.model_path.empty()) throw tilerun::Error("no model given\n" + std::string(kUsage));
  return validate(o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tilerun::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tilerun: internal error: %s\n", e.what());
    return 1;
  }
}
