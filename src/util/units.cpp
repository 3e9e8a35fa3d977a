#include "util/units.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace zt {

int64_t parse_bytes(const std::string& text, const std::string& what) {
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    ZT_CHECK(end != text.c_str() && value >= 0, what, ": expected a size such as \"8GiB\", got \"",
             text, "\"");
    std::string unit(end);
    while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
    double scale = 1;
    if (unit.empty() || unit == "B") scale = 1;
    else if (unit == "KiB") scale = 1024.0;
    else if (unit == "MiB") scale = 1024.0 * 1024;
    else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
    else if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (unit == "KB" || unit == "kB") scale = 1e3;
    else if (unit == "MB") scale = 1e6;
    else if (unit == "GB") scale = 1e9;
    else if (unit == "TB") scale = 1e12;
    else ZT_FAIL(what, ": unknown size unit \"", unit, "\" in \"", text,
                 "\"; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB");
    return static_cast<int64_t>(std::llround(value * scale));
}

std::string format_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (std::fabs(bytes) >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

}  // namespace zt
