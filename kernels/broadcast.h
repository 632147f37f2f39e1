// NumPy broadcasting for the elementwise ops: the output shape of operands of different shapes,
// the double-precision reference over it, and the broadcast map kernel that indexes each operand
// through its broadcast strides (the flat map kernel of map_kernel.h when every shape is equal).
//
// Rules (NumPy's): shapes are aligned at their last axis, missing leading axes count as 1, and
// on each axis the extents must be equal or one of them 1; the output takes the larger.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"

namespace tilerun::kernels {

// The broadcast shape of `in` (the operands, named by `slots` in errors). Throws ShapeError
// naming the two operands that disagree and both shapes.
std::vector<int64_t> broadcast_shape(const std::vector<TensorType>& in,
                                     const std::vector<std::string>& slots);

// Inference of an elementwise op over broadcast operands: every operand a float tensor (or, with
// `i32`, an i32 one) of the first one's dtype; the output has that dtype and the broadcast shape.
std::vector<TensorType> infer_broadcast(const std::vector<TensorType>& in,
                                        const std::vector<std::string>& slots, bool i32 = false);

// Whether `shape` broadcasts to `target` (NumPy rules, `target` unchanged).
bool broadcasts_to(const std::vector<int64_t>& shape, const std::vector<int64_t>& target);

// out[i] = f(in[0][i'], in[1][i''], ...) over the broadcast shape, each operand read at its own
// broadcast index; arity 1 to 3.
std::vector<RefTensor> ref_broadcast(const std::vector<RefTensor>& in,
                                     const std::function<double(const double*)>& f);

// The expansion of a broadcasting map op: the flat kernel of expand_map when every operand has
// the output's shape, else one kernel over the output's coalesced axes (adjacent axes along
// which every operand varies or is broadcast alike are merged) whose operands are read at their
// own strides. Built once per dtype, elements per thread and broadcast pattern.
ExpandFn expand_broadcast_map(std::shared_ptr<KernelCache> cache, MapOp op);

// The double reference of sum_to: x summed, in index order from -0, over the axes along which
// `shape` broadcasts to x's shape.
RefTensor ref_sum_to_shape(const RefTensor& x, const std::vector<int64_t>& shape);

// The gradient-rule ops that turn `value`, a gradient of the broadcast output's shape, into the
// gradient `dx` of an operand of `operand_shape`: an alias when the shapes are equal, else a
// `sum_to` over the broadcast axes.
GradOp sum_to_shape(const std::string& value, const std::string& dx,
                    const std::vector<int64_t>& operand_shape,
                    const std::vector<int64_t>& out_shape);

}  // namespace tilerun::kernels
