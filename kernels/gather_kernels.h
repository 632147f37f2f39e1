// The owner-computes gather behind the gradients of gather_rows (kernels/embedding.cc) and
// gather_sum (kernels/gather_sum.cc): each table row sums the dy rows its inverse entries name,
// after checking that each entry names an id equal to the row, so a wrong inverse gives a NaN row
// and never a wrong sum.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/ir/builder.h"
#include "tilerun/dtype.h"

namespace tilerun::kernels {

// dtable [V, D] from ids i32 [N·group], inverse i32 [V, J] and dy [N, D]: one block per (table
// row, column tile). The row's J inverse entries are checked against ids once, into shared memory
// (an entry that fails is -1), then each thread adds its columns' dy rows in j order (f32, from
// +0), NaN for the whole row if any entry failed. An entry q names dy's row q / group (group: the
// ids a dy row stands for, gather_sum's J; 1 for gather_rows). J is the kernel's constant (a loop
// the compiler unrolls, its loads independent of one another); with `vec` (D a multiple of 8) each
// thread takes 8 adjacent columns, 16 bytes of bf16 a load. `name` is the kernel's, less its
// dtype. Dims N, V, D.
compiler::Kernel build_gather_rows_grad_checked(DType dtype, int64_t j, bool vec,
                                                const std::string& name, int64_t group = 1);

}  // namespace tilerun::kernels
