// compiler/base/atomic_file: a write either replaces the file whole or leaves it as it was.
#include "compiler/base/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tilerun/error.h"

namespace {

namespace fs = std::filesystem;
using tilerun::compiler::write_file_atomically;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "atomic_file_test_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
};

TEST_F(AtomicFileTest, WritesThePiecesInOrderAndReplacesKeepingTheMode) {
  const std::string p = path("f");
  write_file_atomically(p, {"ab", "", "cde"});
  EXPECT_EQ(read(p), "abcde");
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  write_file_atomically(p, std::string_view("xyz"));
  EXPECT_EQ(read(p), "xyz");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(entries(), std::vector<std::string>{"f"});  // no temporary left behind
}

TEST_F(AtomicFileTest, ASymbolicLinkIsFollowedAndKept) {
  write_file_atomically(path("target"), std::string_view("old"));
  fs::create_symlink(path("target"), path("link"));
  write_file_atomically(path("link"), std::string_view("new"));
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(read(path("target")), "new");
  EXPECT_EQ(entries(), (std::vector<std::string>{"link", "target"}));
}

TEST_F(AtomicFileTest, FailuresNameTheFileAndLeaveNothingBehind) {
  auto message = [](const std::string& p, std::string_view text) -> std::string {
    try {
      write_file_atomically(p, text);
    } catch (const tilerun::Error& e) {
      EXPECT_EQ(e.kind(), tilerun::ErrorKind::Runtime);
      return e.what();
    }
    return "no error";
  };
  fs::create_directory(path("sub"));
  EXPECT_EQ(message(path("sub"), "x"),
            path("sub") + ": error: cannot open for writing: Is a directory");
  EXPECT_EQ(message(path("none/f"), "x"),
            path("none/f") + ": error: cannot open for writing: No such file or directory");
  EXPECT_EQ(message("/dev/full", "x"),
            "/dev/full: error: cannot write the file: No space left on device");
  EXPECT_EQ(message("/dev/null", "x"), "no error");
  EXPECT_EQ(entries(), std::vector<std::string>{"sub"});
}

TEST_F(AtomicFileTest, AFileSizeLimitKeepsTheOldFile) {
  const std::string p = path("big");
  const std::string old(10000, 'o');
  write_file_atomically(p, old);
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string what;
  try {
    write_file_atomically(p, std::string(100000, 'n'));
  } catch (const tilerun::Error& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, handler);
  EXPECT_EQ(what, p + ": error: cannot write the file: File too large (the existing file is left "
                      "as it was)");
  EXPECT_EQ(read(p), old);
  EXPECT_EQ(entries(), std::vector<std::string>{"big"});
}

}  // namespace
