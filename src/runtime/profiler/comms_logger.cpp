#include "runtime/profiler/comms_logger.h"

#include <cstdio>

#include "runtime/profiler/si_format.h"
#include "util/error.h"

namespace zt {

CommsLogger::CommsLogger(const CommsLoggerConfig& cfg, int rank) : cfg_(cfg), rank_(rank) {
    std::string known;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
        known += str_cat(k ? ", " : "", collective_kind_name(static_cast<CollectiveKind>(k)));
        shown_[static_cast<size_t>(k)] = cfg.prof_all;
    }
    for (const std::string& op : cfg.prof_ops) {
        bool found = false;
        for (int k = 0; k < kCollectiveKindCount; ++k)
            if (op == collective_kind_name(static_cast<CollectiveKind>(k))) {
                shown_[static_cast<size_t>(k)] = true;
                found = true;
            }
        ZT_CHECK(found, "comms_logger.prof_ops: expected collective names (", known, "), got \"",
                 op, "\"");
    }
}

std::string CommsLogger::table(const std::string& title, const CommStats& s) const {
    std::string out = str_cat("comms logger, rank ", rank_, ", ", title, "\n");
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-15s %8s %14s %12s %12s %16s\n", "collective", "count",
                  "bytes", "time", "avg latency", "bandwidth");
    out += buf;
    bool any = false;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
        if (!shown_[static_cast<size_t>(k)] || s.count[k] == 0) continue;
        any = true;
        const double bytes = static_cast<double>(s.bytes_sent[k]);
        std::snprintf(buf, sizeof buf, "  %-15s %8lld %14s %12s %12s %16s\n",
                      collective_kind_name(static_cast<CollectiveKind>(k)),
                      static_cast<long long>(s.count[k]), format_si(bytes, "B").c_str(),
                      format_seconds(s.seconds[k]).c_str(),
                      format_seconds(s.seconds[k] / static_cast<double>(s.count[k])).c_str(),
                      format_si(s.seconds[k] > 0 ? bytes / s.seconds[k] : 0, "B/s").c_str());
        out += buf;
    }
    if (!any) out += "  (no collectives)\n";
    return out;
}

std::string CommsLogger::after_step(int64_t step, int64_t every, const CommStats& step_stats,
                                    const CommStats& total) const {
    if (!speaks()) return "";
    std::string out;
    if (cfg_.verbose) out += table(str_cat("step ", step), step_stats);
    if (every > 0 && step % every == 0) out += table(str_cat("total through step ", step), total);
    return out;
}

std::string CommsLogger::summary(const CommStats& total) const {
    return speaks() ? table("total at the end of training", total) : "";
}

}  // namespace zt
