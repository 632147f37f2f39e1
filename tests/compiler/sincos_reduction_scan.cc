// Not a test: the exhaustive scan behind strict_sin/strict_cos's error argument
// (compiler/transforms/strict_math.cc) and the hard cases of strict_math_test.cc. For every f32
// a ≥ π/4 it computes a·2/π mod 4 with 2/π to 400 bits (each a = M·2^(E-150): M times the
// 128 bits of 2/π that matter at exponent E, mod 2^128 in units of 2^-126) and prints, per
// binade, the smallest distance to a multiple of π/2, then the worst below and above 2^17.
// About 2^30 multiplications (~10 s):
//   g++ -O2 -std=c++20 tests/compiler/sincos_reduction_scan.cc -o /tmp/scan && /tmp/scan
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

// 2/π = 0.a2f9836e...₁₆, 400 bits (checked against Machin's formula to 600 bits).
constexpr char kTwoOverPiHex[] =
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1"
    "921cfe1d";

int bit(int j) {  // the 2^-j bit of 2/π, j ≥ 1
  char c = kTwoOverPiHex[(j - 1) / 4];
  int v = c <= '9' ? c - '0' : c - 'a' + 10;
  return (v >> (3 - (j - 1) % 4)) & 1;
}

using u128 = unsigned __int128;

}  // namespace

int main() {
  double worst[2] = {1, 1};
  uint32_t worst_at[2] = {0, 0};
  for (int e = 126; e < 255; ++e) {
    // floor(2/π · 2^(e-24)) mod 2^128: bits j in (e-152, e-24]; earlier bits add multiples of 4.
    u128 g = 0;
    for (int j = e - 24 - 127; j <= e - 24; ++j) g = (g << 1) | (j >= 1 ? u128(bit(j)) : 0);
    double best = 1;
    uint32_t best_at = 0;
    for (uint32_t m = 1u << 23; m < (1u << 24); ++m) {
      uint32_t bits = uint32_t(e) << 23 | (m & 0x7fffff);
      float x;
      std::memcpy(&x, &bits, 4);
      if (x < 0.785398163f) continue;
      u128 v = u128(m) * g;  // a·2/π mod 4, units of 2^-126
      u128 d = v - (((v + (u128(1) << 125)) >> 126) << 126);
      double dist = std::fabs(double(static_cast<__int128>(d))) * std::ldexp(1.0, -126);
      if (dist < best) best = dist, best_at = bits;
    }
    float x;
    std::memcpy(&x, &best_at, 4);
    std::printf("E=%d min|a*2/pi - n| = 2^%.2f at %a\n", e, std::log2(best), x);
    int large = e >= 144;  // a ≥ 2^17: Payne–Hanek
    if (best < worst[large]) worst[large] = best, worst_at[large] = best_at;
  }
  for (int large = 0; large < 2; ++large) {
    float x;
    std::memcpy(&x, &worst_at[large], 4);
    std::printf("%s 2^17: 2^%.2f quadrants at %a\n", large ? "above" : "below",
                std::log2(worst[large]), x);
  }
}
