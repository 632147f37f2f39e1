// A gemm's constants (ir.h Gemm plus its shared tiles' layouts) as a flat i64 array: the CPU
// backend bakes one into the module per gemm and tilerun_cpu_gemm (mma_model.h) reads it back.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/base/check.h"
#include "compiler/ir/layout.h"

namespace tilerun::compiler {

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0, threads = 0;
  bool f16 = false, trans_a = false, trans_b = false;
  Layout a_layout, b_layout;  // rank 2, over the tiles' shapes
  Swizzle a_swizzle, b_swizzle;

  static constexpr int kSize = 7 + 2 * 7;

  std::vector<int64_t> encode() const {
    std::vector<int64_t> out{m, n, k, threads, f16, trans_a, trans_b};
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
    g.f16 = d[4], g.trans_a = d[5], g.trans_b = d[6];
    g.a_layout = make_layout({d[7], d[8]}, {d[9], d[10]});
    g.b_layout = make_layout({d[11], d[12]}, {d[13], d[14]});
    g.a_swizzle =
        Swizzle{static_cast<int>(d[15]), static_cast<int>(d[16]), static_cast<int>(d[17])};
    g.b_swizzle =
        Swizzle{static_cast<int>(d[18]), static_cast<int>(d[19]), static_cast<int>(d[20])};
    return g;
  }
};

}  // namespace tilerun::compiler
