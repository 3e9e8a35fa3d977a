// Communication logger (DeepSpeed's "comms_logger" section): per collective kind, how many ops,
// bytes this rank sent, seconds from issue to completion and the achieved bandwidth (bytes over
// seconds, DeepSpeed's algorithm bandwidth), from Communicator::stats(). Prints the totals every
// steps_per_print steps and at the end; verbose adds each step's own figures. Rank 0 prints;
// with debug every rank prints its own. Pure formatting: the trainer says when.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "runtime/config.h"

namespace zt {

class CommsLogger {
  public:
    // Throws (kInput) when prof_ops names an unknown collective.
    CommsLogger(const CommsLoggerConfig& cfg, int rank);

    // Whether this rank prints at all.
    bool speaks() const { return cfg_.enabled && (cfg_.debug || rank_ == 0); }
    // Text for the end of 1-based step `step` (empty when nothing is due): the step's own
    // figures when verbose, the totals every `every` steps.
    std::string after_step(int64_t step, int64_t every, const CommStats& step_stats,
                           const CommStats& total) const;
    // Totals at the end of training.
    std::string summary(const CommStats& total) const;

  private:
    std::string table(const std::string& title, const CommStats& s) const;

    CommsLoggerConfig cfg_;
    int rank_;
    std::array<bool, kCollectiveKindCount> shown_{};
};

}  // namespace zt
