// The cubin cache never hands back a bad binary: every way an entry can go bad on disk (a
// flipped byte anywhere, a cut file, an empty one, two entries' files swapped, a bare cubin
// without the header) is reported once, removed and compiled again, giving the clean compile's
// bytes; concurrent threads and processes writing one entry leave it whole. Needs no GPU.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "cache_test_kernel.h"
#include "compiler/codegen/nvrtc.h"

extern char** environ;

namespace tilerun::compiler {
namespace {

namespace fs = std::filesystem;

std::string scratch_dir() {
  std::random_device rd;
  auto dir = fs::temp_directory_path() /
             ("tilerun-cubin-cache-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  fs::create_directories(dir);
  return dir.string();
}

std::string kernel_source(const std::string& name, unsigned long salt) {
  return cache_test_kernel(name, salt);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

constexpr const char* kWarning = "tilerun: warning: kernel cache entry";

// Two kernels compiled cleanly into one cache folder.
class CubinCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir();
    const unsigned salt = std::random_device{}() % 1000000;
    a_.source = kernel_source("cache_a", salt);
    b_.source = kernel_source("cache_b", salt);
    for (Kernel* k : {&a_, &b_}) {
      k->name = k == &a_ ? "cache_a" : "cache_b";
      CubinResult r = compile_cubin(k->name, k->source, strict_nvrtc_options(), dir_);
      ASSERT_FALSE(r.from_cache);
      k->cubin = r.cubin;
      k->path = cubin_cache_path(dir_, k->source, strict_nvrtc_options());
      ASSERT_TRUE(fs::exists(k->path)) << k->path;
      k->entry = read_all(k->path);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Kernel {
    std::string name, source, cubin, path, entry;
  };

  // Compiles `k` again after its entry was damaged: the clean compile's bytes, compiled afresh,
  // one warning naming the kernel; then the entry answers from the cache again, silently.
  void expect_recompiled(const Kernel& k, const std::string& mode) {
    ::testing::internal::CaptureStderr();
    CubinResult again = compile_cubin(k.name, k.source, strict_nvrtc_options(), dir_);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(again.from_cache) << mode;
    EXPECT_EQ(again.cubin, k.cubin) << mode;
    EXPECT_EQ(count(err, kWarning), 1) << mode << ": " << err;
    EXPECT_NE(err.find(k.name), std::string::npos) << mode << ": " << err;
    EXPECT_EQ(read_all(k.path), k.entry) << mode << ": the rewritten entry differs";

    ::testing::internal::CaptureStderr();
    CubinResult cached = compile_cubin(k.name, k.source, strict_nvrtc_options(), dir_);
    const std::string quiet = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(cached.from_cache) << mode;
    EXPECT_EQ(cached.cubin, k.cubin) << mode;
    EXPECT_EQ(count(quiet, kWarning), 0) << mode << ": " << quiet;
  }

  std::string dir_;
  Kernel a_, b_;
};

TEST_F(CubinCache, EntryHoldsTheCubinBehindAHeaderNamingItsKey) {
  EXPECT_EQ(a_.entry.substr(0, 15), "tilerun-cubin 2");
  ASSERT_GT(a_.entry.size(), a_.cubin.size());
  EXPECT_EQ(a_.entry.substr(a_.entry.size() - a_.cubin.size()), a_.cubin);
  const std::string digest = fs::path(a_.path).stem().string();
  EXPECT_NE(a_.entry.find("key " + digest + "\n"), std::string::npos);
  CubinResult hit = compile_cubin(a_.name, a_.source, strict_nvrtc_options(), dir_);
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.cubin, a_.cubin);
}

TEST_F(CubinCache, AFlippedByteAnywhereIsCaughtAndRecompiled) {
  const size_t header = a_.entry.size() - a_.cubin.size();
  // In the magic, the key, the size, the digest, the blank line, the cubin's first, middle and
  // last bytes.
  for (size_t at : {size_t{3}, size_t{20}, header - 80, header - 30, header - 1, header,
                    header + a_.cubin.size() / 2, a_.entry.size() - 1}) {
    std::string bad = a_.entry;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    write_all(a_.path, bad);
    expect_recompiled(a_, "byte " + std::to_string(at) + " flipped");
  }
}

TEST_F(CubinCache, TruncatedEmptyAndRawEntriesAreRecompiled) {
  const std::map<std::string, std::string> bad = {
      {"cut in the cubin", a_.entry.substr(0, a_.entry.size() - 100)},
      {"cut in the header", a_.entry.substr(0, 40)},
      {"cut to one byte", a_.entry.substr(0, 1)},
      {"empty", ""},
      {"a bare cubin (no header)", a_.cubin},
      {"a byte appended", a_.entry + "x"},
  };
  for (const auto& [mode, bytes] : bad) {
    write_all(a_.path, bytes);
    expect_recompiled(a_, mode);
  }
}

TEST_F(CubinCache, SwappedEntriesAnswerNeitherKey) {
  ASSERT_NE(a_.cubin, b_.cubin);
  write_all(a_.path, b_.entry);
  write_all(b_.path, a_.entry);
  expect_recompiled(a_, "swapped (a)");
  expect_recompiled(b_, "swapped (b)");
}

TEST_F(CubinCache, AnotherKeysEntryWithAValidDigestIsRefused) {
  // A whole, self-consistent entry whose header names another key: only the key catches it.
  std::string other = a_.entry;
  const size_t key = other.find("key ") + 4;
  other[key] = other[key] == '0' ? '1' : '0';
  write_all(a_.path, other);
  expect_recompiled(a_, "another key");
}

TEST_F(CubinCache, ConcurrentThreadsWritingOneEntryAgree) {
  const std::string source = kernel_source("cache_threads", std::random_device{}() % 1000000);
  std::vector<std::string> cubins(6);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (size_t t = 0; t < cubins.size(); ++t)
    threads.emplace_back([&, t] {
      cubins[t] = compile_cubin("cache_threads", source, strict_nvrtc_options(), dir_).cubin;
    });
  for (std::thread& t : threads) t.join();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, kWarning), 0) << err;
  for (const std::string& c : cubins) EXPECT_EQ(c, cubins[0]);
  CubinResult hit = compile_cubin("cache_threads", source, strict_nvrtc_options(), dir_);
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.cubin, cubins[0]);
  // No temporary file is left beside the entry.
  const fs::path folder =
      fs::path(cubin_cache_path(dir_, source, strict_nvrtc_options())).parent_path();
  for (const auto& f : fs::directory_iterator(folder))
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
}

