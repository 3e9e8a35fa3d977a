#include "util/host_load.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "util/timer.h"

namespace zt {

namespace {

std::string read_all(const char* path) {
    std::ifstream f(path);
    if (!f) return "";
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

std::vector<double> numbers(std::string_view text) {
    std::vector<double> out;
    std::istringstream in{std::string(text)};
    std::string word;
    while (in >> word) {
        try {
            size_t used = 0;
            const double v = std::stod(word, &used);
            if (used != word.size()) return out;
            out.push_back(v);
        } catch (...) {
            return out;
        }
    }
    return out;
}

std::optional<CpuTicks> sample() {
    return parse_cpu_ticks(read_all("/proc/stat"), read_all("/proc/self/stat"));
}

}  // namespace

std::optional<CpuTicks> parse_cpu_ticks(std::string_view proc_stat, std::string_view self_stat) {
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
    if (proc_stat.substr(0, 4) != "cpu ") return std::nullopt;
    const size_t eol = proc_stat.find('\n');
    const std::vector<double> host = numbers(
        proc_stat.substr(4, eol == std::string_view::npos ? std::string_view::npos : eol - 4));
    if (host.size() < 8) return std::nullopt;
    // "pid (comm) state ppid ... utime stime ...": comm may hold spaces and parentheses, so the
    // fields are counted after its last ')'; utime and stime are fields 14 and 15, the 12th and
    // 13th after it.
    const size_t close = self_stat.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    std::istringstream in{std::string(self_stat.substr(close + 1))};
    std::vector<std::string> fields;
    for (std::string w; in >> w && fields.size() < 13;) fields.push_back(w);
    if (fields.size() < 13) return std::nullopt;
    CpuTicks t;
    t.host_busy = host[0] + host[1] + host[2] + host[5] + host[6] + host[7];
    try {
        t.self = std::stod(fields[11]) + std::stod(fields[12]);
    } catch (...) {
        return std::nullopt;
    }
    return t;
}

double other_cores(const CpuTicks& before, const CpuTicks& after, double seconds,
                   double ticks_per_s) {
    if (seconds <= 0 || ticks_per_s <= 0) return 0;
    const double others = (after.host_busy - before.host_busy) - (after.self - before.self);
    return std::max(0.0, others / ticks_per_s / seconds);
}

std::string cores_text(double cores) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f cores", cores);
    return text;
}

HostLoadProbe::HostLoadProbe() : start_(sample()), t0_(now_s()) {}

double HostLoadProbe::other_cores() const {
    if (!start_) return 0;
    const std::optional<CpuTicks> end = sample();
    if (!end) return 0;
    return zt::other_cores(*start_, *end, now_s() - t0_,
                           static_cast<double>(::sysconf(_SC_CLK_TCK)));
}

}  // namespace zt
