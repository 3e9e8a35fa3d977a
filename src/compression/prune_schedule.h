// Pruning's options and its schedule (docs/pruning.md): which weights, what pattern, and the
// sparsity after each optimizer step. Pure functions of the step: every rank, every layout and a
// resumed run compute the same masks at the same steps.
//   magnitude: the gradual schedule of Zhu and Gupta (2017), cubic from initial_sparsity at
//              start_step to final_sparsity at end_step, masks recomputed every `frequency`
//              steps in between (and at end_step), fixed after it;
//   nm:        N of every M consecutive weights of a row kept (2:4), recomputed on the same grid;
//   rows:      DLRM embedding rows with the fewest lookups (compression/prune_rows.h), the
//              fraction of each table's rows cubic from initial_sparsity to final_sparsity;
//   structured: whole heads and MLP channels (compression/prune_groups.h), the fraction of each
//              layer's units cubic from 0 at start_step to `heads` / `channels` at end_step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct PruningOptions {
    std::string type;              // "" (off), "magnitude", "nm", "structured", "rows"
    std::string scope = "global";  // magnitude: one threshold for all targets, or "layer"
    double initial_sparsity = 0.0;
    double final_sparsity = 0.0;
    int64_t start_step = 0;  // first mask update after this many optimizer steps
    int64_t end_step = 0;    // last mask update (>= start_step)
    int64_t frequency = 1;   // steps between mask updates
    int n = 2, m = 4;        // nm: N kept in every M
    // structured: the fraction of each layer's attention heads and MLP channels pruned from
    // end_step on (below 1, so every layer keeps a head and a channel).
    double heads = 0.0, channels = 0.0;
    // Substrings of parameter names to prune; empty: every Linear weight.
    std::vector<std::string> params;
    bool enabled() const { return !type.empty(); }
};

// The cubic schedule from `initial` at start_step to `final` at end_step (0 before start_step).
double prune_fraction_at(const PruningOptions& o, int64_t step, double initial, double final);
// The target sparsity after `step` optimizer steps (0 before start_step); structured: 0 (its
// targets are prune_heads_at and prune_channels_at).
double prune_sparsity_at(const PruningOptions& o, int64_t step);
// structured: the fraction of each layer's heads / channels pruned after `step`.
double prune_heads_at(const PruningOptions& o, int64_t step);
double prune_channels_at(const PruningOptions& o, int64_t step);
// Whether the masks are recomputed after optimizer step `step` (1-based).
bool prune_updates_at(const PruningOptions& o, int64_t step);

}  // namespace zt
