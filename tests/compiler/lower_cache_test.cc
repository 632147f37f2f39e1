// The lowering cache (compiler/lower_cache.h): a second lowering of a kernel is a hit that gives
// the same SIMT kernel (the same text, structurally equal) and the same proof counts, asks Z3
// nothing, and so gives the same generated code; another concrete shape or another kernel is
// another entry; a damaged entry is never used (lowered again, rewritten); no build id, no cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compiler/base/build_id.h"
#include "compiler/ir/ir_equal.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/lower_cache.h"
#include "compiler/test_kernels.h"

namespace tilerun::compiler {
namespace {

namespace fs = std::filesystem;

class LowerCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() /
           ("tilerun-lower-cache-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    if (!fs::exists(dir_ / "lowered-v1")) return out;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "lowered-v1"))
      if (e.is_regular_file()) out.push_back(e.path());
    return out;
  }
  fs::path dir_;
};

TEST_F(LowerCache, TheLibraryHasABuildId) {
  // The build links with a build id (GNU ld's default); without one nothing would be cached.
  EXPECT_GE(library_build_id().size(), 16u) << library_build_id();
}

TEST_F(LowerCache, AHitIsTheKernelLoweringGives) {
  for (Kernel (*make)() : {testing::softmax_kernel, testing::matmul_kernel,
                           testing::mixed_dtype_kernel, testing::int_kernel}) {
    const Kernel k = make();
    SCOPED_TRACE(k.sig.name);
    LowerOptions options;
    AnalysisReport report;
    options.report = &report;
    const SimtKernel direct = lower(k, options);
    const CachedLowering miss = lower_cached(k, {}, dir_.string());
    EXPECT_FALSE(miss.hit);
    const CachedLowering hit = lower_cached(k, {}, dir_.string());
    ASSERT_TRUE(hit.hit);
    EXPECT_EQ(print(hit.kernel), print(direct));
    EXPECT_TRUE(equal(hit.kernel, direct));
    const ProofCounts want = proof_counts(report);
    EXPECT_EQ(hit.proofs.proved, want.proved);
    EXPECT_EQ(hit.proofs.unknown, want.unknown);
    EXPECT_EQ(hit.proofs.disproved, want.disproved);
    EXPECT_GT(hit.proofs.proved, 0);
    EXPECT_EQ(hit.stats.z3_queries, 0);
  }
}

TEST_F(LowerCache, AnotherShapeOrKernelIsAnotherEntry) {
  const Kernel k = testing::softmax_kernel();
  lower_cached(k, {}, dir_.string());
  EXPECT_EQ(entries().size(), 1u);
  // The launch's dims as the analysis's concrete shape can pin the kernel: another key.
  LowerOptions pinned;
  pinned.analysis.concrete[k.sig.dims[0].name] = 7;
  EXPECT_FALSE(lower_cached(k, pinned, dir_.string()).hit);
  EXPECT_TRUE(lower_cached(k, pinned, dir_.string()).hit);
  EXPECT_EQ(entries().size(), 2u);
  EXPECT_FALSE(lower_cached(testing::matmul_kernel(), {}, dir_.string()).hit);
  EXPECT_EQ(entries().size(), 3u);
  // No directory: no cache.
  EXPECT_FALSE(lower_cached(k, {}, "").hit);
}

TEST_F(LowerCache, ADamagedEntryIsLoweredAgain) {
  const Kernel k = testing::rmsnorm_kernel();
  const std::string want = print(lower_cached(k, {}, dir_.string()).kernel);
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  std::string bytes;
  {
    std::ifstream in(entry, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  bytes[bytes.size() / 2] ^= 0x20;  // a flipped bit in the SIMT text
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << bytes;
  const CachedLowering again = lower_cached(k, {}, dir_.string());
  EXPECT_FALSE(again.hit);
  EXPECT_EQ(print(again.kernel), want);
  const CachedLowering hit = lower_cached(k, {}, dir_.string());  // rewritten
  EXPECT_TRUE(hit.hit);
  EXPECT_EQ(print(hit.kernel), want);
}

}  // namespace
}  // namespace tilerun::compiler
