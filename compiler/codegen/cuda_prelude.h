// The helpers every generated CUDA kernel starts with (strict integer and conversion
// arithmetic that matches the CPU backend bit for bit), and the backend's fixed limits.
#pragma once

#include <cstdint>

namespace tilerun::compiler::cuda {

// Static shared memory a kernel may declare without opting in to more; above it the kernel's
// arrays live in dynamic shared memory, up to what one block may use on sm_90 (227 KiB), with
// the loader raising the function's limit (cuFuncSetAttribute) and the launch passing the size.
inline constexpr int64_t kMaxStaticShared = 48 * 1024;
inline constexpr int64_t kMaxDynamicShared = 227 * 1024;

// The helpers every kernel's source starts with. Integer arithmetic that could overflow is
// done in unsigned types (signed overflow would be undefined, and NVVM would exploit it);
// everything here is exact, so it matches the CPU backend's LLVM IR bit for bit.
inline constexpr const char* kPrelude =
    R"(// ---- tilerun strict-numerics helpers (identical in every kernel).
// Integers: + - * << wrap (computed unsigned), / and % are floor division and modulo, >>> is
// logical. f32 -> int truncates toward zero, saturates, NaN -> 0. Negation flips the sign bit.
#define TR_INT_OPS(T, U, W)                                                                 \
  static __device__ __forceinline__ T tr_add(T a, T b) { return (T)(W)((W)a + (W)b); }      \
  static __device__ __forceinline__ T tr_sub(T a, T b) { return (T)(W)((W)a - (W)b); }      \
  static __device__ __forceinline__ T tr_mul(T a, T b) { return (T)(W)((W)a * (W)b); }      \
  static __device__ __forceinline__ T tr_neg(T a) { return (T)(W)((W)0 - (W)a); }           \
  static __device__ __forceinline__ T tr_shl(T a, T b) { return (T)(W)((W)a << b); }        \
  static __device__ __forceinline__ T tr_shrl(T a, T b) { return (T)((U)a >> b); }          \
  static __device__ __forceinline__ T tr_shra(T a, T b) { return (T)(a >> b); }            \
  static __device__ __forceinline__ bool tr_ltu(T a, T b) { return (U)a < (U)b; }          \
  static __device__ __forceinline__ T tr_min(T a, T b) { return a < b ? a : b; }           \
  static __device__ __forceinline__ T tr_max(T a, T b) { return a > b ? a : b; }           \
  static __device__ __forceinline__ T tr_div(T a, T b) {                                   \
    T q = (T)(a / b), r = (T)(a % b);                                                      \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(q - 1) : q;                              \
  }                                                                                        \
  static __device__ __forceinline__ T tr_mod(T a, T b) {                                   \
    T r = (T)(a % b);                                                                      \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                              \
  }
TR_INT_OPS(signed char, unsigned char, unsigned int)
TR_INT_OPS(short, unsigned short, unsigned int)
TR_INT_OPS(int, unsigned int, unsigned int)
TR_INT_OPS(long long, unsigned long long, unsigned long long)
#undef TR_INT_OPS
// A scalar shared-memory load inside a lane loop, as an explicit ld.shared: written as a
// generic-pointer load into a lane's element of a local array, NVRTC gave two different cubins
// for one source in one process (a tensor-core epilogue reading its shared tile lane by lane).
template <typename T>
static __device__ __forceinline__ T tr_lds(const T* p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  if constexpr (sizeof(T) == 1) {
    unsigned short v;
    asm volatile("ld.shared.u8 %0, [%1];" : "=h"(v) : "r"(a));
    union { unsigned char u; T t; } c = {(unsigned char)v};
    return c.t;
  } else if constexpr (sizeof(T) == 2) {
    union { unsigned short u; T t; } c;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(c.u) : "r"(a));
    return c.t;
  } else if constexpr (sizeof(T) == 4) {
    union { unsigned u; T t; } c;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(c.u) : "r"(a));
    return c.t;
  } else {
    static_assert(sizeof(T) == 8, "a shared element of 1, 2, 4 or 8 bytes");
    union { unsigned long long u; T t; } c;
    asm volatile("ld.shared.b64 %0, [%1];" : "=l"(c.u) : "r"(a));
    return c.t;
  }
}
static __device__ __forceinline__ float tr_fneg(float x) {
  return __int_as_float((int)((unsigned int)__float_as_int(x) ^ 0x80000000u));
}
static __device__ __forceinline__ signed char tr_f32_to_i8(float x) {
  return x != x ? (signed char)0 : x >= 127.0f ? (signed char)127
       : x <= -128.0f ? (signed char)-128 : (signed char)__float2int_rz(x);
}
static __device__ __forceinline__ short tr_f32_to_i16(float x) {
  return x != x ? (short)0 : x >= 32767.0f ? (short)32767
       : x <= -32768.0f ? (short)-32768 : (short)__float2int_rz(x);
}
static __device__ __forceinline__ int tr_f32_to_i32(float x) {
  return x != x ? 0 : x >= 2147483648.0f ? 2147483647
       : x <= -2147483648.0f ? (-2147483647 - 1) : __float2int_rz(x);
}
static __device__ __forceinline__ long long tr_f32_to_i64(float x) {
  return x != x ? 0LL : x >= 9223372036854775808.0f ? 9223372036854775807LL
       : x <= -9223372036854775808.0f ? (-9223372036854775807LL - 1LL) : __float2ll_rz(x);
}
// An f32 rounded to bf16, its bits: the hardware's conversion rounds to nearest even with
// subnormals kept, as the CPU's integer rounding does; a NaN to 0x7fc0 (the hardware's is 0x7fff).
static __device__ __forceinline__ short tr_bf16_bits(float x) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return x != x ? (short)0x7fc0 : (short)h;
}
// ---- end of helpers.
)";

}  // namespace tilerun::compiler::cuda
