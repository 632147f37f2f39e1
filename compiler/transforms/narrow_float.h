// The 8-bit float formats as strict IR: f32 ↔ f8e4m3, f8e5m2 and e8m0, built only from integer
// operations, comparisons, selects, bitcasts and one IEEE f32 addition (the subnormal rounding),
// so the CPU and the GPU give the same bits — and the same bits as graph/model/numeric_convert,
// the host's conversion from double (tests/compiler/narrow_float_test.cc checks every code and
// every rounding tie against it).
//
//   f8e4m3  round to nearest even; no infinities: saturates to ±448 (±inf too); NaN to 0x7F.
//   f8e5m2  round to nearest even; IEEE-like: overflow to ±inf; NaN to 0x7E.
//   e8m0    2^(e-127), 0xFF = NaN; a positive value goes to the nearest power of two (1.5·2^k,
//           the tie, goes up), zero and negatives to 2^-127, beyond 2^127 to 2^127.
//   fp4e2m1 round to nearest even; saturates to ±6 (±inf too); NaN to +6 (e2m1 has no NaN).
//           Only as a value code here (a fake-quant rounds through it); FP4 storage, two codes
//           per byte, is not a load/store format yet.
// A code arrives and leaves as the low 8 (fp4e2m1: 4) bits of an i32.
#pragma once

#include <string>

#include "compiler/ir/ir.h"

namespace tilerun::compiler {

// Whether `dtype` is one of the 8-bit storage formats above (f8e4m3, f8e5m2, e8m0).
bool is_narrow_float(DType dtype);
// Whether the conversions below take `dtype`: the 8-bit formats and fp4e2m1.
bool is_small_float_code(DType dtype);
// The code's value as f32 (exact: every code of these formats is an f32).
Expr narrow_float_to_f32(DType dtype, const Expr& code, const std::string& prefix);
// The f32 value's code (an i32 in 0..255).
Expr f32_to_narrow_float(DType dtype, const Expr& x, const std::string& prefix);
// narrow_float_to_f32(f32_to_narrow_float(x)) for f8e4m3, f8e5m2 and fp4e2m1, bit for bit,
// without the code: the value rounded on f32's own bits (a fake-quant's round trip in about a
// third of the operations).
Expr round_to_narrow_float(DType dtype, const Expr& x, const std::string& prefix);

}  // namespace tilerun::compiler
