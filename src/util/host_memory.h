// The memory of the host this process runs on: its physical memory, or its container's limit
// (cgroup v2 memory.max) where that is lower.
#pragma once

#include <cstdint>

namespace zt {

int64_t host_memory_bytes();

}  // namespace zt
