#include "runtime/monitor/monitor.h"

#include <algorithm>
#include <chrono>

#include "runtime/monitor/csv_sink.h"
#include "runtime/monitor/prometheus_sink.h"
#include "runtime/monitor/tensorboard_sink.h"
#include "util/log.h"

namespace zt {

namespace {

std::string sink_dir(const MonitorSinkConfig& s, const std::string& run_dir) {
    return (s.output_path.empty() ? run_dir : s.output_path) + "/" + s.job_name;
}

double wall_time_now() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<MonitorScalar> monitor_scalars(const nlohmann::json& line) {
    std::vector<MonitorScalar> out;
    for (auto it = line.begin(); it != line.end(); ++it) {
        const nlohmann::json& v = it.value();
        if (it.key() == "step") continue;
        if (v.is_number())
            out.push_back({it.key(), v.get<double>()});
        else if (v.is_boolean())
            out.push_back({it.key(), v.get<bool>() ? 1.0 : 0.0});
        else if (it.key() == "mem" && v.is_object())
            for (auto m = v.begin(); m != v.end(); ++m)
                if (m.value().is_number())
                    out.push_back({"mem_" + m.key() + "_bytes", m.value().get<double>()});
    }
    return out;
}

Monitor::Monitor(const MonitorConfig& config, const MonitorOptions& options)
    : config_(config), options_(options) {
    if (options_.steps_per_print < 1) options_.steps_per_print = 1;
    if (config_.tensorboard.enabled)
        sinks_.push_back(
            std::make_unique<TensorBoardSink>(sink_dir(config_.tensorboard, options_.run_dir),
                                              options_.resumed_from));
    if (config_.csv.enabled)
        sinks_.push_back(std::make_unique<CsvSink>(sink_dir(config_.csv, options_.run_dir),
                                                   options_.resumed_from));
    if (config_.prometheus_port >= 0) {
        auto p = std::make_unique<PrometheusSink>(config_.prometheus_address,
                                                  config_.prometheus_port);
        prometheus_port_ = p->port();
        log_info("monitor: Prometheus metrics at http://", config_.prometheus_address, ":",
                 prometheus_port_, "/metrics");
        sinks_.push_back(std::move(p));
    }
}

Monitor::~Monitor() = default;

void Monitor::on_step(nlohmann::json& line, std::span<const RankFigures> ranks) {
    if (config_.gemm_ceiling_flops > 0 && line.contains("mfu_flops_per_s"))
        line["mfu"] = line["mfu_flops_per_s"].get<double>() / config_.gemm_ceiling_flops;
    if (config_.peak_flops > 0 && line.contains("mfu_flops_per_s"))
        line["mfu_peak"] = line["mfu_flops_per_s"].get<double>() / config_.peak_flops;
    const int64_t step = line.value("step", int64_t{0});
    if (!report_step(step)) return to_sinks(line, {}, {});
    std::vector<int> stragglers = find_stragglers(ranks, config_.straggler_factor);
    if (ranks.size() > 1) {
        nlohmann::json per = nlohmann::json::array();
        for (size_t r = 0; r < ranks.size(); ++r)
            per.push_back(rank_figures_json(ranks[r], static_cast<int>(r)));
        line["ranks"] = per;
        line["stragglers"] = stragglers;
    }
    if (!stragglers.empty()) {
        std::string named;
        for (int r : stragglers)
            named += str_cat(named.empty() ? "" : ", ", "rank ", r, " (", ranks[r].busy_s(), " s)");
        log_warn("step ", step, ": straggler(s) ", named, ", more than ",
                 config_.straggler_factor, " x the median busy time over ", ranks.size(),
                 " ranks (", median_busy_s(ranks), " s; monitor.straggler_factor)");
    }
    to_sinks(line, ranks, stragglers);
}

void Monitor::to_sinks(const nlohmann::json& line, std::span<const RankFigures> ranks,
                       std::span<const int> stragglers) {
    if (sinks_.empty()) return;
    MonitorRecord rec;
    rec.step = line.value("step", int64_t{0});
    rec.wall_time = wall_time_now();
    rec.scalars = monitor_scalars(line);
    for (size_t r = 0; r < ranks.size(); ++r) {
        const RankFigures& f = ranks[r];
        const bool slow =
            std::find(stragglers.begin(), stragglers.end(), static_cast<int>(r)) != stragglers.end();
        rec.ranks.push_back({{"step_time_s", f.step_s},
                             {"compute_s", f.compute_s()},
                             {"comm_s", f.comm_s},
                             {"io_s", f.io_s},
                             {"mem_peak_bytes", static_cast<double>(f.mem.total_peak)},
                             {"skipped", f.skipped ? 1.0 : 0.0},
                             {"straggler", slow ? 1.0 : 0.0}});
    }
    for (auto& s : sinks_) s->write(rec);
}

}  // namespace zt
