#include "compiler/base/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "compiler/base/sha256.h"

namespace tilerun::compiler {

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

// Takes `prefix` + a value up to the next newline off the front of `rest`.
bool take_line(std::string_view& rest, std::string_view prefix, std::string_view& value) {
  if (rest.substr(0, prefix.size()) != prefix) return false;
  const size_t nl = rest.find('\n', prefix.size());
  if (nl == std::string_view::npos || nl > prefix.size() + 64) return false;
  value = rest.substr(prefix.size(), nl - prefix.size());
  rest.remove_prefix(nl + 1);
  return true;
}

// Writes to a unique temporary name in the same folder, then renames: readers see either no
// file or a whole one, and concurrent writers of one entry each rename a whole file of the same
// bytes.
void write_atomically(const fs::path& path, const std::string& data) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

std::string default_cache_dir() {
  if (const char* d = std::getenv("TILERUN_CACHE_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tilerun";
  return "";
}

DiskCache::DiskCache(std::string dir, std::string folder, std::string magic, std::string what)
    : dir_(std::move(dir)),
      folder_(std::move(folder)),
      magic_(std::move(magic) + "\n"),
      what_(std::move(what)) {}

std::string DiskCache::path(const std::string& digest) const {
  return (fs::path(dir_) / folder_ / digest.substr(0, 2) / (digest + ".entry")).string();
}

std::optional<std::string> DiskCache::load(const std::string& digest,
                                           const std::string& kernel) const {
  if (!enabled()) return std::nullopt;
  const std::string file = path(digest);
  std::string entry;
  if (!read_file(file, entry)) return std::nullopt;
  std::string why;
  std::string_view rest = entry, key, size, sum;
  if (entry.empty()) {
    why = "the file is empty";
  } else if (rest.substr(0, magic_.size()) != magic_) {
    why = "no tilerun cache header";
  } else {
    rest.remove_prefix(magic_.size());
    if (!take_line(rest, "key ", key) || !take_line(rest, "size ", size) ||
        !take_line(rest, "sha256 ", sum) || rest.substr(0, 1) != "\n") {
      why = "a damaged header";
    } else {
      rest.remove_prefix(1);
      if (key != digest)
        why = "it answers another key (" + std::string(key.substr(0, 12)) + "...)";
      else if (size != std::to_string(rest.size()))
        why = "its header says " + std::string(size) + " bytes of " + what_ + ", the file holds " +
              std::to_string(rest.size());
      else if (sha256_hex(rest) != sum)
        why = "the " + what_ + "'s SHA-256 does not match its header";
      else
        return std::string(rest);
    }
  }
  // Never use a damaged entry: say so once (the caller stores a fresh one), drop it, miss.
  std::fprintf(stderr,
               "tilerun: warning: kernel cache entry %s for kernel %s is invalid (%s); removed, "
               "compiling again\n",
               file.c_str(), kernel.c_str(), why.c_str());
  std::error_code ec;
  fs::remove(file, ec);
  return std::nullopt;
}

void DiskCache::store(const std::string& digest, const std::string& payload) const {
  if (!enabled()) return;
  write_atomically(path(digest), magic_ + "key " + digest + "\nsize " +
                                     std::to_string(payload.size()) + "\nsha256 " +
                                     sha256_hex(payload) + "\n\n" + payload);
}

}  // namespace tilerun::compiler
