// The Monitor: what rank 0 reports beyond metrics.jsonl's own fields, fanned out to the sinks
// the config turns on (runtime/monitor/: TensorBoard, CSV, Prometheus). Every steps_per_print
// steps (and the last) it adds every rank's own figures and the stragglers to the step's line
// and warns about stragglers; with a GEMM ceiling it adds "mfu" to every step line. Each line,
// evaluation lines included, then goes to the sinks. Rank 0 only; other ranks build none.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config.h"
#include "runtime/monitor/rank_figures.h"
#include "runtime/monitor/sink.h"

namespace zt {

struct MonitorOptions {
    std::string run_dir;           // where sinks write when their output_path is empty
    int64_t steps = 0;             // the run's last step, always a report step
    int64_t steps_per_print = 1;   // report every this many steps
    int64_t resumed_from = -1;     // the step a resumed run continues from; -1: fresh
};

class Monitor {
public:
    Monitor(const MonitorConfig& config, const MonitorOptions& options);
    ~Monitor();
    Monitor(const Monitor&) = delete;
    Monitor& operator=(const Monitor&) = delete;

    bool report_step(int64_t step) const {
        return step % options_.steps_per_print == 0 || step == options_.steps;
    }
    // A step's metrics line (step, loss, ... as the trainer builds it) and every rank's figures:
    // adds "mfu", and on report steps of several ranks "ranks" and "stragglers"; then hands the
    // line to the sinks. Call before the line is written to metrics.jsonl.
    void on_step(nlohmann::json& line, std::span<const RankFigures> ranks);
    // Any other metrics line (evaluation): to the sinks as it is.
    void on_line(const nlohmann::json& line) { to_sinks(line, {}, {}); }
    int prometheus_port() const { return prometheus_port_; }  // -1: no endpoint

private:
    void to_sinks(const nlohmann::json& line, std::span<const RankFigures> ranks,
                  std::span<const int> stragglers);

    MonitorConfig config_;
    MonitorOptions options_;
    std::vector<std::unique_ptr<MonitorSink>> sinks_;
    int prometheus_port_ = -1;
};

// The run-wide numeric figures of a metrics line, by name: numbers and booleans at the top
// level except "step"; "mem" as mem_<category>_bytes and mem_peak_bytes.
std::vector<MonitorScalar> monitor_scalars(const nlohmann::json& line);

}  // namespace zt
