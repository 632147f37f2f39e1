// The flat elementwise kernel shared by the ops that map elements one by one (add, silu, ...):
// out[e] = fn(in0[e], in1[e], ..., scalars) over tensors seen as flat arrays.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "kernels/expand_util.h"
#include "kernels/kernel_cache.h"

namespace tilerun::kernels {

// The element function: the inputs' values at one element (floats as f32, bool and i32 as i32)
// and the scalars; its value is stored in the output's dtype (a bool output takes a nonzero i32
// as true).
using MapFn = std::function<compiler::Val(compiler::Scope&, const std::vector<compiler::Val>& in,
                                          const std::vector<compiler::Val>& scalars)>;

struct MapOp {
  std::string name;  // the kernel's name: "silu" gives silu_f32, silu_x4_bf16, ...
  int arity = 1;
  std::vector<std::string> scalar_attrs;  // f32 scalar parameters, from these attributes
  MapFn fn;
};

// The expansion of a map op: one kernel (built once per dtypes and elements-per-thread in
// `cache`) with parameters in0.., out; N; scalars. Each operand keeps its own dtype (where's bool
// mask beside float branches, a comparison's bool output).
ExpandFn expand_map(std::shared_ptr<KernelCache> cache, MapOp op);

// Whether every operand and the output are at most 2 bytes an element, so that 8 of them are one
// 16-byte access: the maps' vector kernels serve those only (with f32, 32 bytes a thread, they
// measured slower than the 4-element kernels on the H200: V4-mini's f32 gradient sums 54 -> 158
// us at T = 4096).
bool narrow_elements(const std::vector<TensorType>& in, DType out);

// The kernel name's dtype suffix: "_f32" when every operand and the output share one dtype,
// else every operand's then the output's ("_bool_f32_f32_f32").
std::string dtypes_suffix(const std::vector<TensorType>& in, DType out);

}  // namespace tilerun::kernels