TEST_F(CubinCache, ConcurrentProcessesWritingOneEntryStayWhole) {
  // Three writers remove and compile one entry over and over at once (nvrtc_cache_writer.cc).
  const std::string salt = std::to_string(std::random_device{}() % 1000000);
  // The writer beside this test binary (a staged copy on a GPU host), else the build's.
  std::string writer = NVRTC_CACHE_WRITER;
  std::error_code ec;
  const std::filesystem::path beside =
      std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "nvrtc_cache_writer";
  if (!ec && std::filesystem::exists(beside)) writer = beside.string();
  std::vector<pid_t> children(3);
  std::vector<std::string> logs;
  for (size_t c = 0; c < children.size(); ++c) {
    logs.push_back(dir_ + "/writer" + std::to_string(c) + ".log");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    char* argv[] = {writer.data(), dir_.data(), const_cast<char*>(salt.c_str()), nullptr};
    ASSERT_EQ(posix_spawn(&children[c], writer.c_str(), &actions, nullptr, argv, environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  for (size_t c = 0; c < children.size(); ++c) {
    int status = 0;
    ASSERT_EQ(waitpid(children[c], &status, 0), children[c]);
    const std::string err = read_all(logs[c]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer " << c << ": " << err;
    EXPECT_EQ(count(err, kWarning), 0) << "writer " << c << ": " << err;
  }
  const std::string source = kernel_source("cache_processes", std::stoul(salt));
  CubinResult clean = compile_cubin("cache_processes", source, strict_nvrtc_options(), "");
  CubinResult hit = compile_cubin("cache_processes", source, strict_nvrtc_options(), dir_);
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.cubin, clean.cubin);
}

}  // namespace
}  // namespace tilerun::compiler
