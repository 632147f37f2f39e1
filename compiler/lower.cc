#include "compiler/lower.h"

#include "compiler/analysis/analyze_accesses.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/simt_verifier.h"
#include "compiler/ir/tile_verifier.h"
#include "compiler/transforms/expand_strict_math.h"
#include "compiler/transforms/flatten_buffers.h"
#include "compiler/transforms/infer_layouts.h"
#include "compiler/transforms/lower_copies.h"
#include "compiler/transforms/lower_parallel.h"
#include "compiler/transforms/lower_reductions.h"
#include "compiler/transforms/lower_storage_types.h"
#include "compiler/transforms/vectorize_accesses.h"
#include "compiler/transforms/vectorize_shared_loads.h"

namespace tilerun::compiler {

SimtKernel lower(const Kernel& kernel, const LowerOptions& options) {
  auto log = [&](const char* pass, const auto& ir) {
    if (options.trace) options.trace->emplace_back(pass, print(ir));
  };

  // ---- Tile IR → Tile IR. The verifier runs after every step: it is cheap, and an author's
  // mistake must surface as an Error naming the kernel, not as a crash three passes later.
  verify_tile(kernel);
  log("input", kernel);

  Kernel tile = lower_copies(kernel);
  verify_tile(tile);
  log("lower_copies", tile);

  // After lower_copies: a reduction's body may read tiles that copies filled, and reductions
  // emit parallel loops of their own, which lower_parallel must see.
  tile = lower_reductions(tile);
  verify_tile(tile);
  log("lower_reductions", tile);

  // The index analysis (analyze_accesses.h): after lower_copies and lower_reductions, so the
  // guards they emit are visible as plain `if`s, and before lower_parallel, while element
  // coordinates are still the parallel loop's indices. Removes guards proved redundant; a
  // store proved to collide is an Error naming kernel, tensor and two coordinates.
  tile = analyze_accesses(tile, options.analysis, options.report);
  verify_tile(tile);
  log("analyze_accesses", tile);

  // Layouts (infer_layouts.h): every Parallel's (thread, local) → element layout, from the
  // analysis's findings and the author's annotate_layout; lower_parallel follows them.
  tile = infer_layouts(tile);
  verify_tile(tile);
  log("infer_layouts", tile);
  if (options.layouts) *options.layouts = describe_layouts(tile);

  // ---- Tile IR → SIMT IR.
  SimtKernel simt = lower_parallel(tile);
  verify_simt(simt, SimtForm::Lowered);
  log("lower_parallel", simt);

  simt = flatten_buffers(simt);
  verify_simt(simt, SimtForm::Flat);
  log("flatten_buffers", simt);

  // After flattening: conversions wrap the single flat index's load/store.
  simt = lower_storage_types(simt);
  verify_simt(simt, SimtForm::StorageTyped);
  log("lower_storage_types", simt);

  // After storage types, so a vector moves the bits that memory holds; conversions stay
  // per lane inside the loop.
  simt = vectorize_accesses(simt);
  verify_simt(simt, SimtForm::StorageTyped);
  log("vectorize_accesses", simt);

  simt = vectorize_shared_loads(simt);
  verify_simt(simt, SimtForm::StorageTyped);
  log("vectorize_shared_loads", simt);

  // Last: lower_storage_types itself emits strict_math routines, and nothing after this point
  // may introduce exp/log/min/max that a backend would have to implement its own way.
  simt = expand_strict_math(simt);
  verify_simt(simt, SimtForm::Complete);
  log("expand_strict_math", simt);
  return simt;
}

}  // namespace tilerun::compiler
