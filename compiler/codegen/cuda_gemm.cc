#include "compiler/codegen/cuda_gemm.h"

#include "compiler/base/check.h"
#include "compiler/ir/layout.h"

namespace tilerun::compiler::cuda {

const char* const kWgmmaHelpers = R"(// ---- wgmma helpers (kernels with a gemm).
static __device__ __forceinline__ unsigned tr_smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// A shared-memory matrix descriptor: K-major, 128B swizzle (layout type 1 in bits 62-63),
// start address >> 4, stride between 8-row atoms 1024 bytes (>> 4 in bits 32-45); the leading
// offset is unused by swizzled K-major layouts.
static __device__ __forceinline__ unsigned long long tr_wgmma_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (1ull << 16) |
         ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
// MN-major (B as [k, n] or n's panels [n / 64, k, 64], or a panel of a transposed A as [k, m]):
// 8-row groups of k 1024 bytes apart (the stride-dimension offset, the one along k for swizzled
// MN-major layouts); the leading offset steps from one 64-wide atom of n (a panel) to the next,
// `panel` bytes on (unused where the instruction's n or m is 64).
static __device__ __forceinline__ unsigned long long tr_wgmma_desc_mn(unsigned addr,
                                                                      unsigned panel = 1024u) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) |
         ((unsigned long long)((panel >> 4) & 0x3FFFu) << 16) |
         ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
// ---- end of wgmma helpers.
)";

std::string wgmma_unsupported(const SimtKernel& k, const Gemm& g) {
  const SimtArray *a = find_shared(k, g.a), *b = find_shared(k, g.b);
  if (!a || !b) return "the operands are not shared arrays";
  const bool fp8 = dtype_is_fp8(a->dtype) && dtype_is_fp8(b->dtype);
  const bool tf32 = a->dtype == DType::F32 && b->dtype == DType::F32;
  if (!fp8 && !tf32 &&
      (a->dtype != b->dtype || (a->dtype != DType::BF16 && a->dtype != DType::F16)))
    return "the operands are not both bf16, both f16, both FP8 or both f32 (tf32)";
  // FP8 (k32 instructions) and tf32 (k8) read both operands K-major: 128-byte rows of 128 FP8
  // or 32 f32 elements.
  if (fp8 && (g.trans_a || !g.trans_b || g.k != 128))
    return "FP8 operands must both be K-major tiles with k = 128 (one 128-byte swizzle atom a "
           "row)";
  if (tf32 && (g.trans_a || !g.trans_b || g.k != 32))
    return "f32 (tf32) operands must both be K-major tiles with k = 32 (one 128-byte swizzle "
           "atom a row)";
  const int64_t eb = fp8 ? 1 : tf32 ? 4 : 2;  // bytes an element
  // A stack of tiles at a stage: each tile as a whole array would be, one tile on from the last,
  // so whole 1024-byte swizzle atoms (the hardware swizzles the address) and whole periods of
  // the swizzle (the same pattern in every tile).
  auto tile_of = [&](const SimtArray* s, const std::vector<int64_t>& tile) {
    std::vector<int64_t> shape = tile;
    if (s == a ? g.a_staged() : g.b_staged())
      shape.insert(shape.begin(), s->shape.empty() ? 0 : s->shape[0]);
    return shape;
  };
  if ((g.a_staged() && (stack_tile_elems(a->shape) * eb) % 1024 != 0) ||
      (g.b_staged() && (stack_tile_elems(b->shape) * eb) % 1024 != 0))
    return "a stack's tiles must be whole 1024-byte swizzle atoms";
  // A transposed a only as m's 64-wide panels [m / 64, k, 64]: each warpgroup's 64 rows of
  // op(a) are then one MN-major panel of 128-byte rows, as an N-major b tile of n = 64.
  // A 2-d transposed a of m = 64 ([k, 64]) is one such panel: the same bytes as [1, k, 64].
  const size_t a_rank = a->shape.size() - (g.a_staged() ? 1 : 0);
  const bool one_panel = g.trans_a && a_rank == 2 && g.m == 64;
  if (g.trans_a && a_rank != 3 && !one_panel)
    return "the lowering takes a K-major a tile ([m, k]) or m's panels ([m / 64, k, 64], or "
           "[k, 64] when m = 64)";
  // An N-major b as one 64-wide tile ([k, 64]) or n's panels ([n / 64, k, 64]): one wgmma reads
  // all of n, the descriptor's leading offset stepping from panel to panel.
  const size_t b_rank = b->shape.size() - (g.b_staged() ? 1 : 0);
  const bool b_panels = !g.trans_b && b_rank == 3;
  if (!g.trans_b && !b_panels && g.n != 64)
    return "the lowering takes an N-major b tile ([k, n]) of n = 64 (one 128-byte row) or n's "
           "panels ([n / 64, k, 64])";
  // A K-major operand's rows are its k: 128 bytes (one swizzle atom row) need k = 64. MN-major
  // operands take k along their 128-byte rows' count, 16 rows a step: any multiple of 16.
  if (!fp8 && !tf32 && ((!g.trans_a || g.trans_b) ? g.k != 64 : g.k % 16 != 0))
    return "the lowering takes k = 64 (one 128-byte swizzle atom per row), or a multiple of 16 "
           "when both tiles are MN-major";
  const Swizzle sw = tensor_core_swizzle(128, static_cast<int>(eb));
  const std::vector<int64_t> b_shape = g.trans_b  ? std::vector<int64_t>{g.n, g.k}
                                       : b_panels ? std::vector<int64_t>{g.n / 64, g.k, 64}
                                                  : std::vector<int64_t>{g.k, g.n};
  const std::vector<int64_t> a_shape = one_panel   ? std::vector<int64_t>{g.k, 64}
                                       : g.trans_a ? std::vector<int64_t>{g.m / 64, g.k, 64}
                                                   : std::vector<int64_t>{g.m, g.k};
  if (!(a->layout == compact_row_major(tile_of(a, a_shape))) || !(a->swizzle == sw) ||
      !(b->layout == compact_row_major(tile_of(b, b_shape))) || !(b->swizzle == sw))
    return "the tiles must be row-major under the 128B swizzle " + to_string(sw);
  if (g.n % 8 != 0 || g.n > 256 || k.sig.threads % 128 != 0 ||
      g.m % (64 * (k.sig.threads / 128)) != 0)
    return std::string("the tile does not split into m64nNk") +
           (fp8    ? "32"
            : tf32 ? "8"
                   : "16") +
           " steps per warpgroup";
  return "";
}

