#include "graph/runtime/cupti.h"

#include <cupti_activity.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "graph/runtime/cuda_driver.h"

namespace tilerun::graph {
namespace {

struct Api {
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;  // optional, for messages
};

std::mutex g_mu;
std::vector<KernelRecord> g_records;  // filled by the completion callback

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte aligned buffers.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

Api* api();

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard lock(g_mu);
  while (api()->next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    g_records.push_back({.correlation = k->correlationId,
                         .name = k->name ? k->name : "",
                         .us = static_cast<double>(k->end - k->start) / 1000.0});
  }
  std::free(buffer);
}

std::string g_why;

Api* load() {
  const char* names[] = {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
                         "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"};
  void* h = nullptr;
  for (const char* n : names)
    if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
  if (!h) {
    g_why = "libcupti.so.13 not found";
    return nullptr;
  }
  static Api a;
  a.enable = reinterpret_cast<decltype(a.enable)>(dlsym(h, "cuptiActivityEnable"));
  a.disable = reinterpret_cast<decltype(a.disable)>(dlsym(h, "cuptiActivityDisable"));
  a.register_callbacks =
      reinterpret_cast<decltype(a.register_callbacks)>(dlsym(h, "cuptiActivityRegisterCallbacks"));
  a.flush_all = reinterpret_cast<decltype(a.flush_all)>(dlsym(h, "cuptiActivityFlushAll"));
  a.next_record = reinterpret_cast<decltype(a.next_record)>(dlsym(h, "cuptiActivityGetNextRecord"));
  a.result_string = reinterpret_cast<decltype(a.result_string)>(dlsym(h, "cuptiGetResultString"));
  if (!a.enable || !a.disable || !a.register_callbacks || !a.flush_all || !a.next_record) {
    g_why = "libcupti lacks the activity API";
    return nullptr;
  }
  if (a.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    g_why = "cuptiActivityRegisterCallbacks failed";
    return nullptr;
  }
  return &a;
}

Api* api() {
  static Api* a = load();
  return a;
}

}  // namespace

CuptiKernelTimer* CuptiKernelTimer::get(std::string* why) {
  static CuptiKernelTimer timer;
  // A tool already attached to the driver (compute-sanitizer hooks it much as CUPTI does) and
  // CUPTI subscribing beside it is unsupported (at best CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_
  // SUPPORTED): step aside before libcupti is even opened.
  if (std::string tool = attached_cuda_tool(); !tool.empty()) {
    if (why) *why = "CUPTI stepped aside: " + tool;
    return nullptr;
  }
  if (api()) return &timer;
  if (why) *why = g_why;
  return nullptr;
}

bool CuptiKernelTimer::start(std::string* why) {
  {
    std::lock_guard lock(g_mu);
    g_records.clear();
  }
  CUptiResult r = api()->register_callbacks(buffer_requested, buffer_completed);
  if (r == CUPTI_SUCCESS) r = api()->enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, _NOT_INITIALIZED, ...: another tool holds
    // the driver's callbacks; the caller times with events instead.
    const char* text = nullptr;
    if (api()->result_string) api()->result_string(r, &text);
    if (why)
      *why = "cuptiActivityEnable failed: " +
             (text ? std::string(text) : "CUPTI error " + std::to_string(static_cast<int>(r)));
    return false;
  }
  return true;
}

std::vector<KernelRecord> CuptiKernelTimer::stop() {
  api()->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  api()->disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  api()->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  // CUPTI stays attached to the process from here on (cuptiFinalize outside a CUPTI callback
  // ended the process on the H200), and later driver calls cost more host time: profile last.
  std::lock_guard lock(g_mu);
  std::vector<KernelRecord> out = std::move(g_records);
  g_records.clear();
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return a.correlation < b.correlation;
  });
  return out;
}

}  // namespace tilerun::graph
