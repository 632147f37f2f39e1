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
};

// The model the CPU backend uses (see docs: the GPU test tests/cuda/mma_model_gpu_test.cc
// records how it compares with the H200).
MmaModel hopper_mma_model();

// c + sum_{i < n} a[i] * b[i] by the model, a and b raw bf16 (or f16 when `f16`) bits, n <= group.
float mma_group(const MmaModel& model, float c, const uint16_t* a, const uint16_t* b, int n,
                bool f16);

// c + the dot product of a[0..k) and b[0..k) (strides in elements), group after group in k order.
float mma_dot(const MmaModel& model, float c, const uint16_t* a, int64_t a_stride,
              const uint16_t* b, int64_t b_stride, int64_t k, bool f16);

}  // namespace tilerun::compiler

// The CPU backend's call for one block's gemm: `acc` holds every thread's accumulator values
// (thread t's value v at t * values + v), `a`/`b` the shared tiles (storage bits), `desc` the
// gemm's constants (gemm_desc.h). Called by the JIT by address.
extern "C" void tilerun_cpu_gemm(float* acc, const uint16_t* a, const uint16_t* b,
                                 const int64_t* desc);
