#include "compiler/codegen/nvrtc.h"

#include <nvrtc.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/base/sha256.h"
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

// Writes to a unique temporary name in the same folder, then renames: readers see either no
// file or a whole one. A failure to cache is not an error (the cubin is still returned).
void write_atomically(const fs::path& path, const std::string& data) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
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

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

CubinResult compile_cubin(const std::string& name, const std::string& source,
                          const std::vector<std::string>& options, const std::string& cache_dir) {
  CubinResult result;
  fs::path cached;
  if (!cache_dir.empty()) {
    std::string key = "nvrtc " + nvrtc_version() + "\n";
    for (const std::string& o : options) key += o + "\n";
    key += source;
    std::string digest = sha256_hex(key);
    cached = fs::path(cache_dir) / "cubin" / digest.substr(0, 2) / (digest + ".cubin");
    if (read_file(cached, result.cubin) && !result.cubin.empty()) {
      result.from_cache = true;
      return result;
    }
  }
  auto start = std::chrono::steady_clock::now();
  Program prog;
  nvrtc_check(
      nvrtcCreateProgram(&prog.handle, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr),
      "nvrtcCreateProgram", name);
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  nvrtcResult compiled =
      nvrtcCompileProgram(prog.handle, static_cast<int>(opts.size()), opts.data());
  if (compiled != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog.handle, &log_size);
    std::string log(log_size, '\0');
    if (log_size) nvrtcGetProgramLog(prog.handle, log.data());
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
  if (!cached.empty()) write_atomically(cached, result.cubin);
  return result;
}

}  // namespace tilerun::compiler
