// The kernel the cubin cache tests compile: a fresh constant (`salt`) each run, so no cache
// outside the test can answer.
#pragma once

#include <string>

namespace tilerun::compiler {

inline std::string cache_test_kernel(const std::string& name, unsigned long salt) {
  return "extern \"C\" __global__ void " + name +
         "(float* y, const float* x, float a, int n) {\n"
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) y[i] = a * x[i] + y[i] + " +
         std::to_string(salt) + ".0f;\n}\n";
}

}  // namespace tilerun::compiler
