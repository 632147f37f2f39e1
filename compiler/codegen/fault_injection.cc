#include "compiler/codegen/fault_injection.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "tilerun/error.h"

namespace tilerun::compiler {

namespace {

struct Armed {
  std::mutex mu;
  std::map<std::string, long> fail_at;  // call -> the 1-based call number that fails
  std::map<std::string, long> seen;     // call -> calls counted so far
  int injected = 0;
};

Armed& armed() {
  static Armed a;
  return a;
}

// Set only while a spec is armed: the disarmed fast path is this one load.
std::atomic<bool> g_armed{false};

std::map<std::string, long> parse(const std::string& spec) {
  std::map<std::string, long> out;
  if (spec.empty()) return out;
  for (size_t pos = 0;;) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    const size_t colon = item.rfind(':');
    char* stop = nullptr;
    const long n =
        colon == std::string::npos ? 0 : std::strtol(item.c_str() + colon + 1, &stop, 10);
    if (colon == std::string::npos || colon == 0 || n < 1 || *stop != '\0')
      throw Error("TILERUN_FAULT: expected CALL:N with N >= 1, got '" + item + "'");
    out[item.substr(0, colon)] = n;
    if (end == spec.size()) break;
    pos = end + 1;
  }
  return out;
}

void arm(std::map<std::string, long> fail_at) {
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  a.fail_at = std::move(fail_at);
  a.seen.clear();
  a.injected = 0;
  g_armed.store(!a.fail_at.empty(), std::memory_order_release);
}

// The environment's spec, armed before the first call is counted. A malformed one is reported
// and ignored rather than thrown from a driver call's path.
void arm_from_environment_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("TILERUN_FAULT");
    if (!env || !*env) return;
    try {
      arm(parse(env));
    } catch (const Error& e) {
      std::fprintf(stderr, "tilerun: warning: %s (ignored)\n", e.what());
    }
  });
}

}  // namespace

void set_faults(const std::string& spec) {
  arm_from_environment_once();
  arm(parse(spec));
}

bool inject_fault(const char* call) {
  arm_from_environment_once();
  if (!g_armed.load(std::memory_order_acquire)) return false;
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  auto it = a.fail_at.find(call);
  if (it == a.fail_at.end()) return false;
  if (++a.seen[call] != it->second) return false;
  ++a.injected;
  return true;
}

int injected_faults() {
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  return a.injected;
}

}  // namespace tilerun::compiler
