// Tensors past 2^31 elements on the GPU: the index arithmetic is 64-bit, so a bf16 elementwise
// product over 2^32 + 2^16 elements and an embedding gather from a table of 3·10^9 elements give
// every element right, in graph and launch modes. Each element is compared with a reference
// computed here, on the host, independently of the kernels. Skips without a device; the product
// needs ~25 GiB of device memory and ~40 GiB of host memory (the H200 host has both).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "graph/runtime/cuda_driver.h"
#include "tilerun/tilerun.h"

namespace tilerun {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A finite bf16 with a random sign and mantissa and an exponent in [2^-8, 2^7]: products stay
// normal, so rounding is the only thing a wrong index could hide behind.
uint16_t pattern(uint64_t i, uint64_t salt) {
  uint64_t h = mix(i ^ (salt << 48));
  uint16_t sign = static_cast<uint16_t>((h >> 63) << 15);
  uint16_t exponent = static_cast<uint16_t>(119 + (h >> 8) % 16);
  return sign | static_cast<uint16_t>(exponent << 7) | static_cast<uint16_t>(h & 0x7f);
}

float f32_of(uint16_t b) {
  uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t bf16_of(float f) {  // round to nearest even; finite inputs only
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// f(begin, end) over [0, n) on every host core.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back(f, n * w / workers, n * (w + 1) / workers);
  for (std::thread& t : threads) t.join();
}

HostTensor bf16_tensor(std::vector<int64_t> shape, uint64_t salt) {
  HostTensor t{.dtype = DType::BF16, .shape = std::move(shape)};
  t.data.resize(static_cast<size_t>(dtype_bytes(DType::BF16, t.numel())));
  uint16_t* p = reinterpret_cast<uint16_t*>(t.data.data());
  parallel_for(t.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = pattern(static_cast<uint64_t>(i), salt);
  });
  return t;
}

class LargeTensorGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!graph::cuda_driver(&why)) GTEST_SKIP() << why;
  }
};

// y = x * w over [rows, cols] bf16, every element against the host's product rounded to bf16.
void check_product(Device device, LaunchMode mode, int64_t rows, int64_t cols) {
  Model model = parse_model("model: big\ndtype: bf16\ndims: {R: " + std::to_string(rows) +
                                ", C: " + std::to_string(cols) +
                                "}\ninputs:\n  x: {shape: [R, C], init: zeros}\n"
                                "  w: {shape: [R, C], init: zeros}\n"
                                "layers:\n  - name: l\n    ops:\n"
                                "      - {op: mul, in: [x, w], out: y}\noutputs: [l.y]\n",
                            "big.yaml");
  HostTensor x = bf16_tensor({rows, cols}, 1), w = bf16_tensor({rows, cols}, 2);
  Session s(model, {.device = device, .mode = mode, .forward_only = true});
  s.set_tensor("x", x);
  s.set_tensor("w", w);
  s.forward();
  HostTensor y = s.tensor("l.y");
  ASSERT_EQ(y.numel(), rows * cols);
  const uint16_t* px = reinterpret_cast<const uint16_t*>(x.data.data());
  const uint16_t* pw = reinterpret_cast<const uint16_t*>(w.data.data());
  const uint16_t* py = reinterpret_cast<const uint16_t*>(y.data.data());
  std::atomic<int64_t> first_wrong{INT64_MAX}, wrong{0};
  parallel_for(y.numel(), [&](int64_t b, int64_t e) {
    int64_t n = 0, first = INT64_MAX;
    for (int64_t i = b; i < e; ++i)
      if (py[i] != bf16_of(f32_of(px[i]) * f32_of(pw[i]))) {
        ++n;
        first = std::min(first, i);
      }
    wrong += n;
    int64_t seen = first_wrong.load();
    while (first < seen && !first_wrong.compare_exchange_weak(seen, first)) {
    }
  });
  EXPECT_EQ(wrong.load(), 0) << "first wrong element " << first_wrong.load();
}

// y = table[ids] for a bf16 table [vocab, dim]: its last 8 rows, its first 8 and rows drawn
// across it, each compared byte for byte with the table's row.
void check_gather(Device device, LaunchMode mode, int64_t vocab, int64_t dim, int64_t n) {
  Model model = parse_model("model: table\ndtype: bf16\ndims: {V: " + std::to_string(vocab) +
                                ", D: " + std::to_string(dim) + ", N: " + std::to_string(n) +
                                "}\ninputs:\n  ids: {shape: [N], dtype: i32}\n"
                                "layers:\n  - name: l\n    weights:\n"
                                "      table: {shape: [V, D], init: zeros}\n    ops:\n"
                                "      - {op: embedding, in: [table, ids], out: y}\n"
                                "outputs: [l.y]\n",
                            "table.yaml");
  HostTensor table = bf16_tensor({vocab, dim}, 3);
  HostTensor ids{.dtype = DType::I32, .shape = {n}};
  ids.data.resize(static_cast<size_t>(4 * n));
  int32_t* pid = reinterpret_cast<int32_t*>(ids.data.data());
  for (int64_t i = 0; i < n; ++i)
    pid[i] = i < 8    ? static_cast<int32_t>(vocab - 1 - i)
             : i < 16 ? static_cast<int32_t>(i - 8)
                      : static_cast<int32_t>(mix(static_cast<uint64_t>(i)) % vocab);
  Session s(model, {.device = device, .mode = mode, .forward_only = true});
  s.set_tensor("l.table", table);
  s.set_tensor("ids", ids);
  s.forward();
  HostTensor y = s.tensor("l.y");
  ASSERT_EQ(y.numel(), n * dim);
  int64_t wrong_rows = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(y.data.data() + 2 * i * dim, table.data.data() + 2 * int64_t{pid[i]} * dim,
                    static_cast<size_t>(2 * dim)) != 0)
      ++wrong_rows;
  EXPECT_EQ(wrong_rows, 0);
}

// The same checks on small shapes on the CPU backend (no device needed): the harness itself.
TEST(LargeTensorHarness, SmallShapesOnTheCpu) {
  check_product(Device::Cpu, LaunchMode::Graph, 33, 70);
  check_gather(Device::Cpu, LaunchMode::Graph, 1000, 64, 40);
}

// 2^32 + 2^16 elements, 8 GiB each in bf16.
TEST_F(LargeTensorGpu, ElementwiseProductOver2To32Elements) {
  for (LaunchMode mode : {LaunchMode::Graph, LaunchMode::Launch}) {
    SCOPED_TRACE(mode == LaunchMode::Graph ? "graph" : "launch");
    check_product(Device::Cuda, mode, 65537, 65536);
  }
}

// 11718750 x 256 = 3·10^9 table elements, 6 GB in bf16.
TEST_F(LargeTensorGpu, EmbeddingGatherFromA3e9ElementTable) {
  for (LaunchMode mode : {LaunchMode::Graph, LaunchMode::Launch}) {
    SCOPED_TRACE(mode == LaunchMode::Graph ? "graph" : "launch");
    check_gather(Device::Cuda, mode, 11718750, 256, 4096);
  }
}

}  // namespace
}  // namespace tilerun
