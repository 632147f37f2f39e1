#include "compiler/transforms/lower_storage_types.h"

#include <bit>
#include <cstdint>

#include "compiler/base/check.h"
#include "compiler/ir/ir_visitor.h"
#include "compiler/ir/names.h"
#include "compiler/transforms/narrow_float.h"
#include "compiler/transforms/strict_math.h"

namespace tilerun::compiler {
namespace {

// bf16_bits of an f32 on the host: to nearest even on the dropped 16 bits, a NaN to 0x7fc0.
int64_t bf16_bits_of(float x) {
  if (x != x) return 0x7fc0;
  const uint32_t b = std::bit_cast<uint32_t>(x);
  return static_cast<int16_t>(static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16));
}

class StorageLowerer : public IRMutator {
 public:
  StorageLowerer(const SimtKernel& k, NameGen* names) : k_(k), names_(names) {}

 protected:
  Expr mutate_expr(const Load* op, const Expr&) override {
    DType d = dtype_of(op->buffer);
    Expr raw = Load::make(storage_type(d), op->buffer, {mutate(op->indices[0])});
    switch (d) {
      case DType::BF16:
        return bf16_bits_to_f32(raw);
      case DType::F16:
        return f16_bits_to_f32(raw, names_->fresh("f16"));
      case DType::U8:
        return Binary::make(BinaryOp::And, Cast::make(Type::I32, raw), make_i32(0xff));
      case DType::Bool:  // any nonzero byte is true: 1
        return Cast::make(Type::I32, Binary::make(BinaryOp::Ne, raw, make_const(Type::I8, 0)));
      case DType::F8E4M3:
      case DType::F8E5M2:
      case DType::E8M0:
        return narrow_float_to_f32(d, Cast::make(Type::I32, raw), names_->fresh("f8"));
      default:
        return raw;
    }
  }

  Stmt mutate_stmt(const Store* op, const Stmt&) override {
    DType d = dtype_of(op->buffer);
    // A 16-bit float copied to a buffer of its own dtype moves its bits: widening is exact and
    // rounding back gives the same bits (only a NaN's payload could change, and every f32 or
    // 16-bit result computed from it is canonicalised anyway), so the round trip through f32 is
    // left out. This is what lets tensor-core staging copy bytes.
    // The same for an FP8 code: decoding is exact and encoding gives it back (a NaN stays NaN).
    if (d == DType::BF16 || d == DType::F16 || d == DType::F8E4M3 || d == DType::F8E5M2)
      if (const Load* src = op->value.as<Load>(); src && dtype_of(src->buffer) == d)
        return Store::make(op->buffer, {mutate(op->indices[0])},
                           Load::make(storage_type(d), src->buffer, {mutate(src->indices[0])}));
    Expr v = mutate(op->value);
    switch (d) {
      case DType::BF16:
        // A constant is rounded here (a zero fill stores 0, not a conversion a lane).
        if (const FloatImm* c = v.as<FloatImm>())
          v = make_const(Type::I16, bf16_bits_of(static_cast<float>(c->value)));
        else
          v = Call::make(CallOp::Bf16Bits, {v});
        break;
      case DType::F16:
        v = f32_to_f16_bits(v, names_->fresh("f16"));
        break;
      case DType::U8:
        v = Cast::make(Type::I8, v);
        break;
      case DType::Bool:  // any nonzero value stores as 1
        v = Cast::make(Type::I8, Binary::make(BinaryOp::Ne, v, make_const(v.type(), 0)));
        break;
      case DType::F8E4M3:
      case DType::F8E5M2:
      case DType::E8M0:
        v = Cast::make(Type::I8, f32_to_narrow_float(d, v, names_->fresh("f8")));
        break;
      case DType::F32:
        if (find_buffer(k_.sig, op->buffer)) v = canonicalize_nan(v, names_->fresh("nan"));
        break;
      default:
        break;
    }
    return Store::make(op->buffer, {mutate(op->indices[0])}, v);
  }

 private:
  DType dtype_of(const std::string& name) const {
    if (const BufferParam* b = find_buffer(k_.sig, name)) return b->dtype;
    if (const SimtArray* a = find_shared(k_, name)) return a->dtype;
    const SimtArray* a = find_local_array(k_, name);
    TR_CHECK(a, "unknown buffer '" + name + "'");
    return a->dtype;
  }

  const SimtKernel& k_;
  NameGen* names_;
};

}  // namespace

SimtKernel lower_storage_types(const SimtKernel& kernel) {
  NameGen names(kernel);
  SimtKernel out = kernel;
  out.body = StorageLowerer(kernel, &names).mutate(kernel.body);
  return out;
}

}  // namespace tilerun::compiler
