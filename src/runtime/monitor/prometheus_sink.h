// A Prometheus text endpoint: a small HTTP/1.0 server thread that answers GET /metrics with the
// latest figures in the text exposition format (version 0.0.4), each metric with HELP and TYPE
// lines; per-rank figures carry a rank="R" label. Every metric is a gauge (the values are the
// latest step's, not running totals). One request per connection; connections are served side by
// side, so an idle one delays no other (Note [Serving scrapes]); the thread stops with the sink.
// Bound to 127.0.0.1 unless another address is configured.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/monitor/sink.h"

namespace zt {

class PrometheusSink : public MonitorSink {
public:
    static constexpr double kDefaultRequestTimeoutS = 10;  // seconds

    // port 0: any free port (port() tells which). Throws (kInput) when the address cannot be
    // bound, naming it. A connection that has not sent its request within request_timeout_s
    // seconds of its accept is closed.
    PrometheusSink(const std::string& address, int port,
                   double request_timeout_s = kDefaultRequestTimeoutS);
    ~PrometheusSink() override;
    PrometheusSink(const PrometheusSink&) = delete;
    PrometheusSink& operator=(const PrometheusSink&) = delete;

    void write(const MonitorRecord& record) override;
    int port() const { return port_; }
    std::string render() const;  // the body of GET /metrics

private:
    using Clock = std::chrono::steady_clock;
    void serve();
    void answer(int fd, const std::string& request) const;

    Clock::duration request_timeout_;
    int listen_fd_ = -1;
    int port_ = 0;
    std::atomic<bool> stop_{false};
    mutable std::mutex mu_;
    int64_t step_ = 0;
    std::map<std::string, double> latest_;                   // run-wide, by figure name
    std::map<std::string, std::vector<double>> rank_latest_;  // per rank, by figure name
    std::thread thread_;
};

// The Prometheus metric name of a figure: zerotrain_ (zerotrain_rank_ per rank) + the name,
// with units spelled out ("lr" learning_rate, "_per_s" _per_second, "mfu" mfu_ratio, "mem_"
// memory_, a trailing "_s" _seconds) and other characters than [a-zA-Z0-9_] made '_'.
std::string prometheus_metric_name(const std::string& figure, bool per_rank);

}  // namespace zt
