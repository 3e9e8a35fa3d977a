// The estimator's view of a training config: the EstimateSpec of a TrainConfig (for `zerotrain
// estimate` and the budget check before a run's first step).
#pragma once

#include <cstdint>

#include "planner/estimate.h"
#include "runtime/config.h"

namespace zt {

EstimateSpec estimate_spec(const TrainConfig& cfg, int zero_stage, bool offload_optimizer,
                           int64_t ranks);

// Bytes a run of cfg certainly holds at the end of its first forward on one rank: model state
// (exact) and the activations saved for backward (exact for GPT). Used to refuse a run whose
// budget is already too small before anything is allocated; the transient peaks on top are left
// to the pool's own check.
int64_t certain_bytes(const Estimate& e);

}  // namespace zt
