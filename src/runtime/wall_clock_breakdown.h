// DeepSpeed's wall_clock_breakdown and memory_breakdown (docs/monitoring.md): every
// steps_per_print optimizer steps (and after the last), this rank's mean time per step in each
// phase since the previous print (forward, backward, optimizer step; communication is the part of
// them spent waiting for collectives, so it is inside the other three, not added to them) and its
// memory pool by category. Off (both false), it times nothing: forward_backward() is the engine's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/engine.h"

namespace zt {

struct BreakdownOptions {
    bool wall_clock = false;  // wall_clock_breakdown
    bool memory = false;      // memory_breakdown
    int64_t steps_per_print = 10;
    int64_t last_step = 0;  // the run's last step, always printed
};

class StepBreakdown {
  public:
    using Printer = std::function<void(const std::string&)>;
    StepBreakdown(const BreakdownOptions& options, Printer print);

    // One micro-batch's forward and backward; timed apart when wall_clock is on.
    float forward_backward(Engine& engine, const Batch& batch);
    StepStats step(Engine& engine);
    // After optimizer step `step` (1-based), with the seconds this rank waited for communication
    // in it: on a print step, prints the lines and starts a new interval.
    void after_step(int64_t step, double exposed_comm_s, const MemoryStats& mem);

  private:
    BreakdownOptions options_;
    Printer print_;
    int64_t first_step_ = 0;  // of the interval; 0: none yet
    int64_t steps_ = 0;       // steps in the interval
    double forward_s_ = 0, backward_s_ = 0, step_s_ = 0, comm_s_ = 0;
};

// The lines StepBreakdown prints, exposed for tests. Times are seconds summed over `steps` steps.
std::string wall_clock_line(int64_t first_step, int64_t last_step, int64_t steps, double forward_s,
                            double backward_s, double step_s, double comm_s);
std::string memory_breakdown_line(int64_t step, const MemoryStats& mem);

}  // namespace zt
