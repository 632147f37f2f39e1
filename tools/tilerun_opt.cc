// tilerun-opt: reads a kernel in the IR's text form (Tile IR or SIMT IR, ir_parser.h), runs the
// named passes of the compiler's pipeline (lower.h) in order, verifying after each, and prints
// the IR after the last one. The pass tests (tests/lit/) drive it with FileCheck.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/ir/ir_parser.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/lower.h"
#include "tilerun/error.h"

namespace {

using namespace tilerun;
using namespace tilerun::compiler;

std::string usage() {
  std::string out =
      "usage: tilerun-opt FILE [--passes=PASS,PASS,...|all] [--dims NAME=VALUE,...]\n"
      "  Parses FILE (Tile IR or SIMT IR text, '-' for stdin), runs the passes in the given "
      "order\n  and prints the IR after the last one (without --passes: the parsed IR).\n"
      "  passes, in pipeline order:";
  for (const PassInfo& p : pipeline())
    out += std::string("\n    ") + p.name + " (" + form_name(p.input) + " -> " +
           form_name(p.output) + ")";
  return out + "\n";
}

// A mistake in the command line: the message and then the usage with the pass names.
struct UsageError : Error {
  using Error::Error;
};

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> out;
  if (list == "all") {
    for (const PassInfo& p : pipeline()) out.push_back(p.name);
    return out;
  }
  std::stringstream ss(list);
  for (std::string name; std::getline(ss, name, ',');) out.push_back(name);
  return out;
}

std::string read_input(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, int64_t> parse_dims(const std::string& list) {
  std::map<std::string, int64_t> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t eq = item.find('=');
    char* end = nullptr;
    long long v = eq == std::string::npos ? 0 : std::strtoll(item.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || end == item.c_str() + eq + 1 || *end != '\0')
      throw UsageError("--dims wants NAME=VALUE,..., not '" + item + "'");
    out[item.substr(0, eq)] = v;
  }
  return out;
}

int run(int argc, char** argv) {
  std::string file;
  LowerOptions options;
  std::vector<std::string> passes;
  bool have_passes = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << usage();
      return 0;
    } else if (a.rfind("--passes=", 0) == 0) {
      passes = split_names(a.substr(9));
      have_passes = true;
    } else if (a == "--dims" && i + 1 < argc) {
      options.analysis.concrete = parse_dims(argv[++i]);
    } else if (a.rfind("--dims=", 0) == 0) {
      options.analysis.concrete = parse_dims(a.substr(7));
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError("unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      throw UsageError("more than one input file");
    }
  }
  if (file.empty()) throw UsageError("no input file");
  if (have_passes && passes.empty()) throw UsageError("--passes= names no pass");
  for (const std::string& name : passes)
    if (!find_pass(name)) throw UsageError("unknown pass '" + name + "'");

  std::string text = read_input(file);
  AnyKernel ir;
  if (is_simt_text(text)) {
    // The first pass says which SIMT form it reads; without one the parser decides.
    std::optional<SimtForm> form;
    if (!passes.empty() && !find_pass(passes[0])->input.tile)
      form = find_pass(passes[0])->input.simt;
    ir = parse_simt_kernel(text, file, form);
  } else {
    ir = parse_tile_kernel(text, file);
  }
  // Each pass must read the level the previous one left (the forms within a level are the
  // verifier's to check, with its own message).
  bool tile = std::holds_alternative<Kernel>(ir);
  for (const std::string& name : passes) {
    const PassInfo* p = find_pass(name);
    if (p->input.tile != tile)
      throw UsageError("pass " + name + " reads " + (p->input.tile ? "Tile" : "SIMT") +
                       " IR, and it gets " + (tile ? "Tile" : "SIMT") + " IR");
    tile = p->output.tile;
  }
  ir = run_passes(ir, passes, options);
  std::cout << std::visit([](const auto& k) { return print(k); }, ir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "tilerun-opt: " << e.what() << "\n" << usage();
    return 2;
  } catch (const tilerun::Error& e) {
    // A parse error carries FILE:LINE:COL; the rest are the tool's own.
    std::cerr << (e.loc().valid() ? "" : "tilerun-opt: ") << e.what() << "\n";
    return e.exit_code();
  }
}
