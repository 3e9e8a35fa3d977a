// What a monitor sink receives (runtime/monitor/monitor.h): one record per metrics.jsonl line,
// its numeric fields by name ("loss", "lr", "mem_peak_bytes", "eval_loss", ...) and, on
// steps_per_print steps, every rank's own figures. Sinks run on rank 0 only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct MonitorScalar {
    std::string name;  // a metrics.jsonl field name, flattened ("mem_peak_bytes")
    double value = 0;
};

struct MonitorRecord {
    int64_t step = 0;
    double wall_time = 0;                            // seconds since the Unix epoch
    std::vector<MonitorScalar> scalars;              // run-wide figures
    std::vector<std::vector<MonitorScalar>> ranks;   // per rank, in rank order; empty on most steps
};

class MonitorSink {
public:
    virtual ~MonitorSink() = default;
    virtual void write(const MonitorRecord& record) = 0;
};

// The tag of a figure in TensorBoard and CSV: "train/loss", "eval/loss" (for eval_loss),
// "rank1/step_time_s".
inline std::string monitor_tag(const std::string& name) {
    if (name.rfind("eval_", 0) == 0) return "eval/" + name.substr(5);
    return "train/" + name;
}
inline std::string monitor_rank_tag(size_t rank, const std::string& name) {
    return "rank" + std::to_string(rank) + "/" + name;
}

}  // namespace zt
