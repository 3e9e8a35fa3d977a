#include "util/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace zt {

int64_t host_memory_bytes() {
    int64_t bytes =
        static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
    std::ifstream f("/sys/fs/cgroup/memory.max");
    long long limit = 0;
    if (f >> limit && limit > 0) bytes = std::min<int64_t>(bytes, limit);  // "max": no limit
    return std::max<int64_t>(bytes, 0);
}

}  // namespace zt
