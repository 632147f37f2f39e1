#include "random_kernels.h"

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"

namespace tilerun::compiler::testing {
namespace {

// Draws from the raw engine output only (std:: distributions differ between libraries).
class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}
  int below(int n) { return static_cast<int>(engine_() % static_cast<uint32_t>(n)); }
  bool coin() { return below(2) == 1; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(static_cast<int>(v.size()))];
  }

 private:
  std::mt19937 engine_;
};

struct Gen {
  Rng& rng;
  Scope& s;
  std::vector<Val> floats;  // f32 values in scope
  std::vector<Val> ints;    // i32 values in scope
  int depth_left = 3;

  Val float_literal() {
    static const std::vector<float> values = {0.0f,    1.0f,    -1.0f, 0.5f,  -2.25f,
                                              3.0e-5f, 1.0e10f, 0.1f,  -0.0f, 7.0f};
    return Val(rng.pick(values));
  }
  Val int_literal() { return literal(Type::I32, rng.below(41) - 20); }

  Val f(int depth) {
    if (depth <= 0 || rng.below(4) == 0)
      return rng.below(3) == 0 || floats.empty() ? float_literal() : rng.pick(floats);
    auto a = [&] { return f(depth - 1); };
    switch (rng.below(20)) {
      case 0:
        return a() + a();
      case 1:
        return a() - a();
      case 2:
        return a() * a();
      case 3:
        return a() / a();
      case 4:
        return min(a(), a());
      case 5:
        return max(a(), a());
      case 6:
        return fma(a(), a(), a());
      case 7:
        return sqrt(abs(a()));
      case 8:
        return exp(a());
      case 9:
        return log(abs(a()) + 1.0f);
      case 10:
        return tanh(a());
      case 11:
        return sigmoid(a());
      case 12:
        return rsqrt(abs(a()) + 1.0f);
      case 13:
        return select(a() < a(), a(), a());
      case 14:
        return -a();
      case 15:
        return to_f32(i(depth - 1));
      case 16:
        return bitcast(Type::F32, i(depth - 1) & literal(Type::I32, 0x3fffffff));
      case 17:
        return sin(a());
      case 18:
        return cos(a());
      default:
        return s.let(a(), "t");
    }
  }

  Val i(int depth) {
    if (depth <= 0 || rng.below(4) == 0)
      return rng.below(3) == 0 || ints.empty() ? int_literal() : rng.pick(ints);
    auto a = [&] { return i(depth - 1); };
    switch (rng.below(15)) {
      case 0:
        return a() + a();
      case 1:
        return a() - a();
      case 2:
        return a() * a();
      case 3:
        return a() / literal(Type::I32, 1 + rng.below(7));
      case 4:
        return a() % literal(Type::I32, 1 + rng.below(7));
      case 5:
        return a() & a();
      case 6:
        return a() | a();
      case 7:
        return a() ^ a();
      case 8:
        return shl(a(), literal(Type::I32, rng.below(31)));
      case 9:
        return rng.coin() ? shr(a(), literal(Type::I32, rng.below(31)))
                          : shr_logical(a(), literal(Type::I32, rng.below(31)));
      case 10:
        return select(a() >= a() || !(a() == a()), a(), a());
      case 11:
        return rng.coin() ? min(a(), a()) : max(a(), a());
      case 12:
        return to_i32(f(depth - 1));
      case 13:  // a cast of an i64 constant, and negated constants: spellings of their own
        return rng.coin() ? to_i32(Val(int64_t{rng.below(9) - 4})) : -int_literal();
      default:
        return abs(a());
    }
  }
};

}  // namespace

Kernel random_kernel(uint32_t seed) {
  Rng rng(seed);
  static const std::vector<DType> in_types = {DType::F32, DType::BF16, DType::F16, DType::I32,
                                              DType::U8};
  static const std::vector<DType> out_types = {DType::F32, DType::BF16, DType::F16};
  KernelBuilder kb("random_" + std::to_string(seed));
  DimBounds nb;
  if (rng.coin()) nb = {.min = 4, .max = 1 << 20, .divisible_by = 4};
  Dim N = kb.dim("N", nb);
  Buf x = kb.input("x", rng.pick(in_types), {N});
  Buf y = kb.output("y", rng.pick(out_types), {N});
  Buf z = kb.output("z", rng.coin() ? DType::I32 : DType::U8, {N});
  Val sc = kb.scalar_f32("s");
  Val k = kb.scalar_i32("k");
  const int block = rng.pick(std::vector<int>{32, 64, 128});
  const int threads = rng.pick(std::vector<int>{32, 64, 128});
  kb.body({ceildiv(N, block)}, threads, [&](Scope& s) {
    Idx base = s.block_idx(0) * block;
    auto x_f32 = [&](const Idx& at) {
      Val v = x(at);
      return v.type() == Type::F32 ? v : to_f32(v);
    };
    std::vector<Val> uniform_f = {sc};
    int statements = 1 + rng.below(4);
    for (int st = 0; st < statements; ++st) {
      switch (rng.below(5)) {
        case 0: {  // a reduction over the row, used by later statements
          Val r = s.reduce(static_cast<ReduceOp>(rng.below(3)), N,
                           [&](Idx j) { return x_f32(j) * (rng.coin() ? sc : Val(1.0f)); });
          uniform_f.push_back(r);
          break;
        }
        case 1: {  // a shared tile filled by a copy, read after a barrier
          Buf t = s.alloc_shared("tile" + std::to_string(st), x.dtype(), {block});
          s.copy(t.region({0}, {block}), x.region({base}, {block}));
          s.barrier();
          s.parallel(block, [&](Idx i) {
            s.if_then(base + i < N, [&] {
              Val v = t(i);
              y(base + i) = (v.type() == Type::F32 ? v : to_f32(v)) + sc;
            });
          });
          s.barrier();
          break;
        }
        case 2: {  // integers, with an else branch
          if (rng.coin()) s.annotate_layout(1 << rng.below(3));
          s.parallel(block, [&](Idx i) {
            Gen g{rng, s, {x_f32(base + i)}, {k, to_i32(base + i)}};
            s.if_then_else(
                base + i < N, [&] { z(base + i) = g.i(3); }, [&] {});
          });
          break;
        }
        case 3: {  // a per-thread serial loop
          s.parallel(block, [&](Idx i) {
            s.if_then(base + i < N, [&] {
              s.serial(1 + rng.below(3), [&](Idx r) {
                y(base + i) = x_f32(base + i) * to_f32(r) + uniform_f.back();
              });
            });
          });
          break;
        }
        default: {  // floating-point expressions
          s.parallel(block, [&](Idx i) {
            s.if_then(base + i < N, [&] {
              std::vector<Val> fs = uniform_f;
              fs.push_back(x_f32(base + i));
              Gen g{rng, s, fs, {k}};
              y(base + i) = g.f(3);
            });
          });
        }
      }
    }
  });
  return kb.build();
}

}  // namespace tilerun::compiler::testing
