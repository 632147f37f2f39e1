// graph/resources: the memory a step needs, checked before anything is allocated, so that a
// model too large for the machine is a clear error ("needs X GiB, Y GiB available") rather than
// std::bad_alloc after minutes of compiling. The CPU session calls it with the host's available
// memory; a CUDA session can call require_memory with cuMemGetInfo's free bytes for the arena.
#pragma once

#include <cstdint>
#include <string>

namespace tilerun::graph {

// Bytes of physical memory available to a new allocation: MemAvailable from /proc/meminfo, or
// sysconf's available pages where that file is missing; -1 when neither says.
int64_t host_memory_available();

// "1.50 GiB" (or MiB/KiB/bytes for smaller amounts).
std::string format_bytes(int64_t bytes);

// Throws tilerun::Error (kind Runtime): "<what> needs X GiB, Y GiB available (<where>)" when
// `needed` exceeds `available`; does nothing when `available` is unknown (negative).
void require_memory(int64_t needed, int64_t available, const std::string& what,
                    const std::string& where);

}  // namespace tilerun::graph
