// A kernel at the two levels the compiler has so far: Kernel (Tile IR, what the builder makes)
// and SimtKernel (SIMT IR, a per-thread program both backends consume). Both share the
// signature: dims, global buffers and scalars, in parameter order, plus the grid and threads.
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"
#include "tilerun/dtype.h"

namespace tilerun::compiler {

// What a dim may be bound to at launch: min <= value <= max and value % divisible_by == 0.
struct DimBounds {
  int64_t min = 1;
  int64_t max = std::numeric_limits<int32_t>::max();
  int64_t divisible_by = 1;
};

struct DimParam {
  std::string name;
  DimBounds bounds;
};

// A global tensor parameter, row-major, shape given as i64 expressions over the dims.
struct BufferParam {
  std::string name;
  DType dtype;
  std::vector<Expr> shape;
  bool is_output = false;
  // Defined on an integer input: an index contract, every element lies in [0, values_below)
  // (an i64 expression over the dims). The caller establishes it before the launch (graph/: a
  // run-time check kernel whose status the kernel reads); the index analysis assumes it of every
  // value let-bound to a load of the buffer.
  Expr values_below = {};
  // With values_below: no two elements hold the same value (a permutation of [0, values_below)
  // when the buffer has that many elements: counting_sort's positions). The index analysis
  // assumes that two loads of it give equal values exactly when they read the same element, so
  // a store through such a value (a scatter) can be proved unique.
  bool values_distinct = false;
  // With values_below, on a 1-d buffer: the values do not decrease along it (segment starts, such
  // as counting_sort's offsets). The index analysis assumes that of any two values let-bound to
  // its loads: the one read at the lower element is not the larger, so rows owned by segments,
  // [b[e], b[e + 1]), are proved disjoint across e and a store into them unique.
  bool values_sorted = false;
};

struct ScalarParam {
  std::string name;
  Type type;  // F32, I32 or I64; passed as double at launch
};

enum class MemScope : uint8_t { Shared, Fragment };
const char* mem_scope_name(MemScope s);

// Tile IR on-chip storage: shared is one tile per block; a fragment is a tile distributed over
// the block's threads (who holds which element is the thread mapping's decision).
struct TileAlloc {
  std::string name;
  MemScope scope;
  DType dtype;
  std::vector<int64_t> shape;
  // Shared tiles: tile coordinate → element offset, followed by flatten_buffers. Empty means
  // row-major (compact_row_major(shape)); a swizzled or padded tile states its layout here.
  Layout layout;
  // Shared tiles: applied to the layout's offset (the tensor core's swizzled tiles); none by
  // default.
  Swizzle swizzle;
};

struct KernelSignature {
  std::string name;
  std::vector<DimParam> dims;
  std::vector<BufferParam> buffers;
  std::vector<ScalarParam> scalars;
  std::vector<Expr> grid;  // 1..3 block counts, i64 expressions over the dims; grid[0] is x
  int threads = 0;         // per block, a power of two
};

// Level 1.
struct Kernel {
  KernelSignature sig;
  std::vector<TileAlloc> allocs;
  Stmt body;
};

// Level 4 storage: shared arrays are per block; local arrays and locals are per thread.
// Elements are `dtype`; loads/stores move storage_type(dtype) bits once lower_storage_types ran.
struct SimtArray {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // local arrays are 1-d (per thread)
  Layout layout;               // shared: as TileAlloc::layout (empty = row-major)
  Swizzle swizzle;             // shared: as TileAlloc::swizzle
  int64_t size() const;
};

// The elements of one tile of a stack [S, ..tile] (ir.h Gemm::stage): shape past its first axis.
int64_t stack_tile_elems(const std::vector<int64_t>& shape);
// Whether a swizzled stack's tiles are whole periods of its swizzle, so that every tile swizzles
// alike and a tile's offsets may be swizzled from its own start (flatten_buffers, the gemm).
bool tiles_whole_swizzle_periods(const std::vector<int64_t>& shape, const Swizzle& swizzle);

struct SimtLocal {
  std::string name;
  Type type;
};

// Level 4.
struct SimtKernel {
  KernelSignature sig;
  std::vector<SimtArray> shared;
  std::vector<SimtArray> local_arrays;
  std::vector<SimtLocal> locals;  // mutable scalars written by Assign
  Stmt body;
};

// Lookups by name (nullptr when absent).
const BufferParam* find_buffer(const KernelSignature& sig, const std::string& name);
const TileAlloc* find_alloc(const Kernel& k, const std::string& name);

// The fragments that take a gemm accumulator's layout (infer_layouts step 0 groups the
// Parallels that share fragments): every gemm's accumulator, and every fragment touched by a
// Parallel that touches one of them, transitively.
std::set<std::string> accumulator_fragments(const Kernel& k);
const SimtArray* find_shared(const SimtKernel& k, const std::string& name);
const SimtArray* find_local_array(const SimtKernel& k, const std::string& name);
// The local-array side of a vector move (its dtype is the move's); an internal error if neither
// side is one (the SIMT verifier refuses such a move).
const SimtArray& vector_move_local(const SimtKernel& k, const VectorMove& move);

}  // namespace tilerun::compiler
