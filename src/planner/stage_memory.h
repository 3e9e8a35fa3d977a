// Each pipeline stage's memory on one of its ranks (`zerotrain estimate`'s per-stage table,
// docs/memory.md): the stage's blocks, its model state (exact: its own parameters, the tied
// embedding's copy included) and the activations it holds in flight under the schedule and the
// checkpoint policy. Every figure is the cost model's (plan_memory_of_stage in cost_model.h);
// this file adds no byte model of its own, only the table and its JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/cost_model.h"

namespace zt {

struct StageMemory {
    int stage = 0;
    std::vector<int64_t> blocks;  // stage_blocks: the transformer blocks (or layers) it holds
    // The schedule's simulation (PipeFacts): the most micro-batches whose activations the stage
    // holds at once (interleaved: chunk passes) and, zero bubble, the most between B and W.
    int in_flight = 0;
    int pending_w = 0;
    Estimate memory;  // plan_memory_of_stage(base, s, stage)
};

// Every stage of a pipeline layout (s.pp > 1), in stage order.
std::vector<StageMemory> stage_memories(const PlanBase& base, const Strategy& s);

// The index of the stage with the largest device total (the first of equals).
size_t most_loaded_stage(const std::vector<StageMemory>& stages);

// "0-2, 6-7": a sorted block list as ranges.
std::string block_ranges_text(const std::vector<int64_t>& blocks);

// The per-stage table: one row per stage (blocks, params, grads, optimizer, activations with the
// micro-batches in flight, device total), then the most loaded stage.
std::string stage_memory_text(const std::vector<StageMemory>& stages);
// The same rows as a JSON array (bytes exact, device categories as estimate_json's).
nlohmann::json stage_memory_json(const std::vector<StageMemory>& stages);

}  // namespace zt
