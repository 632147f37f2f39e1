#include "graph/resources.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tilerun/error.h"

namespace tilerun::graph {

int64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) return kib * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<int64_t>(pages) * page;
  return -1;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

void require_memory(int64_t needed, int64_t available, const std::string& what,
                    const std::string& where) {
  if (available < 0 || needed <= available) return;
  throw Error(what + " needs " + format_bytes(needed) + ", " + format_bytes(available) +
                  " available (" + where + ")",
              ErrorKind::Runtime);
}

}  // namespace tilerun::graph
