// The bf16 store's rounding, as a session runs it: a cast of f32 bit patterns to bf16, and the
// rounding those patterns must get, worked out here on the bits (to nearest even on the 16 dropped
// bits, a NaN to 0x7fc0). Shared by the CPU session test and the GPU one (CPU ≡ GPU).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tilerun/tilerun.h"

namespace tilerun::testing {

// Every exponent (subnormals and inf/NaN's too) with fractions at and around the halfway point of
// the 16 dropped bits, both signs and both parities of the kept bit, then random bit patterns.
inline std::vector<uint32_t> bf16_rounding_patterns(uint64_t seed, size_t n) {
  std::vector<uint32_t> bits;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t kept : {0x00u, 0x01u, 0x7eu, 0x7fu})  // the 7 kept fraction bits
        for (uint32_t low : lows) bits.push_back(sign | e << 23 | kept << 16 | low);
  std::mt19937_64 rng(seed);
  while (bits.size() < n) bits.push_back(static_cast<uint32_t>(rng()));
  bits.resize(n);
  return bits;
}

inline uint16_t bf16_rounded(uint32_t b) {
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// The bits of cast(x, bf16) run by a session on `device`.
inline std::vector<uint16_t> bf16_cast_in_session(Device device, const std::vector<uint32_t>& x) {
  const std::string yaml =
      "model: bf16_round\ndims: {N: " + std::to_string(x.size()) +
      "}\ninputs:\n  x: {shape: [N], dtype: f32}\nlayers:\n  - name: l\n"
      "    ops:\n      - {op: cast, in: x, out: y, to: bf16}\noutputs: [l.y]\n";
  Session s(parse_model(yaml, "bf16_round.yaml"), {.device = device, .forward_only = true});
  HostTensor t{.dtype = DType::F32,
               .shape = {static_cast<int64_t>(x.size())},
               .data = std::vector<uint8_t>(x.size() * 4)};
  std::memcpy(t.data.data(), x.data(), t.data.size());
  s.set_tensor("x", t);
  s.forward();
  const HostTensor y = s.tensor("l.y");
  std::vector<uint16_t> out(x.size());
  std::memcpy(out.data(), y.data.data(), std::min(y.data.size(), out.size() * 2));
  return out;
}

}  // namespace tilerun::testing