std::vector<std::string> wgmma_lines(const SimtKernel& k, const Gemm& g, const std::string& acc,
                                     const std::string& a, const std::string& b,
                                     const std::string& tid, const std::string& stage) {
  TR_CHECK(wgmma_unsupported(k, g).empty(), "wgmma lowering of an unsupported gemm");
  TR_CHECK(g.stage.defined() == !stage.empty(), "a staged gemm's stage text");
  const int64_t groups = k.sig.threads / 128, blocks = g.m / (64 * groups), regs = g.n / 2;
  // The operands' formats (FP8 ones may differ: e4m3 by e5m2), and the bytes an element: each
  // instruction covers 32 bytes of k (16 elements of 16 bits, 32 of 8 bits, 8 of f32).
  auto format = [&](const std::string& name) -> std::string {
    switch (find_shared(k, name)->dtype) {
      case DType::F32:
        return "tf32";
      case DType::F16:
        return "f16";
      case DType::F8E4M3:
        return "e4m3";
      case DType::F8E5M2:
        return "e5m2";
      default:
        return "bf16";
    }
  };
  const std::string fa = format(g.a), fb = format(g.b);
  const DType ad = find_shared(k, g.a)->dtype;
  const bool fp8 = dtype_is_fp8(ad), tf32 = ad == DType::F32;
  const int64_t eb = fp8 ? 1 : tf32 ? 4 : 2, step_k = 32 / eb;
  std::vector<std::string> out;
  out.push_back("{  // gemm " + acc + " += " + a + " * " + b + "^T over [" + std::to_string(g.m) +
                ", " + std::to_string(g.n) + ", " + std::to_string(g.k) + "]");
  out.push_back("  const unsigned tr_wg = (unsigned)(" + tid + " / 128);");
  // One tile of a stack is its bytes past the stage axis.
  auto tile_bytes = [&](const std::string& name) {
    return std::to_string(stack_tile_elems(find_shared(k, name)->shape) * eb) + "u";
  };
  if (stage.empty()) {
    out.push_back("  const unsigned tr_a0 = tr_smem_addr(" + a + "), tr_b0 = tr_smem_addr(" + b +
                  ");");
  } else {
    out.push_back("  const unsigned tr_stage = (unsigned)(" + stage + ");");
    auto at_stage = [&](const std::string& text, const std::string& name, bool staged) {
      return "tr_smem_addr(" + text + ")" + (staged ? " + tr_stage * " + tile_bytes(name) : "");
    };
    out.push_back("  const unsigned tr_a0 = " + at_stage(a, g.a, g.a_staged()) +
                  ", tr_b0 = " + at_stage(b, g.b, g.b_staged()) + ";");
  }
  out.push_back("  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");");
  // Row block r of this warpgroup is rows [64 (r·W + wg), +64) of a (W warpgroups), as
  // wgmma_accumulator_layout deals them (its row blocks outside its warpgroups: register block r
  // of warpgroup wg holds those rows): 64 rows of 128 bytes. Step s of k starts 32 bytes (16
  // elements) further along the rows; the hardware applies the swizzle to the address, so the atoms
  // must be 1024-byte aligned.
  for (int64_t r = 0; r < blocks; ++r) {
    for (int64_t s = 0; s < g.k / step_k; ++s) {
      std::string ops;
      for (int64_t i = 0; i < regs; ++i)
        ops += (i ? ", " : "") + std::string("%") + std::to_string(i);
      // FP8 and tf32 take no transpose immediates (both operands K-major).
      const std::string transposes = fp8 || tf32 ? ""
                                                 : std::string(", ") + (g.trans_a ? "1" : "0") +
                                                       ", " + (g.trans_b ? "0" : "1");
      std::string asm_text = "\"{ .reg .pred p; setp.ne.b32 p, %" + std::to_string(regs + 2) +
                             ", 0; wgmma.mma_async.sync.aligned.m64n" + std::to_string(g.n) + "k" +
                             std::to_string(step_k) + ".f32." + fa + "." + fb + " {" + ops +
                             "}, %" + std::to_string(regs) + ", %" + std::to_string(regs + 1) +
                             ", p, 1, 1" + transposes + "; }\"";
      std::string outs;
      for (int64_t i = 0; i < regs; ++i)
        outs += (i ? ", " : "") + std::string("\"+f\"(") + acc + "[" +
                std::to_string(r * regs + i) + "])";
      // The row block's bytes: K-major, 64 rows of 128 bytes (k step s 32 bytes along them);
      // panels, one [k, 64 (m)] panel of k rows of 128 bytes (k step s 16 rows on, the
      // MN-major descriptor of an N-major b).
      const std::string block = "tr_a0 + (" + std::to_string(r) + "u * " + std::to_string(groups) +
                                "u + tr_wg) * " + std::to_string(g.trans_a ? g.k * 128 : 8192) +
                                "u + ";
      const std::string da = g.trans_a
                                 ? "tr_wgmma_desc_mn(" + block + std::to_string(s * 2048) + "u)"
                                 : "tr_wgmma_desc(" + block + std::to_string(s * 32) + "u)";
      // K-major b: 32 bytes along its rows per k step; N-major: 16 rows of 128 bytes, its
      // panels k x 128 bytes apart.
      const std::string db = g.trans_b ? "tr_wgmma_desc(tr_b0 + " + std::to_string(s * 32) + "u)"
                                       : "tr_wgmma_desc_mn(tr_b0 + " + std::to_string(s * 2048) +
                                             "u, " + std::to_string(g.k * 128) + "u)";
      out.push_back("  asm volatile(" + asm_text + "\n      : " + outs + "\n      : \"l\"(" + da +
                    "), \"l\"(" + db + "), \"r\"(1));");
    }
  }
  out.push_back("  asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");");
  out.push_back("  asm volatile(\"wgmma.wait_group.sync.aligned " + std::to_string(g.pending) +
                ";\" ::: \"memory\");");
  out.push_back("}");
  return out;
}

}  // namespace tilerun::compiler::cuda
