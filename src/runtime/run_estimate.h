// The estimator's view of a training config: the EstimateSpec of a TrainConfig (for `zerotrain
// estimate` and the budget check before a run's first step), and for a pipeline config the
// layout the cost model takes to give each stage's bytes (planner/stage_memory.h).
#pragma once

#include <cstdint>

#include "planner/cost_model.h"
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

// The layout of `spec` (estimate_spec's: its dp ranks, ZeRO stage, offload and tp) on cfg's
// pipeline, with the partition the run builds (cfg.pipe.partition): what plan_memory and
// stage_memories (planner/stage_memory.h) take for `zerotrain estimate`'s figures per stage.
struct EstimateLayout {
    PlanBase base;
    Strategy strategy;
};
EstimateLayout estimate_layout(const TrainConfig& cfg, const EstimateSpec& spec);

// cfg's estimate at `spec`: estimate_run's, or on a pipeline the cost model's for the layout
// (plan_memory: each category the largest over the stages, the activations each stage holds in
// flight under its schedule), as `zerotrain estimate` prints it and the budget check takes it.
Estimate estimate_config(const TrainConfig& cfg, const EstimateSpec& spec);

}  // namespace zt
