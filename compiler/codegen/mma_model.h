// A software model of the Hopper tensor core's inner product (wgmma, bf16/f16 inputs, f32
// accumulator), so that the CPU backend computes a `gemm` (ir.h Gemm) with the arithmetic the
// GPU uses. Published bit-accurate models of these units (MMA-Sim, arXiv 2511.10909; Khattak &
// Mikaitis, arXiv 2512.07004) describe the scheme written here from scratch: the products of
// each group of `group` consecutive k are exact; they and the running accumulator are aligned to
// the largest exponent among them (a product's exponent taken as the sum of its inputs'
// exponents, the significand product's carry not counted), each truncated (toward zero) to
// `frac_bits` bits below it, summed exactly, and the sum is rounded to f32 toward zero (a
// nonzero sum that vanishes gives +0). NaN and infinities follow IEEE (an invalid sum gives the
// canonical NaN). hopper_mma_model() reproduces the H200 bit for bit on the measured inputs.
#pragma once

#include <cstdint>

namespace tilerun::compiler {

// The tensor core's input formats (wgmma's .bf16, .f16, .e4m3, .e5m2, .tf32). TF32 operands are
// f32 in memory; the unit reads 10 of their 23 fraction bits (MmaModel::round_tf32_inputs).
enum class MmaInput : int { BF16 = 0, F16 = 1, E4M3 = 2, E5M2 = 3, TF32 = 4 };
inline bool mma_input_is_fp8(MmaInput f) { return f == MmaInput::E4M3 || f == MmaInput::E5M2; }

struct MmaModel {
  int group = 16;      // products aligned and summed together (with the accumulator)
  int frac_bits = 25;  // bits kept below the largest term's leading bit
  // How a term's bits below the kept ones go: toward zero (sign-magnitude truncation), or toward
  // minus infinity (a two's-complement shifter's truncation).
  bool floor_terms = false;
  // The final rounding of the exact sum to f32: toward zero, or to nearest even.
  bool nearest_final = false;
  // The alignment exponent of a product from its inputs' exponents alone (without the carry of
  // the significands' product), and subnormal inputs read as zero: schemes some units follow,
  // kept for fitting the model to measurements (tests/cuda/tensor_core_gpu_test.cc).
  bool lead_from_exponents = false;
  bool flush_subnormal_inputs = false;
  // The significant bits a group's result keeps: the exact sum, rounded to f32 as above, is then
  // cut toward zero to this many (24: f32's own; Hopper's FP8 MMA keeps 14). A normal result only.
  int sum_bits = 24;
  // How an f32 operand of a tf32 gemm becomes tf32 (10 fraction bits): its 13 low bits dropped
  // (toward zero), or rounded to nearest (ties away from zero). Other formats ignore it.
  bool round_tf32_inputs = false;
};

// The model the CPU backend uses for bf16/f16 (tests/cuda/tensor_core_gpu_test.cc records how
// it compares with the H200).
MmaModel hopper_mma_model();
// The model for FP8 inputs (wgmma m64nNk32 .e4m3/.e5m2): the same scheme with the instruction's
// 32 products a group, 13 bits kept below the largest term and each group's result cut to 14
// significant bits (DeepSeek-V3 reports "around 14 bits" of accumulation precision on Hopper's FP8
// MMA, the reason its recipe promotes partial sums to f32 every 128 of K). Fitted on the H200:
// every one of 491520 outputs of tests/cuda/tensor_core_gpu_test.cc's Fp8ModelMatchesTheGpu
// (e4m3, e5m2 and mixed; random, every exponent, cancellation, subnormals and zeros, NaN/inf).
MmaModel hopper_mma_model_fp8();
// The model for tf32 inputs (wgmma m64nNk8 .tf32: f32 operands read as tf32): the 16-bit scheme
// with the instruction's 8 products a group and inputs truncated to tf32 (their 13 low bits
// dropped). Fitted on the H100: every one of 327680 outputs of tests/cuda/tensor_core_gpu_test.cc's
// Tf32ModelMatchesTheGpu (random, wide exponents, cancellation, subnormals, infinities and NaNs).
MmaModel hopper_mma_model_tf32();
// The model the CPU backend uses for inputs of format f.
inline MmaModel hopper_mma_model_for(MmaInput f) {
  if (f == MmaInput::TF32) return hopper_mma_model_tf32();
  return mma_input_is_fp8(f) ? hopper_mma_model_fp8() : hopper_mma_model();
}

// c + sum_{i < n} a[i] * b[i] by the model, a and b raw bf16 (or f16 when `f16`) bits, n <= group.
float mma_group(const MmaModel& model, float c, const uint16_t* a, const uint16_t* b, int n,
                bool f16);

// c + the dot product of a[0..k) and b[0..k) (strides in elements), group after group in k order.
float mma_dot(const MmaModel& model, float c, const uint16_t* a, int64_t a_stride,
              const uint16_t* b, int64_t b_stride, int64_t k, bool f16);

// c + the dot product of a[0..k) and b[0..k) of FP8 codes (strides in elements), formats fa and fb
// (E4M3 or E5M2, which wgmma may mix), group after group in k order.
float mma_dot8(const MmaModel& model, float c, const uint8_t* a, int64_t a_stride, MmaInput fa,
               const uint8_t* b, int64_t b_stride, MmaInput fb, int64_t k);

// c + the dot product of a[0..k) and b[0..k) of f32 values read as tf32 (strides in elements),
// group after group in k order.
float mma_dot_tf32(const MmaModel& model, float c, const float* a, int64_t a_stride, const float* b,
                   int64_t b_stride, int64_t k);

// The same over inputs given as their values (each exactly representable in the operands' format:
// a double reference's FP8 or 16-bit inputs): the model reads a value's significand and exponent
// only, so this equals mma_dot8 / mma_dot on the codes. NaN and infinities as IEEE.
float mma_dot_values(const MmaModel& model, float c, const double* a, int64_t a_stride,
                     const double* b, int64_t b_stride, int64_t k);

}  // namespace tilerun::compiler

// The CPU backend's call for one block's gemm: `acc` holds every thread's accumulator values
// (thread t's value v at t * values + v), `a`/`b` the shared tiles (storage bits: 16-bit or, for
// FP8, 8-bit elements; f32 for tf32), `desc` the gemm's constants (gemm_desc.h, each operand's
// MmaInput among them). Called by the JIT by address.
extern "C" void tilerun_cpu_gemm(float* acc, const void* a, const void* b, const int64_t* desc);
