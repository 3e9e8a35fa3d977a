// Ranks of unequal speed or memory (docs/planner.md, "Ranks of unequal speed or memory"):
// relative speeds declared per rank (`zerotrain plan --rank-speed 1,1,0.5,0.5`), device budgets
// per rank (`--rank-memory 16GiB,16GiB,8GiB,8GiB`). A pipeline stage runs at its slowest
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
// The same, or "measured": the profile's speeds (Note [Measured rank speeds], calibrate.cpp);
// throws (kInput) when the profile has none or has them for another rank count.
std::vector<double> rank_speeds_of(const std::string& text, int ranks,
                                   const std::vector<double>& measured);

// "16GiB,16GiB,8GiB,8GiB" (--rank-memory): one device budget per rank, in bytes (units as
// --memory-budget); throws zt::Error (kInput) naming --rank-memory otherwise.
std::vector<int64_t> parse_rank_memory(const std::string& text, int ranks);

// Each stage's budget: the smallest of its dp x tp ranks' (as stage_speeds).
std::vector<int64_t> stage_budgets(const std::vector<int64_t>& rank_memory, int dp, int tp, int pp);

// speed_partition with at most cap[k] blocks on stage k (the most its memory holds): the block
// counts minimising max_k cost_k / speed_k among those within the caps; empty when the caps
// leave no partition (their sum under the block count, or a cap under 1).
std::vector<int64_t> capped_partition(const PipeCosts& costs, const std::vector<double>& speed,
                                      const std::vector<int64_t>& cap);

// Each stage's speed: the slowest of its dp x tp ranks (the mesh puts stage k's ranks at
// [k dp tp, (k + 1) dp tp), parallel/mesh.h).
std::vector<double> stage_speeds(const std::vector<double>& rank_speed, int dp, int tp, int pp);

// Each data-parallel rank's budget in a layout without a pipeline: the smallest of its tp ranks'
// (as dp_speeds).
std::vector<int64_t> dp_budgets(const std::vector<int64_t>& rank_memory, int dp, int tp);

// Each data-parallel rank's speed in a layout without a pipeline: the slowest of its tp ranks
// (the mesh puts dp rank d's at [d tp, (d + 1) tp)).
std::vector<double> dp_speeds(const std::vector<double>& rank_speed, int dp, int tp);

// parallel.batch_shares for ranks of these speeds: `total` samples (each micro-step's dp x
// micro-batch) split in proportion to speed, each rank at least 1, the remainder to the largest
// fractions (ties to the earlier rank). Equal speeds give equal shares where total divides.
std::vector<int64_t> shares_by_speed(int64_t total, const std::vector<double>& speed);

// Block counts of p = speed.size() contiguous pieces (each >= 1 block, the embedding's cost on
// the first and the head's on the last) that minimise max_k cost_k / speed_k. Equal speeds give
// balanced_partition's counts.
std::vector<int64_t> speed_partition(const PipeCosts& costs, const std::vector<double>& speed);

// The slowest stage's time as a share of the whole model's at speed 1: max_k (cost_k / speed_k)
// over the total cost (1 / p for p equal stages of speed 1).
double speed_share(const PipeCosts& costs, const std::vector<int64_t>& counts,
                   const std::vector<double>& speed);

}  // namespace zt
