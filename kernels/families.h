// One registration function per op family; kernels/register_all.cc calls each once.
#pragma once

namespace tilerun::kernels {
class OpRegistry;

void register_elementwise(OpRegistry& registry);  // add, mul, scale, silu, silu_grad
void register_norm(OpRegistry& registry);         // rmsnorm, rmsnorm_grad
void register_softmax(OpRegistry& registry);      // softmax, softmax_grad (rows)
void register_matmul(OpRegistry& registry);       // matmul

}  // namespace tilerun::kernels
