#include "compiler/lower.h"

#include "compiler/analysis/analyze_accesses.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/simt_verifier.h"
#include "compiler/ir/tile_verifier.h"
#include "compiler/transforms/expand_strict_math.h"
#include "compiler/transforms/flatten_buffers.h"
#include "compiler/transforms/hoist_copy_invariants.h"
#include "compiler/transforms/infer_layouts.h"
#include "compiler/transforms/lower_copies.h"
#include "compiler/transforms/lower_parallel.h"
#include "compiler/transforms/lower_reductions.h"
#include "compiler/transforms/lower_storage_types.h"
#include "compiler/transforms/pin_index_width.h"
#include "compiler/transforms/vectorize_accesses.h"
#include "compiler/transforms/vectorize_shared_loads.h"
#include "tilerun/error.h"

namespace tilerun::compiler {
namespace {

// Adapters from a pass's own signature to the table's.
template <Kernel (*F)(const Kernel&)>
AnyKernel tile_pass(const AnyKernel& k, const LowerOptions&) {
  return F(std::get<Kernel>(k));
}
template <SimtKernel (*F)(const SimtKernel&)>
AnyKernel simt_pass(const AnyKernel& k, const LowerOptions&) {
  return F(std::get<SimtKernel>(k));
}
AnyKernel run_analyze_accesses(const AnyKernel& k, const LowerOptions& o) {
  return analyze_accesses(std::get<Kernel>(k), o.analysis, o.report);
}
AnyKernel run_infer_layouts(const AnyKernel& k, const LowerOptions& o) {
  Kernel tile = infer_layouts(std::get<Kernel>(k));
  if (o.layouts) *o.layouts = describe_layouts(tile);
  return tile;
}
AnyKernel run_pin_index_width(const AnyKernel& k, const LowerOptions& o) {
  return pin_index_width(std::get<SimtKernel>(k), o.analysis.concrete);
}
AnyKernel run_lower_parallel(const AnyKernel& k, const LowerOptions&) {
  return lower_parallel(std::get<Kernel>(k));
}

constexpr IrForm kLowered = simt_form(SimtForm::Lowered);
constexpr IrForm kFlat = simt_form(SimtForm::Flat);
constexpr IrForm kStorageTyped = simt_form(SimtForm::StorageTyped);
constexpr IrForm kComplete = simt_form(SimtForm::Complete);

std::vector<PassInfo> make_pipeline() {
  // The verifier runs after every step: it is cheap, and an author's mistake must surface as an
  // Error naming the kernel, not as a crash three passes later.
  return {
      // ---- Tile IR → Tile IR.
      {"lower_copies", kTileForm, kTileForm,
       "copies become guarded parallel loops first: every "
       "later pass sees only loads, stores and loops",
       tile_pass<lower_copies>},
      {"lower_reductions", kTileForm, kTileForm,
       "after lower_copies: a reduction's body may read tiles that copies filled, and reductions "
       "emit parallel loops of their own, which lower_parallel must see",
       tile_pass<lower_reductions>},
      {"analyze_accesses", kTileForm, kTileForm,
       "after lower_copies and lower_reductions, so the guards they emit are visible as plain "
       "ifs, and before lower_parallel, while element coordinates are still the parallel loop's "
       "indices; removes guards proved redundant, and a store proved to collide is an Error "
       "naming kernel, tensor and two coordinates",
       run_analyze_accesses},
      {"infer_layouts", kTileForm, kTileForm,
       "every Parallel's (thread, local) -> element layout, from the analysis's findings and the "
       "author's annotate_layout; lower_parallel follows them",
       run_infer_layouts},
      // ---- Tile IR → SIMT IR.
      {"lower_parallel", kTileForm, kLowered,
       "the one step from Tile IR to SIMT IR: parallel loops become per-thread loops over the "
       "layouts infer_layouts chose",
       run_lower_parallel},
      {"flatten_buffers", kLowered, kFlat,
       "one flat index per access before conversions wrap the accesses",
       simt_pass<flatten_buffers>},
      {"lower_storage_types", kFlat, kStorageTyped,
       "after flattening: conversions wrap the single flat index's load/store",
       simt_pass<lower_storage_types>},
      {"vectorize_accesses", kStorageTyped, kStorageTyped,
       "after storage types, so a vector moves the bits that memory holds; conversions stay per "
       "lane inside the loop",
       simt_pass<vectorize_accesses>},
      {"vectorize_shared_loads", kStorageTyped, kStorageTyped,
       "after vectorize_accesses, on the same storage bits, for the shared-memory side",
       simt_pass<vectorize_shared_loads>},
      {"hoist_copy_invariants", kStorageTyped, kStorageTyped,
       "after the vectorize passes (it unrolls piece loops, which they would no longer see as "
       "loops) and on the final flat indices, so what it hoists is what the backends compute",
       simt_pass<hoist_copy_invariants>},
      {"expand_strict_math", kStorageTyped, kComplete,
       "after the rewrites: lower_storage_types itself emits strict_math routines, and nothing "
       "after "
       "this point may introduce exp/log/min/max that a backend would have to implement its own "
       "way",
       simt_pass<expand_strict_math>},
      {"pin_index_width", kComplete, kComplete,
       "after everything that adds index arithmetic: pins the dims to the launch shape where "
       "that alone lets every i64 value fit 32 bits (the CUDA backend's int index math)",
       run_pin_index_width},
  };
}

std::string text_of(const AnyKernel& k) {
  return std::visit([](const auto& kernel) { return print(kernel); }, k);
}

std::string pass_names() {
  std::string out;
  for (const PassInfo& p : pipeline()) out += std::string(out.empty() ? "" : ", ") + p.name;
  return out;
}

}  // namespace

std::string form_name(IrForm form) {
  if (form.tile) return "tile";
  switch (form.simt) {
    case SimtForm::Lowered:
      return "simt lowered";
    case SimtForm::Flat:
      return "simt flat";
    case SimtForm::StorageTyped:
      return "simt storage-typed";
    case SimtForm::Complete:
      return "simt complete";
  }
  return "?";
}

std::string form_problem(const AnyKernel& kernel, IrForm form) {
  if (form.tile) {
    const Kernel* k = std::get_if<Kernel>(&kernel);
    if (!k) return "SIMT IR where Tile IR is expected";
    try {
      verify_tile(*k);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }
  const SimtKernel* k = std::get_if<SimtKernel>(&kernel);
  if (!k) return "Tile IR where SIMT IR is expected";
  return simt_problem(*k, form.simt);
}

const std::vector<PassInfo>& pipeline() {
  static const std::vector<PassInfo> passes = make_pipeline();
  return passes;
}

const PassInfo* find_pass(const std::string& name) {
  for (const PassInfo& p : pipeline())
    if (name == p.name) return &p;
  return nullptr;
}

AnyKernel run_passes(const AnyKernel& kernel, const std::vector<std::string>& names,
                     const LowerOptions& options) {
  std::vector<const PassInfo*> passes;
  for (const std::string& name : names) {
    const PassInfo* p = find_pass(name);
    if (!p) throw Error("unknown pass '" + name + "'; the passes are: " + pass_names());
    passes.push_back(p);
  }
  AnyKernel ir = kernel;
  for (const PassInfo* p : passes) {
    std::string problem = form_problem(ir, p->input);
    if (!problem.empty())
      throw Error(std::string("pass ") + p->name + " reads " + form_name(p->input) +
                  " IR: " + problem);
    ir = p->run(ir, options);
    problem = form_problem(ir, p->output);
    if (!problem.empty())
      throw Error(std::string("after pass ") + p->name + ": " + problem, ErrorKind::Runtime);
    if (options.trace) options.trace->emplace_back(p->name, text_of(ir));
  }
  return ir;
}

SimtKernel lower(const Kernel& kernel, const LowerOptions& options) {
  verify_tile(kernel);
  if (options.trace) options.trace->emplace_back("input", print(kernel));
  AnyKernel ir = kernel;
  for (const PassInfo& p : pipeline()) {
    ir = p.run(ir, options);
    // Tile IR problems are the author's (an Error naming the kernel); SIMT IR is ours (a check).
    if (p.output.tile)
      verify_tile(std::get<Kernel>(ir));
    else
      verify_simt(std::get<SimtKernel>(ir), p.output.simt);
    if (options.trace) options.trace->emplace_back(p.name, text_of(ir));
  }
  return std::get<SimtKernel>(std::move(ir));
}

}  // namespace tilerun::compiler
