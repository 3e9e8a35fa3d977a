// Ranks of unequal speed (docs/planner.md, "Ranks of unequal speed"): relative speeds declared
// per rank (`zerotrain plan --rank-speed 1,1,0.5,0.5`). A pipeline stage runs at its slowest
// rank's speed, and the stages get contiguous block counts (parallel.pipeline.partition) that
// minimise the slowest stage's time, its blocks' cost over its speed; a layout without a pipeline
// runs at its slowest rank's speed. Pure functions, deterministic (ties go to the earliest cut).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline_partition.h"

namespace zt {

// "1,1,0.5,0.5": one positive number per rank; throws zt::Error (kInput) naming --rank-speed
// when the list is not `ranks` positive numbers.
std::vector<double> parse_rank_speeds(const std::string& text, int ranks);

// Each stage's speed: the slowest of its dp x tp ranks (the mesh puts stage k's ranks at
// [k dp tp, (k + 1) dp tp), parallel/mesh.h).
std::vector<double> stage_speeds(const std::vector<double>& rank_speed, int dp, int tp, int pp);

// Block counts of p = speed.size() contiguous pieces (each >= 1 block, the embedding's cost on
// the first and the head's on the last) that minimise max_k cost_k / speed_k. Equal speeds give
// balanced_partition's counts.
std::vector<int64_t> speed_partition(const PipeCosts& costs, const std::vector<double>& speed);

// The slowest stage's time as a share of the whole model's at speed 1: max_k (cost_k / speed_k)
// over the total cost (1 / p for p equal stages of speed 1).
double speed_share(const PipeCosts& costs, const std::vector<int64_t>& counts,
                   const std::vector<double>& speed);

}  // namespace zt
