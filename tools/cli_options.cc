#include "tools/cli_options.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <string_view>

#include "tilerun/error.h"

namespace tilerun::cli {

namespace {

// What follows an option on the command line.
enum class Value {
  None,     // a switch
  Choice,   // one of the words of its metavar, "graph|launch|both"
  Number,   // a non-negative integer
  Path,     // a file or folder name
  Setting,  // NAME=N
};

struct OptionSpec {
  std::string_view flag;
  std::string_view alias;    // a short spelling, or ""
  std::string_view metavar;  // shown in the help; for Value::Choice, the choices
  Value value;
  std::string_view help;  // '\n' starts a continuation line
  void (*apply)(Options& o, std::string_view flag, const std::string& value);
};

uint64_t parse_number(std::string_view flag, const std::string& text, uint64_t max) {
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || text[0] == '-' || v > max)
    throw Error("option " + std::string(flag) + " expects a non-negative integer up to " +
                std::to_string(max) + ", found '" + text + "'");
  return v;
}

// One row per option, in the order of the help text.
constexpr std::array kOptions = {
    OptionSpec{"--device", "", "auto|cpu|cuda", Value::Choice,
               "where to run (auto: the GPU when there is one, else the CPU)",
               [](Options& o, std::string_view, const std::string& v) { o.device = v; }},
    OptionSpec{"--mode", "", "graph|launch|both", Value::Choice,
               "how a CUDA step is issued: CUDA graph replay (default), standalone\n"
               "launches, or both side by side (exit 1 unless bit-identical; needs a GPU)",
               [](Options& o, std::string_view, const std::string& v) { o.mode = v; }},
    OptionSpec{"--steps", "", "N", Value::Number,
               "steps to run (default 1); timings are medians over them after one\n"
               "warm-up step",
               [](Options& o, std::string_view f, const std::string& v) {
                 o.steps = static_cast<int>(parse_number(f, v, 1000000));
                 if (o.steps == 0) throw Error("option --steps expects at least 1, found '0'");
               }},
    OptionSpec{"--dim", "", "NAME=N", Value::Setting,
               "set the model's dim NAME to N (repeatable), e.g. --dim T=1024: the shapes,\n"
               "attributes and kernels that name it follow",
               [](Options& o, std::string_view f, const std::string& v) {
                 const size_t eq = v.find('=');
                 const std::string name = v.substr(0, eq);
                 if (eq == std::string::npos || name.empty())
                   throw Error("option --dim expects NAME=N, found '" + v + "'");
                 const auto n = static_cast<int64_t>(
                     parse_number(f, v.substr(eq + 1), std::numeric_limits<int32_t>::max()));
                 if (n == 0) throw Error("option --dim expects N >= 1, found '" + v + "'");
                 for (const auto& [given, value] : o.dims)
                   if (given == name)
                     throw Error("option --dim gives dim '" + name + "' twice ('" + name + "=" +
                                 std::to_string(value) + "' and '" + v + "')");
                 o.dims.emplace_back(name, n);
               }},
    OptionSpec{"--layers", "", "N", Value::Number,
               "repeat every layer that declares `repeat:` N times instead (each\n"
               "repetition with its own weights)",
               [](Options& o, std::string_view f, const std::string& v) {
                 o.layers = static_cast<int64_t>(parse_number(f, v, 1000000));
                 if (o.layers == 0) throw Error("option --layers expects at least 1, found '0'");
               }},
    OptionSpec{"--print-loss", "", "", Value::None,
               "print the loss and each term of it after every step (with an\n"
               "`optimizer:` in the model, the steps train it)",
               [](Options& o, std::string_view, const std::string&) { o.print_loss = true; }},
    OptionSpec{"--forward-only", "", "", Value::None, "compile and run the forward direction only",
               [](Options& o, std::string_view, const std::string&) { o.forward_only = true; }},
    OptionSpec{"--check", "", "", Value::None,
               "compare outputs and gradients with the double-precision reference\n"
               "(exit 1 on a mismatch or a NaN/Inf)",
               [](Options& o, std::string_view, const std::string&) { o.check = true; }},
    OptionSpec{"--weights", "", "FILE", Value::Path,
               "load inputs and weights from a .safetensors file; every one of them\n"
               "must be there unless --allow-missing is given",
               [](Options& o, std::string_view, const std::string& v) { o.weights = v; }},
    OptionSpec{"--allow-missing", "", "", Value::None,
               "tensors --weights lacks come from the initialiser (--seed)",
               [](Options& o, std::string_view, const std::string&) { o.allow_missing = true; }},
    OptionSpec{"--seed", "", "S", Value::Number,
               "seed of the initialiser for tensors not loaded (default 0)",
               [](Options& o, std::string_view f, const std::string& v) {
                 o.seed = parse_number(f, v, UINT64_MAX);
               }},
    OptionSpec{"--save", "", "FILE", Value::Path,
               "write the last step's outputs and gradients (\"grad.NAME\") and,\n"
               "after training (a model with an optimizer), the weights, as .safetensors",
               [](Options& o, std::string_view, const std::string& v) { o.save = v; }},
    OptionSpec{"--report", "", "FILE", Value::Path, "write a JSON report",
               [](Options& o, std::string_view, const std::string& v) { o.report = v; }},
    OptionSpec{"--pdl", "", "on|off", Value::Choice,
               "programmatic dependent launch between kernels (CUDA; default on)",
               [](Options& o, std::string_view, const std::string& v) { o.pdl = v == "on"; }},
    OptionSpec{"--fold", "", "on|off", Value::Choice,
               "fold an add of a matmul's (or hc_pre_grad's, weighted_relu_sum's) single-use\n"
               "output, and a fake_quant of an rmsnorm's, rmsnorm_rope's or swiglu's, into\n"
               "that op's kernel (default on; results are bit-identical either way)",
               [](Options& o, std::string_view, const std::string& v) { o.fold = v == "on"; }},
    OptionSpec{
        "--fp4-weights", "", "on|off", Value::Choice,
        "keep MXFP4-trained expert weights as FP4 codes that the grouped GEMMs decode\n"
        "in shared memory (default off: slower today; bit-identical either way)",
        [](Options& o, std::string_view, const std::string& v) { o.fp4_weights = v == "on"; }},
    OptionSpec{"--profile", "", "on|off", Value::Choice,
               "time the profiling pass's kernels with CUPTI (on, default) or events (off)",
               [](Options& o, std::string_view, const std::string& v) { o.profile = v == "on"; }},
    OptionSpec{"--trace", "", "FILE", Value::Path,
               "write a Chrome/Perfetto trace of a step (host and device spans per\n"
               "layer, device spans per kernel from a profiling pass)",
               [](Options& o, std::string_view, const std::string& v) { o.trace = v; }},
    OptionSpec{"--dump-kernels", "", "DIR", Value::Path,
               "write each kernel's Tile IR, SIMT IR and generated code",
               [](Options& o, std::string_view, const std::string& v) { o.dump_dir = v; }},
    OptionSpec{"--validate", "", "", Value::None,
               "only check the model and print its summary (no outputs, no --weights)",
               [](Options& o, std::string_view, const std::string&) { o.validate = true; }},
    OptionSpec{"--help", "-h", "", Value::None, "show this help and exit",
               [](Options& o, std::string_view, const std::string&) { o.help = true; }},
    OptionSpec{"--version", "", "", Value::None, "print the version and exit",
               [](Options& o, std::string_view, const std::string&) { o.version = true; }},
    OptionSpec{"--list-ops", "", "", Value::None,
               "print every op: inputs, outputs, attributes, dtypes (no MODEL needed)",
               [](Options& o, std::string_view, const std::string&) { o.list_ops = true; }},
};

const OptionSpec* find_option(std::string_view arg) {
  for (const OptionSpec& spec : kOptions)
    if (arg == spec.flag || (!spec.alias.empty() && arg == spec.alias)) return &spec;
  return nullptr;
}

std::vector<std::string> choices(std::string_view metavar) {
  std::vector<std::string> out;
  for (size_t start = 0, bar; start <= metavar.size(); start = bar + 1) {
    bar = std::min(metavar.find('|', start), metavar.size());
    out.emplace_back(metavar.substr(start, bar - start));
  }
  return out;
}

// The value of option `spec`, checked for its kind. `next` is null at the end of argv.
std::string take_value(const OptionSpec& spec, const std::string* next) {
  const std::string flag(spec.flag);
  if (next == nullptr) throw Error("option " + flag + " expects a value (see 'tilerun --help')");
  const std::string& v = *next;
  // "--save --check" must not create a file named "--check" and skip the check.
  if (v.starts_with("--"))
    throw Error("option " + flag + " expects a value, found the option '" + v +
                "' (see 'tilerun --help')");
  if (spec.value == Value::Path && (v.empty() || v[0] == '-'))
    throw Error("option " + flag + " expects a path, found '" + v + "'" +
                (v.empty() ? "" : " (write ./" + v + " for a file whose name starts with '-')"));
  if (spec.value == Value::Choice) {
    std::vector<std::string> allowed = choices(spec.metavar);
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
      throw Error("option " + flag + " expects " + std::string(spec.metavar) + ", found '" + v +
                  "'");
  }
  return v;
}

}  // namespace

