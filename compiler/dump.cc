#include "compiler/dump.h"

#include <filesystem>

#include "compiler/base/atomic_file.h"
#include "compiler/base/check.h"
#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/layout.h"
#include "compiler/lower.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {
// Each dump file whole or not at all (a full disk or a size limit is an error naming the file,
// and a file left by an earlier dump stays as it was).
void write_file(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path.string(), text);
}

// The IR after every pass of the pipeline, in table order, each under a heading that names the
// pass and the form its verifier checked; the first line says how tilerun-opt replays a step.
std::string pipeline_text(const std::string& name, const LowerOptions& options,
                          const std::vector<std::pair<std::string, std::string>>& trace) {
  std::string dims;
  for (const auto& [dim, value] : options.analysis.concrete)
    dims += (dims.empty() ? " --dims " : ",") + dim + "=" + std::to_string(value);
  std::string out = "// replay: tilerun-opt " + name + ".tile.txt --passes=PASS,..." + dims +
                    "\n// ---- input (tile)\n" + trace.at(0).second;
  const std::vector<PassInfo>& passes = pipeline();
  for (size_t i = 0; i < passes.size(); ++i) {
    TR_CHECK(trace.at(i + 1).first == passes[i].name, "trace out of pipeline order");
    out += std::string("// ---- after ") + passes[i].name + " (" + form_name(passes[i].output) +
           ")\n" + trace[i + 1].second;
  }
  return out;
}
}  // namespace

void dump_kernel(const Kernel& kernel, const std::string& dir, const LowerOptions& options) {
  std::filesystem::path base(dir);
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) throw Error("cannot create '" + dir + "': " + ec.message(), ErrorKind::Runtime);
  AnalysisReport report;
  LowerOptions lo = options;
  std::vector<std::string> parallels;
  lo.report = &report;
  lo.layouts = &parallels;
  std::vector<std::pair<std::string, std::string>> trace;
  lo.trace = &trace;
  SimtKernel simt = lower(kernel, lo);
  const std::string& name = kernel.sig.name;
  std::string layouts = "layouts " + name + "\n";
  for (const std::string& line : parallels) layouts += "  " + line + "\n";
  for (const TileAlloc& a : kernel.allocs) {
    if (a.scope != MemScope::Shared) continue;
    std::vector<int64_t> shape(a.shape.begin(), a.shape.end());
    layouts += "  shared " + a.name + ": element " + to_string(compact_row_major(shape)) + "\n";
  }
  write_file(base / (name + ".proofs.txt"), report.text() + layouts);
  write_file(base / (name + ".tile.txt"), print(kernel));
  write_file(base / (name + ".simt.txt"), print(simt));
  write_file(base / (name + ".passes.txt"), pipeline_text(name, options, trace));
  write_file(base / (name + ".ll"), emit_llvm_ir(simt));
  write_file(base / (name + ".cu"), emit_cuda(simt));
}

}  // namespace tilerun::compiler
