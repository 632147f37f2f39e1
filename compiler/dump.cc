#include "compiler/dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "compiler/analysis/index_width.h"
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
// An upper estimate of an i64 shape expression at these dim values, in double (no overflow).
double extent_at(const Expr& e, const std::map<std::string, int64_t>& values) {
  if (const IntImm* imm = e.as<IntImm>()) return static_cast<double>(imm->value);
  if (const Var* v = e.as<Var>()) {
    auto it = values.find(v->name);
    return it == values.end() ? 9.3e18 : static_cast<double>(it->second);
  }
  const Binary* op = e.as<Binary>();
  if (!op) return 9.3e18;  // not a shape we know how to bound: as large as an i64
  const double a = extent_at(op->a, values), b = extent_at(op->b, values);
  switch (op->op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a;  // at most a for the non-negative b of a shape
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return b > 0 ? std::ceil(a / b) : a;
    case BinaryOp::Mod:
      return std::min(a, b);
    case BinaryOp::Min:
      return std::min(a, b);
    case BinaryOp::Max:
      return std::max(a, b);
    default:
      return 9.3e18;
  }
}

// Which index width the kernel's buffers need at its dims (the caller's concrete values where it
// pinned them, else each dim's upper bound): whether every buffer has fewer than 2^31 elements,
// so that 32-bit offsets would address it; then which width the generated CUDA computes its
// index values in (index_width.h: 32 bits where every i64 value is proved to fit, with the first
// value that may not otherwise). The CPU code's index math is 64-bit either way.
std::string index_math_text(const SimtKernel& simt) {
  const IndexWidth w = index_width(simt);
  return w.fits_32 ? "index math: 32-bit on the GPU (every i64 value proved within [-2^31, 2^31) "
                     "at the dims' bounds), 64-bit on the CPU\n"
                   : "index math: 64-bit (" + w.reason + ")\n";
}

std::string index_width_text(const Kernel& k, const SimtKernel& simt,
                             const std::map<std::string, int64_t>& concrete) {
  std::map<std::string, int64_t> values;
  bool pinned = true;
  for (const DimParam& d : k.sig.dims) {
    auto it = concrete.find(d.name);
    pinned = pinned && it != concrete.end();
    values[d.name] = it != concrete.end() ? it->second : d.bounds.max;
  }
  std::string widest;
  double most = 0;
  for (const BufferParam& b : k.sig.buffers) {
    double n = 1;
    for (const Expr& e : b.shape) n *= extent_at(e, values);
    if (n > most || widest.empty()) most = n, widest = b.name;
  }
  char count[32];
  std::snprintf(count, sizeof count, "%.4g", most);
  const bool fits = most < 2147483648.0;
  return std::string("index width: ") +
         (fits ? "every buffer below 2^31 elements, 32-bit offsets would do"
               : "64-bit offsets needed") +
         " (largest '" + widest + "', " + count + " elements at " +
         (pinned ? "the model's dims" : "the dims' upper bounds") + ")\n" + index_math_text(simt);
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
  write_file(base / (name + ".proofs.txt"),
             report.text() + index_width_text(kernel, simt, options.analysis.concrete) + layouts);
  write_file(base / (name + ".tile.txt"), print(kernel));
  write_file(base / (name + ".simt.txt"), print(simt));
  write_file(base / (name + ".passes.txt"), pipeline_text(name, options, trace));
  write_file(base / (name + ".ll"), emit_llvm_ir(simt));
  write_file(base / (name + ".cu"), emit_cuda(simt));
}

}  // namespace tilerun::compiler