std::string usage() {
  std::string text =
      "usage: tilerun MODEL.yaml [options]\n\n"
      "Compiles MODEL.yaml (see docs/model-format.md), runs forward + backward steps and prints "
      "the\nhost and device time per layer and direction.\n\noptions:\n";
  constexpr size_t kColumn = 27;  // where the help starts
  auto row = [&](std::string left, std::string_view help) {
    left = "  " + left;
    left.append(left.size() < kColumn ? kColumn - left.size() : 1, ' ');
    for (size_t start = 0, end; start < help.size(); start = end + 1) {
      end = std::min(help.find('\n', start), help.size());
      text += (start == 0 ? left : std::string(kColumn, ' '));
      text.append(help.substr(start, end - start)) += '\n';
    }
  };
  for (const OptionSpec& spec : kOptions) {
    std::string left = spec.alias.empty() ? std::string(spec.flag)
                                          : std::string(spec.alias) + ", " + std::string(spec.flag);
    if (spec.value != Value::None) left += " " + std::string(spec.metavar);
    row(left, spec.help);
  }
  row("--", "treat every later argument as the model path");
  text +=
      "\nAn option's value never starts with '--'; a path never starts with '-' (write "
      "./-name).\n"
      "exit codes: 0 success, 1 run-time failure, --check mismatch or failed write, 2 bad usage\n"
      "or bad model\n";
  return text;
}

