// Kernel durations from CUPTI activity records, for the profiling pass: the GPU's own start and
// end timestamps of every kernel, without the events that would add their own microseconds
// around 1-5 µs kernels. libcupti is opened at run time (never linked), so binaries start
// without it; where it is missing or refuses, or another tool (compute-sanitizer, Nsight) is
// attached to the driver, callers fall back to events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tilerun::graph {

struct KernelRecord {
  uint32_t correlation = 0;  // the launch's correlation id: increases in launch order
  std::string name;
  double us = 0;  // end - start
};

class CuptiKernelTimer {
 public:
  // The process-wide timer, or nullptr with `why` saying what is missing or which tool is
  // attached (then libcupti is not loaded at all).
  static CuptiKernelTimer* get(std::string* why = nullptr);

  // Starts collecting kernel records (launches from now on).
  bool start(std::string* why);
  // Flushes, stops collecting and returns the records since start(), by correlation id. Call
  // after synchronising. CUPTI stays attached: later driver calls cost more host time.
  std::vector<KernelRecord> stop();

 private:
  CuptiKernelTimer() = default;
};

}  // namespace tilerun::graph
