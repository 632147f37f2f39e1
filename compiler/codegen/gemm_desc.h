// A gemm's constants (ir.h Gemm plus its shared tiles' layouts) as a flat i64 array: the CPU
// backend bakes one into the module per gemm and tilerun_cpu_gemm (mma_model.h) reads it back.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/base/check.h"
#include "compiler/codegen/mma_model.h"
#include "compiler/ir/layout.h"
#include "tilerun/dtype.h"

namespace tilerun::compiler {

// A tile dtype's tensor-core input format (bf16, f16, f8e4m3, f8e5m2, and f32 read as tf32; the
// verifiers admit no other).
inline MmaInput mma_input_of(DType d) {
  switch (d) {
    case DType::F32:
      return MmaInput::TF32;
    case DType::F16:
      return MmaInput::F16;
    case DType::F8E4M3:
      return MmaInput::E4M3;
    case DType::F8E5M2:
      return MmaInput::E5M2;
    default:
      return MmaInput::BF16;
  }
}

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0, threads = 0;
  MmaInput a_input = MmaInput::BF16, b_input = MmaInput::BF16;  // the operands' formats
  bool trans_a = false, trans_b = false;
  Layout a_layout, b_layout;  // rank 2, over the tiles' shapes
  Swizzle a_swizzle, b_swizzle;

  static constexpr int kSize = 8 + 2 * 7;

  std::vector<int64_t> encode() const {
    std::vector<int64_t> out{
        m,       n,      k, threads, static_cast<int64_t>(a_input), static_cast<int64_t>(b_input),
        trans_a, trans_b};
    for (const auto* p : {&a_layout, &b_layout}) {
      TR_CHECK(p->rank() == 2, "gemm tile layouts are 2-d");
      out.insert(out.end(), {p->shape[0], p->shape[1], p->stride[0], p->stride[1]});
    }
    for (const Swizzle* s : {&a_swizzle, &b_swizzle})
      out.insert(out.end(), {s->bits, s->base, s->shift});
    TR_CHECK(out.size() == kSize, "gemm descriptor size");
    return out;
  }

  static GemmDesc decode(const int64_t* d) {
    GemmDesc g;
    g.m = d[0], g.n = d[1], g.k = d[2], g.threads = d[3];
    g.a_input = static_cast<MmaInput>(d[4]), g.b_input = static_cast<MmaInput>(d[5]);
    g.trans_a = d[6], g.trans_b = d[7];
    g.a_layout = make_layout({d[8], d[9]}, {d[10], d[11]});
    g.b_layout = make_layout({d[12], d[13]}, {d[14], d[15]});
    g.a_swizzle =
        Swizzle{static_cast<int>(d[16]), static_cast<int>(d[17]), static_cast<int>(d[18])};
    g.b_swizzle =
        Swizzle{static_cast<int>(d[19]), static_cast<int>(d[20]), static_cast<int>(d[21])};
    return g;
  }
};

}  // namespace tilerun::compiler