Options parse_args(const std::vector<std::string>& args) {
  Options o;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      if (!o.model_path.empty())
        throw Error("more than one model given ('" + o.model_path + "' and '" + a +
                    "'); expected one MODEL.yaml (see 'tilerun --help')");
      o.model_path = a;
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    const OptionSpec* spec = find_option(a);
    if (spec == nullptr) throw Error("unknown option '" + a + "' (see 'tilerun --help')");
    std::string value;
    if (spec->value != Value::None) {
      value = take_value(*spec, i + 1 < args.size() ? &args[i + 1] : nullptr);
      ++i;
    }
    spec->apply(o, spec->flag, value);
  }
  return o;
}

// The checks of check_options.
namespace {

namespace fs = std::filesystem;

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// An input read with seeks must be a regular file; stat, unlike open, cannot block on a FIFO.
void check_input_file(const std::string& flag, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(SourceLoc{path}, "cannot open the " + flag + " file: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw Error(SourceLoc{path}, "cannot read the " + flag + " file: it is " +
                                     file_kind(st.st_mode) +
                                     (S_ISDIR(st.st_mode) ? "" : ", not a regular file"));
}

// A device such as /dev/null may take any number of outputs; a file only one.
bool is_device(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

// One file under two names: the same path once symbolic links, "." and ".." are resolved, or
// the same inode (a hard link).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  if (!ea && !eb && ca == cb) return true;
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void check_output_path(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw Error(SourceLoc{path}, "option " + flag + " names a directory; expected a file path");
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw Error(SourceLoc{path},
                "option " + flag + ": the folder '" + parent.string() + "' does not exist");
}

}  // namespace

void check_options(const Options& o) {
  struct Named {
    std::string flag;
    const std::string& path;
  };
  const std::vector<Named> outputs = {
      {"--save", o.save}, {"--report", o.report}, {"--trace", o.trace}};
  if (o.validate) {
    std::vector<Named> refused = outputs;
    refused.push_back({"--weights", o.weights});
    refused.push_back({"--dump-kernels", o.dump_dir});
    for (const Named& n : refused)
      if (!n.path.empty())
        throw Error(
            "--validate only checks the model and runs nothing; it cannot be combined "
            "with " +
            n.flag);
    if (o.check)
      throw Error(
          "--validate only checks the model and runs nothing; it cannot be "
          "combined with --check");
  }
  if (o.mode == "both" && o.device == "cpu")
    throw Error(
        "--mode both compares CUDA graph replay with standalone launches and needs a "
        "CUDA device, but --device cpu was given");
  if (o.allow_missing && o.weights.empty())
    throw Error("--allow-missing applies to --weights, which was not given");
  if (!o.weights.empty()) check_input_file("--weights", o.weights);

  const std::vector<Named> inputs = {{"the model file", o.model_path},
                                     {"the --weights file", o.weights}};
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Named& out = outputs[i];
    if (out.path.empty()) continue;
    check_output_path(out.flag, out.path);
    for (const Named& in : inputs)
      if (!in.path.empty() && same_file(out.path, in.path))
        throw Error("option " + out.flag + " would overwrite " + in.flag + " '" + in.path + "'");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(out.path, outputs[j].path) && !is_device(out.path))
        throw Error("options " + outputs[j].flag + " and " + out.flag + " name the same file '" +
                    out.path + "'; each output needs its own");
  }
}

}  // namespace tilerun::cli
