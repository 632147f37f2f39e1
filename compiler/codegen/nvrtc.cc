#include "compiler/codegen/nvrtc.h"

#include <nvrtc.h>
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
#include "compiler/codegen/fault_injection.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

namespace {

namespace fs = std::filesystem;

void nvrtc_check(nvrtcResult r, const char* call, const std::string& name) {
  if (r != NVRTC_SUCCESS)
    throw Error(std::string(call) + " failed for kernel " + name + ": " + nvrtcGetErrorString(r),
                ErrorKind::Runtime);
}

// A program handle that is destroyed on every path.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

// A cache entry is a short text header, then the cubin:
//   tilerun-cubin 2\n key <sha256 of the key>\n size <bytes>\n sha256 <of the cubin>\n\n <cubin>
// The header names the key the entry answers (a file copied or renamed onto another entry's
// path is caught) and the payload's length and digest (a flipped bit or a cut file is caught).
constexpr std::string_view kMagic = "tilerun-cubin 2\n";

std::string seal_entry(const std::string& key, const std::string& cubin) {
  return std::string(kMagic) + "key " + key + "\nsize " + std::to_string(cubin.size()) +
         "\nsha256 " + sha256_hex(cubin) + "\n\n" + cubin;
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

// The cubin held by `entry` when the entry is whole and answers `want_key`; otherwise "" and
// `why` says what is wrong with it.
std::string open_entry(const std::string& entry, const std::string& want_key, std::string& why) {
  std::string_view rest = entry, key, size, digest;
  if (entry.empty()) {
    why = "the file is empty";
    return "";
  }
  if (rest.substr(0, kMagic.size()) != kMagic) {
    why = "no tilerun cache header";
    return "";
  }
  rest.remove_prefix(kMagic.size());
  if (!take_line(rest, "key ", key) || !take_line(rest, "size ", size) ||
      !take_line(rest, "sha256 ", digest) || rest.substr(0, 1) != "\n") {
    why = "a damaged header";
    return "";
  }
  rest.remove_prefix(1);
  if (key != want_key) {
    why = "it answers another key (" + std::string(key.substr(0, 12)) + "...)";
    return "";
  }
  if (size != std::to_string(rest.size())) {
    why = "its header says " + std::string(size) + " bytes of cubin, the file holds " +
          std::to_string(rest.size());
    return "";
  }
  if (sha256_hex(rest) != digest) {
    why = "the cubin's SHA-256 does not match its header";
    return "";
  }
  return std::string(rest);
}

// Writes to a unique temporary name in the same folder, then renames: readers see either no
// file or a whole one, and concurrent writers of one entry each rename a whole file of the same
// bytes. A failure to cache is not an error (the cubin is still returned).
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

std::string key_digest(const std::string& source, const std::vector<std::string>& options) {
  std::string key = "nvrtc " + nvrtc_version() + "\n";
  for (const std::string& o : options) key += o + "\n";
  key += source;
  return sha256_hex(key);
}

fs::path entry_path(const std::string& cache_dir, const std::string& digest) {
  return fs::path(cache_dir) / "cubin-v2" / digest.substr(0, 2) / (digest + ".entry");
}

}  // namespace

std::vector<std::string> strict_nvrtc_options() {
  return {"--gpu-architecture=sm_90a",
          "--fmad=false",
          "--prec-div=true",
          "--prec-sqrt=true",
          "--ftz=false",
          "--std=c++17",
          "-default-device"};
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("TILERUN_CACHE_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tilerun";
  return "";
}

std::string cubin_cache_path(const std::string& cache_dir, const std::string& source,
                             const std::vector<std::string>& options) {
  return entry_path(cache_dir, key_digest(source, options)).string();
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

CubinResult compile_cubin(const std::string& name, const std::string& source,
                          const std::vector<std::string>& options, const std::string& cache_dir) {
  CubinResult result;
  fs::path cached;
  std::string digest;
  if (!cache_dir.empty()) {
    digest = key_digest(source, options);
    cached = entry_path(cache_dir, digest);
    std::string entry, why;
    if (read_file(cached, entry)) {
      result.cubin = open_entry(entry, digest, why);
      if (!result.cubin.empty()) {
        result.from_cache = true;
        return result;
      }
      // Never load a damaged binary: say so once (the entry is replaced below), drop it and
      // compile afresh.
      std::fprintf(stderr,
                   "tilerun: warning: kernel cache entry %s for kernel %s is invalid (%s); "
                   "removed, compiling again\n",
                   cached.string().c_str(), name.c_str(), why.c_str());
      std::error_code ec;
      fs::remove(cached, ec);
    }
  }
  auto start = std::chrono::steady_clock::now();
  Program prog;
  nvrtc_check(
      nvrtcCreateProgram(&prog.handle, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr),
      "nvrtcCreateProgram", name);
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  // A test-injected failure (TILERUN_FAULT=nvrtcCompileProgram:N) takes the same path as a
  // real compile error.
  const bool injected = inject_fault("nvrtcCompileProgram");
  nvrtcResult compiled =
      injected ? NVRTC_ERROR_COMPILATION
               : nvrtcCompileProgram(prog.handle, static_cast<int>(opts.size()), opts.data());
  if (compiled != NVRTC_SUCCESS) {
    size_t log_size = 0;
    if (!injected) nvrtcGetProgramLogSize(prog.handle, &log_size);
    std::string log(log_size, '\0');
    if (log_size) nvrtcGetProgramLog(prog.handle, log.data());
    if (injected) log = "injected fault (TILERUN_FAULT)";
    throw Error("NVRTC failed to compile kernel " + name + ": " + nvrtcGetErrorString(compiled) +
                    "\n" + log,
                ErrorKind::Runtime);
  }
  size_t size = 0;
  nvrtc_check(nvrtcGetCUBINSize(prog.handle, &size), "nvrtcGetCUBINSize", name);
  result.cubin.resize(size);
  nvrtc_check(nvrtcGetCUBIN(prog.handle, result.cubin.data()), "nvrtcGetCUBIN", name);
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!cached.empty()) write_atomically(cached, seal_entry(digest, result.cubin));
  return result;
}

}  // namespace tilerun::compiler
