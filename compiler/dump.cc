#include "compiler/dump.h"

#include <filesystem>
#include <fstream>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/layout.h"
#include "compiler/lower.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {
void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw Error("cannot write '" + path.string() + "'", ErrorKind::Runtime);
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
  lo.trace = nullptr;
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
  write_file(base / (name + ".ll"), emit_llvm_ir(simt));
  write_file(base / (name + ".cu"), emit_cuda(simt));
}

}  // namespace tilerun::compiler
