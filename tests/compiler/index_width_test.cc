// The index-width analysis (analysis/index_width.h) and the pass that pins a kernel's dims where
// that lets its index math fit 32 bits (transforms/pin_index_width.h): random i64 trees checked
// against an exact evaluator, the reason given for a kernel that does not fit, and the pins.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/analysis/index_width.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/transforms/pin_index_width.h"

namespace tilerun::compiler {
namespace {

constexpr __int128 kI32Min = INT32_MIN, kI32Max = INT32_MAX;

// A kernel that stores one i64 value: its dims D0..D2 with the given bounds.
SimtKernel store_kernel(const Expr& value, const std::vector<DimBounds>& dims) {
  SimtKernel k;
  k.sig.name = "store_value";
  for (size_t i = 0; i < dims.size(); ++i) k.sig.dims.push_back({"D" + std::to_string(i), dims[i]});
  k.sig.buffers.push_back({"out", DType::I64, {make_i64(1)}, true});
  k.sig.grid = {make_i64(1)};
  k.sig.threads = 32;
  k.body = Store::make("out", {make_i64(0)}, value);
  return k;
}

// Random i64 trees over the dims and threadIdx.x: + - * floor-/ floor-% min max select, shifts.
class Trees {
 public:
  explicit Trees(uint64_t seed) : rng_(seed) {}
  Expr make(int depth) {
    const int leaf = pick(0, 9);
    if (depth == 0 || leaf < 2) {
      if (pick(0, 2) == 0) return make_i64(pick(-70000, 70000));
      const int v = pick(0, 3);
      return Var::make(Type::I64, v == 3 ? kThreadIdx : "D" + std::to_string(v));
    }
    Expr a = make(depth - 1), b = make(depth - 1);
    switch (pick(0, 9)) {
      case 0:
      case 1:
        return Binary::make(BinaryOp::Add, a, b);
      case 2:
        return Binary::make(BinaryOp::Sub, a, b);
      case 3:
      case 4:
        return Binary::make(BinaryOp::Mul, a, b);
      case 5:  // by a positive constant or a dim (dims are at least 1)
        return Binary::make(pick(0, 1) ? BinaryOp::Div : BinaryOp::Mod, a,
                            pick(0, 1) ? make_i64(pick(1, 300)) : Var::make(Type::I64, "D0"));
      case 6:
        return Binary::make(pick(0, 1) ? BinaryOp::Min : BinaryOp::Max, a, b);
      case 7:
        return Select::make(Binary::make(BinaryOp::Lt, a, b), a, b);
      case 8:
        return Binary::make(BinaryOp::Shl, a, make_i64(pick(0, 12)));
      default:
        return Binary::make(BinaryOp::ShrA, a, make_i64(pick(0, 12)));
    }
  }
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

