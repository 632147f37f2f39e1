#include "compiler/codegen/nvrtc.h"

#include <nvrtc.h>

#include <chrono>
#include <cstdio>

#include "compiler/base/disk_cache.h"
#include "compiler/base/sha256.h"
#include "compiler/codegen/fault_injection.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

namespace {

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

std::string key_digest(const std::string& source, const std::vector<std::string>& options) {
  std::string key = "nvrtc " + nvrtc_version() + "\n";
  for (const std::string& o : options) key += o + "\n";
  key += source;
  return sha256_hex(key);
}

DiskCache cubin_cache(const std::string& cache_dir) {
  return DiskCache(cache_dir, "cubin-v2", "tilerun-cubin 2", "cubin");
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

std::string cubin_cache_path(const std::string& cache_dir, const std::string& source,
                             const std::vector<std::string>& options) {
  return cubin_cache(cache_dir).path(key_digest(source, options));
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

CubinResult compile_cubin(const std::string& name, const std::string& source,
                          const std::vector<std::string>& options, const std::string& cache_dir) {
  CubinResult result;
  const DiskCache cache = cubin_cache(cache_dir);
  const std::string digest = cache.enabled() ? key_digest(source, options) : "";
  if (std::optional<std::string> hit = cache.load(digest, name)) {
    result.cubin = std::move(*hit);
    result.from_cache = true;
    return result;
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
  size_t log_size = 0;
  nvrtc_check(nvrtcGetProgramLogSize(prog.handle, &log_size), "nvrtcGetProgramLogSize", name);
  if (log_size > 1) {
    result.log.assign(log_size, '\0');
    nvrtc_check(nvrtcGetProgramLog(prog.handle, result.log.data()), "nvrtcGetProgramLog", name);
    result.log.resize(log_size - 1);  // the size counts the terminating NUL
  }
  size_t size = 0;
  nvrtc_check(nvrtcGetCUBINSize(prog.handle, &size), "nvrtcGetCUBINSize", name);
  result.cubin.resize(size);
  nvrtc_check(nvrtcGetCUBIN(prog.handle, result.cubin.data()), "nvrtcGetCUBIN", name);
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  cache.store(digest, result.cubin);
  return result;
}

}  // namespace tilerun::compiler
