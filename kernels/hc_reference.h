// The double-precision references of the fused mHC ops (hc.cc says what they compute) and their
// test cases.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/op_registry.h"

namespace tilerun::kernels {

// mixes per token: n for pre, n for post, n² for comb.
inline int64_t mixes_of(int64_t n) { return n * n + 2 * n; }
// The scale group of mix j: 0 pre, 1 post, 2 comb.
inline int64_t group_of(int64_t j, int64_t n) { return j < n ? 0 : j < 2 * n ? 1 : 2; }

std::vector<RefTensor> ref_hc_pre(const std::vector<RefTensor>& in, const Attrs& attrs);
std::vector<RefTensor> ref_hc_pre_grad(const std::vector<RefTensor>& in, const Attrs& attrs);
std::vector<RefTensor> ref_hc_post(const std::vector<RefTensor>& in, const Attrs& attrs);
std::vector<RefTensor> ref_hc_post_grad(const std::vector<RefTensor>& in, const Attrs& attrs);

// The cases the shared test suites run for each op (kernel, gradient, worked examples).
OpTests hc_pre_tests();
OpTests hc_pre_grad_tests();
OpTests hc_post_tests();
OpTests hc_post_grad_tests();

}  // namespace tilerun::kernels
