// The profilers of a training run, as the trainer drives them: the FLOPs profiler over its one
// chosen step and the communication logger after every step. Four calls in the step loop keep
// trainer.cpp free of their details. Output goes to stdout (flops_profiler.output_file for the
// FLOPs profile); nothing happens when both sections are off.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "runtime/config.h"
#include "runtime/profiler/comms_logger.h"
#include "runtime/profiler/flops_profiler.h"

namespace zt {

class Engine;

class RunProfilers {
  public:
    RunProfilers(const TrainConfig& cfg, Engine& engine, Communicator* comm);
    // Around 0-based step `step` (the trainer's loop index).
    void before_step(int64_t step);
    void after_step(int64_t step, double step_s);
    void finish();

  private:
    const TrainConfig& cfg_;
    Communicator* comm_;
    bool root_;
    std::unique_ptr<FlopsProfiler> flops_;
    CommsLogger comms_;
    CommStats before_;
};

}  // namespace zt
