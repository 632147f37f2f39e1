#include "compiler/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tilerun/error.h"

namespace tilerun::compiler {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& what, int error,
                       const std::string& note = "") {
  throw Error(SourceLoc{path}, what + ": " + std::strerror(error) + note, ErrorKind::Runtime);
}

// Every byte of every piece, retrying short writes and interrupted calls. False with errno set.
bool write_all(int fd, const std::vector<std::string_view>& pieces) {
  for (std::string_view piece : pieces) {
    while (!piece.empty()) {
      ssize_t n = ::write(fd, piece.data(), piece.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = EIO;
        return false;
      }
      piece.remove_prefix(static_cast<size_t>(n));
    }
  }
  return true;
}

// A device or a pipe cannot be replaced by a rename: write to it and check every call.
void write_directly(const std::string& path, const std::vector<std::string_view>& pieces) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open for writing", errno);
  bool ok = write_all(fd, pieces);
  int saved = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (!ok) fail(path, "cannot write the file", saved);
}

// A name no other writer (thread or process) uses, next to the target so the rename stays on one
// file system.
std::string temporary_name(const fs::path& target) {
  static std::atomic<unsigned> counter{0};
  fs::path dir = target.parent_path();
  std::string name = "." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter++);
  return (dir.empty() ? fs::path(name) : dir / name).string();
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces) {
  if (path.empty()) fail(path, "cannot open for writing", ENOENT);
  // Follow a symbolic link, so that the file it points at is replaced and the link stays.
  std::error_code ec;
  fs::path target = fs::is_symlink(path, ec) ? fs::canonical(path, ec) : fs::path(path);
  if (ec) target = path;

  struct stat st {};
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) fail(path, "cannot open for writing", EISDIR);
  if (exists && !S_ISREG(st.st_mode)) return write_directly(target.string(), pieces);

  const std::string temp = temporary_name(target);
  // 0666 less the umask, as a plain open would give; an existing file's own mode is kept.
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  // The folder's failure (missing, not writable) is the target's, as a plain open would say.
  if (fd < 0) fail(path, "cannot open for writing", errno);
  bool ok = (!exists || ::fchmod(fd, st.st_mode & 07777) == 0) && write_all(fd, pieces) &&
            ::fsync(fd) == 0;
  int saved = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && ::rename(temp.c_str(), target.c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    fail(path, "cannot write the file", saved,
         exists ? " (the existing file is left as it was)" : "");
  }
  // Make the rename itself durable; a failure here loses nothing that was there before.
  int dir = ::open(target.has_parent_path() ? target.parent_path().c_str() : ".",
                   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace tilerun::compiler
