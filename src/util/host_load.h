// How busy the host was with other processes over an interval: the CPU time every process but this
// one used (Linux /proc/stat and /proc/self/stat). For measurements that must not keep what a busy
// moment produced (the planner's kernel timings, Note [Shapes timed on a quiet host] in
// planner/shape_times.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace zt {

// Cumulative CPU ticks (clock ticks, sysconf(_SC_CLK_TCK)) of the whole host and of this process.
struct CpuTicks {
    double host_busy = 0;  // user + nice + system + irq + softirq + steal, over all CPUs
    double self = 0;       // this process's user + system
};

// Parses the first ("cpu ") line of /proc/stat's text and field 14 and 15 (utime, stime) of
// /proc/self/stat's; nullopt when either does not parse.
std::optional<CpuTicks> parse_cpu_ticks(std::string_view proc_stat, std::string_view self_stat);

// Cores' worth of CPU that other processes used between two samples `seconds` apart.
double other_cores(const CpuTicks& before, const CpuTicks& after, double seconds,
                   double ticks_per_s);

// "0.96 cores": other_cores as people read it.
std::string cores_text(double cores);

// Starts at construction; other_cores() is the cores' worth of CPU that other processes used since
// (0 where /proc cannot be read).
class HostLoadProbe {
  public:
    HostLoadProbe();
    double other_cores() const;

  private:
    std::optional<CpuTicks> start_;
    double t0_ = 0;
};

}  // namespace zt
