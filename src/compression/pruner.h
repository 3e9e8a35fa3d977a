// Pruning during training (docs/pruning.md): the Engine's part. Before each step's gradient norm
// the pruned weights' gradients are zeroed (they are not parameters of the pruned model); after
// the steps the schedule names (prune_schedule.h) the masks are recomputed from the master
// weights and the pruned weights, their optimizer state and the compute copy are set to 0.
// The mask itself is the MaskedOptimizer's "pruned" state (masked_optimizer.h): partitioned,
// offloaded and checkpointed with the optimizer state. A mask update sees the whole model: each
// rank's scores are all-gathered over the data-parallel group (one f32 per weight, for the
// update's duration), and under tensor or pipeline parallelism placed in the whole model's view
// over tp and pp (prune_view.h), so every layout computes the same mask.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "comm/communicator.h"
#include "compression/prune_groups.h"
#include "compression/prune_mask.h"
#include "compression/prune_rows.h"
#include "compression/prune_schedule.h"
#include "compression/prune_view.h"
#include "offload/update_state.h"
#include "parallel/zero.h"

namespace zt {

// The weights pruning applies to: each parameter that is a Linear's weight and, when `patterns`
// is not empty, whose name contains one of them. Throws kInput when none is.
std::vector<PruneTarget> prune_targets(const std::vector<Parameter*>& params,
                                       const std::vector<std::string>& patterns);

class Pruner {
  public:
    // state_index: the "pruned" tensor among the update state's names(). view: under tensor or
    // pipeline parallelism, the whole model's (its targets, not `targets`, are then pruned);
    // null otherwise.
    Pruner(PruningOptions options, std::vector<PruneTarget> targets, int64_t padded, Range update,
           int state_index, std::unique_ptr<PruneView> view = nullptr);

    // structured: the model's heads and channels (compression/prune_groups.h), before the first
    // update or reload; collective over pp with a view (every stage's groups).
    void set_unit_groups(std::vector<PruneUnitGroup> groups);
    // rows: the model's tables (compression/prune_rows.h), before the first update or reload.
    void set_row_tables(std::vector<PruneRowTable> tables);
    // rows: counts this rank's micro-batch's ids (not yet summed over ranks).
    void count(const ClickBatch& batch);
    // rows, collective over `comm` (the data-parallel group; null: one rank): adds the counts of
    // every rank since the last call to the totals, so the totals are one process's counts.
    void reduce_counts(Communicator* comm);
    bool counts_rows() const { return !row_tables_.empty(); }
    // rows: the summed counts per table (checkpointed by the trainer), and their restore.
    const std::vector<std::vector<double>>& row_counts() const { return row_counts_; }
    void set_row_counts(std::vector<std::vector<double>> counts);
    // Zeroes the gradients of pruned weights: g holds the update range's f32 gradients.
    void mask_grads(float* g) const;
    // Collective over the data-parallel group when due(step): new masks after optimizer step
    // `step`, applied to the master weights, the optimizer state and the compute copy. The
    // caller then makes the compute weights whole (ZeroDataParallel::after_update).
    bool due(int64_t step) const { return prune_updates_at(options_, step); }
    void update(int64_t step, UpdateState& state, ZeroDataParallel& dp);
    // Collective: the masks from the state after it was loaded (a resume).
    void reload(UpdateState& state, ZeroDataParallel& dp);

    const PruningOptions& options() const { return options_; }
    double sparsity() const;  // of all targets, now
    // {"sparsity", "target" (the schedule's at `step`), "pruned", "layers" (per target, when
    // `layers`)}; structured: "heads" and "channels" ({"target": the schedule's fraction at
    // `step`, "pruned": units pruned per layer, the largest over layers}) in place of "target".
    nlohmann::json metrics(int64_t step, bool layers) const;

  private:
    // This rank's bits from its whole-arena mask `arena`; the counts per target and group from
    // `whole` (the view's mask with a view, else `arena`).
    void set_mask(const std::vector<uint8_t>& arena, const std::vector<uint8_t>& whole);
    // The mask from this rank's whole-arena values over dp (`arena`): scores with a view become
    // the view's, and the mask computed there comes back as this rank's arena bytes.
    std::vector<float> whole_model(std::vector<float> arena) const;
    std::vector<uint8_t> to_arena(const std::vector<uint8_t>& whole) const;

    PruningOptions options_;
    std::vector<PruneTarget> targets_;
    int64_t padded_;
    Range update_;
    int state_index_;
    std::unique_ptr<PruneView> view_;
    std::vector<uint64_t> bits_;  // the update range's mask, one bit per weight
    std::vector<int64_t> pruned_per_target_;
    std::vector<PruneUnitGroup> groups_;                 // structured
    std::vector<int64_t> pruned_per_group_;              // structured: whole units pruned
    std::vector<PruneRowTable> row_tables_;              // rows
    std::vector<std::vector<double>> row_counts_;        // rows: summed over ranks
    std::vector<std::vector<double>> row_counts_local_;  // rows: this rank's, not yet summed
};

}  // namespace zt
