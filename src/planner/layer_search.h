// The planner's per-layer search (docs/planner.md, "Per-layer recompute"): Galvatron's dynamic
// programming over layers, for the choice each block of a layout makes about its activations
// (kept, recomputed in its attention core, or recomputed whole; models/block_recompute.h). Under
// a per-rank memory budget that holds the activations of some blocks but not all, the list that
// recomputes least is usually a mix no named policy gives; on a pipeline, each stage gets its own
// mix for the micro-batches it holds in flight. Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/cost_model.h"

namespace zt {

struct LayerOption {
    double bytes = 0;    // memory the option adds to the running sum of the layers before it
    double seconds = 0;  // time it costs
    double peak = 0;     // memory it needs for a while on top of that running sum (its backward)
};

// One option per layer (its index in the layer's list) minimizing the summed seconds such that
// for every layer the running sum of the bytes of the layers before it plus its option's peak,
// and the sum of all bytes plus `tail`, are at most `capacity`: a dynamic program over layers and
// the running sum in `units` steps of capacity / units, each option's bytes rounded up to whole
// steps (so a returned choice always fits; it may miss an optimum that fits only unrounded).
// Ties go to the earlier option. nullopt: no choice fits.
std::optional<std::vector<int>> cheapest_within(const std::vector<std::vector<LayerOption>>& layers,
                                                double capacity, int units = 2048, double tail = 0);

// The layout `s` (its micro-batches, schedule and partition kept) with the per-block recompute
// list that fits the device budget (`budget` per rank when > 0, and each stage's
// base.rank_memory when given) in the least recompute time: each stage's blocks chosen by
// cheapest_within on the stage's own memory, then checked by plan_cost. nullopt when the family
// has no per-block recompute, when even every block recomputed whole does not fit, or when the
// best list is one choice throughout (a named policy: "none", "selective", "every").
std::optional<Strategy> per_block_layout(const PlanBase& base, Strategy s, int64_t budget,
                                         const MachineProfile* profile);

}  // namespace zt
