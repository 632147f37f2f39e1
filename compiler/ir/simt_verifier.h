// Well-formedness of SIMT IR. Besides scoping and types it checks the one rule both backends
// rely on: barriers sit only in block-uniform control flow — at top level or inside loops whose
// bounds are block-uniform, never under an if or a per-thread loop — and no per-thread value
// bound by a let lives across a barrier (such values must be locals, which the CPU backend
// keeps in per-thread slots). A value is per-thread when it depends on threadIdx.x, a local, a
// local array, or a load at a per-thread index.
#pragma once

#include <string>

#include "compiler/ir/kernel.h"

namespace tilerun::compiler {

// How far through the pipeline a SimtKernel is; each stage adds the previous ones' promises.
enum class SimtForm {
  Lowered,       // out of lower_parallel: multi-d indices, compute-typed loads, math calls
  Flat,          // + one flat index per load/store (flatten_buffers)
  StorageTyped,  // + loads/stores move storage bits (lower_storage_types)
  Complete,      // + only fma/sqrt calls, no f32 min/max (expand_strict_math): backend-ready
};

// The first problem found, or "" when the kernel is well formed.
std::string simt_problem(const SimtKernel& kernel, SimtForm form);
// TR_CHECK that simt_problem is empty (SIMT IR is compiler-made: a problem is our bug).
void verify_simt(const SimtKernel& kernel, SimtForm form);

}  // namespace tilerun::compiler