 private:
  std::mt19937_64 rng_;
};

// Every subexpression's exact value (128-bit, the IR's floor division and modulo); false when
// one leaves the 32-bit range.
bool all_within_32(const Expr& e, const std::vector<int64_t>& dims, int64_t tid, __int128* out) {
  if (const IntImm* i = e.as<IntImm>()) {
    *out = i->value;
  } else if (const Var* v = e.as<Var>()) {
    *out = v->name == kThreadIdx ? tid : dims.at(static_cast<size_t>(v->name[1] - '0'));
  } else if (const Select* s = e.as<Select>()) {
    const Binary* c = s->cond.as<Binary>();
    __int128 x, y;
    if (!all_within_32(c->a, dims, tid, &x) || !all_within_32(c->b, dims, tid, &y)) return false;
    *out = x < y ? x : y;
  } else {
    const Binary* b = e.as<Binary>();
    __int128 x, y;
    if (!all_within_32(b->a, dims, tid, &x) || !all_within_32(b->b, dims, tid, &y)) return false;
    switch (b->op) {
      case BinaryOp::Add:
        *out = x + y;
        break;
      case BinaryOp::Sub:
        *out = x - y;
        break;
      case BinaryOp::Mul:
        *out = x * y;
        break;
      case BinaryOp::Div:
        *out = x / y - ((x % y != 0 && ((x < 0) != (y < 0))) ? 1 : 0);
        break;
      case BinaryOp::Mod:
        *out = x % y + ((x % y != 0 && ((x < 0) != (y < 0))) ? y : 0);
        break;
      case BinaryOp::Min:
        *out = x < y ? x : y;
        break;
      case BinaryOp::Max:
        *out = x > y ? x : y;
        break;
      case BinaryOp::Shl:
        *out = x * (static_cast<__int128>(1) << y);
        break;
      case BinaryOp::ShrA:
        *out = x >= 0 ? x >> y : -((-x - 1) >> y) - 1;
        break;
      default:
        ADD_FAILURE() << "unexpected op";
        return false;
    }
  }
  return *out >= kI32Min && *out <= kI32Max;
}

// Where the analysis says a kernel fits 32 bits, no subexpression leaves the range at any launch
// its bounds allow (the corners of the dims' box and random points, every thread's index); and
// it says so for a fair share of the trees, so the check is not vacuous.
TEST(IndexWidth, RandomTreesFitWhereProvedAndOnlyThere) {
  const uint64_t seed = std::random_device{}();
  Trees trees(seed);
  int fits = 0, total = 0;
  for (int t = 0; t < 3000; ++t) {
    std::vector<DimBounds> bounds;
    for (int d = 0; d < 3; ++d) {
      const int64_t hi = trees.pick(0, 2) == 0 ? trees.pick(1, 1 << 20) : trees.pick(1, 4000);
      bounds.push_back({trees.pick(1, hi), hi, 1});
    }
    const Expr e = trees.make(static_cast<int>(trees.pick(1, 4)));
    const IndexWidth w = index_width(store_kernel(e, bounds));
    ++total;
    if (!w.fits_32) {
      EXPECT_FALSE(w.reason.empty()) << to_string(e);
      continue;
    }
    ++fits;
    for (int s = 0; s < 24; ++s) {
      std::vector<int64_t> dims;
      for (int d = 0; d < 3; ++d) {
        const DimBounds& b = bounds[static_cast<size_t>(d)];
        dims.push_back(s < 8 ? ((s >> d) & 1 ? b.max : b.min) : trees.pick(b.min, b.max));
      }
      const int64_t tid = s % 2 ? 31 : trees.pick(0, 31);
      __int128 v;
      ASSERT_TRUE(all_within_32(e, dims, tid, &v))
          << "seed " << seed << ": proved to fit but leaves 32 bits: " << to_string(e);
    }
  }
  EXPECT_GT(fits, total / 5) << "seed " << seed;
  EXPECT_LT(fits, total) << "seed " << seed;
}

TEST(IndexWidth, NamesTheFirstValueThatMayNotFit) {
  const Expr n = Var::make(Type::I64, "D0");
  const Expr e = Binary::make(BinaryOp::Add, Binary::make(BinaryOp::Mul, n, make_i64(4)),
                              Var::make(Type::I64, kThreadIdx));
  EXPECT_TRUE(index_width(store_kernel(e, {{1, 100000, 1}})).fits_32);
  const IndexWidth wide = index_width(store_kernel(e, {{1, 1 << 30, 1}}));
  EXPECT_FALSE(wide.fits_32);
  EXPECT_EQ(wide.reason, "'(D0 * 4)' may reach [4, 4294967296]");
  // A dim past 2^31 is itself the reason.
  const IndexWidth huge = index_width(store_kernel(n, {{1, int64_t{1} << 40, 1}}));
  EXPECT_FALSE(huge.fits_32);
  EXPECT_NE(huge.reason.find("dim D0 may reach [1, 1099511627776]"), std::string::npos)
      << huge.reason;
}

// The grid is computed on the host: (N + 255) / 256 at N = 2^31 - 1 passes 2^31 there, and the
// kernel's own offsets (block * 256 + thread) still fit.
TEST(IndexWidth, TheGridIsTheHostsArithmetic) {
  const Expr n = Var::make(Type::I64, "D0");
  const Expr offset = Binary::make(
      BinaryOp::Add, Binary::make(BinaryOp::Mul, Var::make(Type::I64, kBlockIdx[0]), make_i64(256)),
      Var::make(Type::I64, kThreadIdx));
  SimtKernel k = store_kernel(Binary::make(BinaryOp::Lt, offset, n), {{1, INT32_MAX, 1}});
  k.sig.buffers[0].dtype = DType::Bool;
  k.sig.threads = 256;
  k.sig.grid = {
      Binary::make(BinaryOp::Div, Binary::make(BinaryOp::Add, n, make_i64(255)), make_i64(256))};
  EXPECT_TRUE(index_width(k).fits_32) << index_width(k).reason;
  // One more block than the grid can have would pass 2^31 - 1.
  k.sig.grid = {
      Binary::make(BinaryOp::Div, Binary::make(BinaryOp::Add, n, make_i64(511)), make_i64(256))};
  EXPECT_FALSE(index_width(k).fits_32);
}

// An i64 loaded from memory is any i64; one under an index contract lies below its bound.
TEST(IndexWidth, LoadedIndicesFitOnlyUnderAContract) {
  SimtKernel k = store_kernel(
      Binary::make(BinaryOp::Mul, Load::make(Type::I64, "idx", {make_i64(0)}), make_i64(512)),
      {{1, 4096, 1}});
  k.sig.buffers.push_back({"idx", DType::I64, {make_i64(1)}, false});
  const IndexWidth open = index_width(k);
  EXPECT_FALSE(open.fits_32);
  EXPECT_NE(open.reason.find("idx[0]"), std::string::npos) << open.reason;
  k.sig.buffers.back().values_below = Var::make(Type::I64, "D0");
  EXPECT_TRUE(index_width(k).fits_32);
}

// A local stepped in a loop grows to its type's range: no fixed point, no 32-bit claim.
TEST(IndexWidth, ACounterSteppedInALoopDoesNotFit) {
  SimtKernel k = store_kernel(Var::make(Type::I64, "count"), {{1, 64, 1}});
  k.locals.push_back({"count", Type::I64});
  const Expr count = Var::make(Type::I64, "count");
  k.body =
      Seq::make({For::make("i", make_i64(0), Var::make(Type::I64, "D0"),
                           Assign::make("count", Binary::make(BinaryOp::Add, count, make_i64(1)))),
                 k.body});
  EXPECT_FALSE(index_width(k).fits_32);
  // Assigned only constants and the loop's variable, it fits.
  k.body = Seq::make({For::make("i", make_i64(0), Var::make(Type::I64, "D0"),
                                Assign::make("count", Var::make(Type::I64, "i"))),
                      Store::make("out", {make_i64(0)}, count)});
  EXPECT_TRUE(index_width(k).fits_32);
}

TEST(PinIndexWidth, PinsTheDimsOnlyWhereThatMakesTheIndexMathFit) {
  const Expr e =
      Binary::make(BinaryOp::Mul, Var::make(Type::I64, "D0"), Var::make(Type::I64, "D1"));
  const SimtKernel k = store_kernel(e, {{1, INT32_MAX, 1}, {1, INT32_MAX, 8}});
  ASSERT_FALSE(index_width(k).fits_32);
  const SimtKernel pinned = pin_index_width(k, {{"D0", 4096}, {"D1", 2048}});
  ASSERT_EQ(pinned.sig.dims.size(), 2u);
  EXPECT_EQ(pinned.sig.dims[0].bounds.min, 4096);
  EXPECT_EQ(pinned.sig.dims[0].bounds.max, 4096);
  EXPECT_EQ(pinned.sig.dims[1].bounds.min, 2048);
  EXPECT_EQ(pinned.sig.dims[1].bounds.max, 2048);
  EXPECT_TRUE(index_width(pinned).fits_32);
  EXPECT_EQ(to_string(pinned.body), to_string(k.body));
  // Not where the launch shape itself passes 2^31, a dim is unknown, or the bounds refuse it.
  EXPECT_EQ(pin_index_width(k, {{"D0", 65536}, {"D1", 65536}}).sig.dims[0].bounds.max, INT32_MAX);
  EXPECT_EQ(pin_index_width(k, {{"D0", 4096}}).sig.dims[0].bounds.max, INT32_MAX);
  EXPECT_EQ(pin_index_width(k, {{"D0", 4096}, {"D1", 2047}}).sig.dims[0].bounds.max, INT32_MAX);
  // A kernel that already fits keeps its bounds.
  const SimtKernel small = store_kernel(e, {{1, 1000, 1}, {1, 1000, 1}});
  EXPECT_EQ(pin_index_width(small, {{"D0", 10}, {"D1", 10}}).sig.dims[0].bounds.max, 1000);
}

}  // namespace
}  // namespace tilerun::compiler
