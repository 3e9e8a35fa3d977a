#include "runtime/wall_clock_breakdown.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "util/timer.h"
#include "util/units.h"

namespace zt {

namespace {

std::string ms(double seconds) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", seconds * 1e3);
    return buf;
}

// Resident set size of this process (all of its memory, the pool's and the rest); -1: unknown.
int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0, resident = 0;
    if (!(statm >> pages >> resident)) return -1;
    return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string wall_clock_line(int64_t first_step, int64_t last_step, int64_t steps, double forward_s,
                            double backward_s, double step_s, double comm_s) {
    const double n = steps > 0 ? static_cast<double>(steps) : 1.0;
    return str_cat("wall_clock_breakdown: steps ", first_step, "-", last_step,
                   ", time per step (ms) | forward: ", ms(forward_s / n),
                   " | backward: ", ms(backward_s / n), " | optimizer_step: ", ms(step_s / n),
                   " | communication (waited, within the above): ", ms(comm_s / n));
}

std::string memory_breakdown_line(int64_t step, const MemoryStats& mem) {
    std::string s = str_cat("memory_breakdown: step ", step, " | allocated ",
                            format_bytes(static_cast<double>(mem.total_current)), " (step peak ",
                            format_bytes(static_cast<double>(mem.total_peak)), ")");
    for (int c = 0; c < kMemCategoryCount; ++c)
        s += str_cat(" | ", mem_category_name(static_cast<MemCategory>(c)), ": ",
                     format_bytes(static_cast<double>(mem.current[c])), " (peak ",
                     format_bytes(static_cast<double>(mem.peak[c])), ")");
    s += str_cat(" | reserved ", format_bytes(static_cast<double>(mem.reserved)));
    if (const int64_t rss = resident_bytes(); rss >= 0)
        s += str_cat(" | process resident ", format_bytes(static_cast<double>(rss)));
    return s;
}

StepBreakdown::StepBreakdown(const BreakdownOptions& options, Printer print)
    : options_(options), print_(std::move(print)) {
    if (options_.steps_per_print < 1) options_.steps_per_print = 1;
}

float StepBreakdown::forward_backward(Engine& engine, const Batch& batch) {
    if (!options_.wall_clock) return engine.forward_backward(batch);
    Stopwatch sw;
    Var loss = engine.forward(batch);
    const float value = loss->value.data<float>()[0];
    forward_s_ += sw.elapsed_s();
    sw.reset();
    engine.backward(loss);
    backward_s_ += sw.elapsed_s();
    return value;
}

StepStats StepBreakdown::step(Engine& engine) {
    if (!options_.wall_clock) return engine.step();
    Stopwatch sw;
    StepStats st = engine.step();
    step_s_ += sw.elapsed_s();
    return st;
}

void StepBreakdown::after_step(int64_t step, double exposed_comm_s, const MemoryStats& mem) {
    if (!options_.wall_clock && !options_.memory) return;
    if (first_step_ == 0) first_step_ = step;
    ++steps_;
    comm_s_ += exposed_comm_s;
    if (step % options_.steps_per_print != 0 && step != options_.last_step) return;
    if (options_.wall_clock)
        print_(
            wall_clock_line(first_step_, step, steps_, forward_s_, backward_s_, step_s_, comm_s_));
    if (options_.memory) print_(memory_breakdown_line(step, mem));
    first_step_ = 0;
    steps_ = 0;
    forward_s_ = backward_s_ = step_s_ = comm_s_ = 0;
}

}  // namespace zt
