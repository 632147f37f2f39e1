// The CPU backend's object-code cache: a second compile of the same kernel is a hit that runs
// with the same bits; an entry damaged on disk (a flipped byte, a cut file, another kernel's
// entry in its place) is reported once, removed, compiled again and rewritten — never loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/test_kernels.h"

namespace tilerun::compiler {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// The cache's entry files, in name order.
std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir / "cpu-object-v1")) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir / "cpu-object-v1"))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

class CpuObjectCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() /
           ("tilerun-cpu-cache-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(dir_);
    const char* old = std::getenv("TILERUN_CACHE_DIR");
    if (old) saved_ = old, had_ = true;
    ::setenv("TILERUN_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (had_)
      ::setenv("TILERUN_CACHE_DIR", saved_.c_str(), 1);
    else
      ::unsetenv("TILERUN_CACHE_DIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Compiles the softmax test kernel and runs it on fixed random rows: the output's bytes.
  std::string run_softmax(bool* from_cache) {
    std::unique_ptr<CpuKernel> k = compile_cpu(testing::softmax_kernel());
    *from_cache = k->from_cache();
    const int64_t T = 3, D = 333;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-8, 8);
    std::vector<float> x(T * D), y(T * D, -1.0f);
    for (float& v : x) v = u(rng);
    k->launch({.buffers = {x.data(), y.data()}, .dims = {T, D}, .scalars = {}});
    return std::string(reinterpret_cast<const char*>(y.data()), y.size() * sizeof(float));
  }

  fs::path dir_;
  std::string saved_;
  bool had_ = false;
};

TEST_F(CpuObjectCache, ASecondCompileIsAHitWithTheSameBits) {
  bool hit = true;
  const std::string first = run_softmax(&hit);
  EXPECT_FALSE(hit);
  std::vector<fs::path> files = entries(dir_);
  ASSERT_EQ(files.size(), 1u);
  const std::string entry = read_all(files[0]);
  EXPECT_EQ(entry.substr(0, 17), "tilerun-object 1\n");
  EXPECT_EQ(run_softmax(&hit), first);
  EXPECT_TRUE(hit);
  EXPECT_EQ(entries(dir_), files);
  EXPECT_EQ(read_all(files[0]), entry);
}

TEST_F(CpuObjectCache, ADamagedEntryIsReportedRemovedAndRebuilt) {
  bool hit = true;
  const std::string want = run_softmax(&hit);
  ASSERT_EQ(entries(dir_).size(), 1u);
  const fs::path file = entries(dir_)[0];
  const std::string good = read_all(file);
  // Another kernel's entry, to copy onto this one's path.
  (void)compile_cpu(testing::axpb_kernel());
  std::string other;
  for (const fs::path& p : entries(dir_))
    if (p != file) other = read_all(p);
  ASSERT_FALSE(other.empty());
  const size_t payload = good.find("\n\n") + 2;
  std::mt19937 rng(std::random_device{}());
  const size_t flip = payload + rng() % (good.size() - payload);
  std::string flipped = good, header_flip = good;
  flipped[flip] = static_cast<char>(flipped[flip] ^ (1 << (rng() % 8)));
  header_flip[20] = static_cast<char>(header_flip[20] ^ 1);
  const std::vector<std::pair<std::string, std::string>> damages = {
      {"a flipped payload byte", flipped},
      {"a flipped header byte", header_flip},
      {"a cut file", good.substr(0, good.size() / 2)},
      {"an empty file", ""},
      {"another kernel's entry", other}};
  for (const auto& [what, bytes] : damages) {
    write_all(file, bytes);
    ::testing::internal::CaptureStderr();
    const std::string got = run_softmax(&hit);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(hit) << what;
    EXPECT_EQ(got, want) << what;
    EXPECT_NE(err.find("tilerun: warning: kernel cache entry"), std::string::npos) << what;
    EXPECT_NE(err.find("softmax"), std::string::npos) << what << ": " << err;
    EXPECT_EQ(read_all(file), good) << what << ": the rewritten entry differs";
  }
}

}  // namespace
}  // namespace tilerun::compiler
