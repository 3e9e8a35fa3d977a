// Human-readable figures for the profilers and the report: SI prefixes (1.23 GFLOP/s) and
// seconds in the unit that fits (12.3 ms).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace zt {

// 1.5e9, "FLOPs" -> "1.50 GFLOPs"; unit may be empty ("120.64 K").
inline std::string format_si(double v, const std::string& unit) {
    static const char* kPrefix[] = {"", "K", "M", "G", "T", "P", "E"};
    int i = 0;
    double a = std::fabs(v);
    while (a >= 1000 && i < 6) {
        a /= 1000;
        v /= 1000;
        ++i;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, i == 0 && v == std::floor(v) ? "%.0f %s%s" : "%.2f %s%s", v,
                  kPrefix[i], unit.c_str());
    std::string s = buf;
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

// 0.0123 -> "12.30 ms".
inline std::string format_seconds(double s) {
    char buf[32];
    if (s >= 1)
        std::snprintf(buf, sizeof buf, "%.2f s", s);
    else if (s >= 1e-3)
        std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
    return buf;
}

}  // namespace zt
