// Edge values for the op families' worked examples (NaN, ±inf), as doubles.
#pragma once

#include <limits>

namespace tilerun::kernels {

constexpr double kNaN() { return std::numeric_limits<double>::quiet_NaN(); }
constexpr double kInf() { return std::numeric_limits<double>::infinity(); }

}  // namespace tilerun::kernels
