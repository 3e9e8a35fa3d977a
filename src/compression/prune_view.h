// Pruning under tensor and pipeline parallelism (docs/pruning.md, "Layouts"): a mask update sees
// the whole model laid out as one process holds it. Each rank places its parameters (whole over
// the data-parallel group already) at their one-process positions in a view of every parameter
// of the model, a part of a split tensor at its elements of the whole tensor; one sum over the
// tensor-parallel group and one over the pipeline group then hold every weight once, because each
// element has exactly one writer: a split part writes its own elements, an unsplit parameter is
// written by tp rank 0, a tied copy (GPT's wte on the last stage) by the first stage that holds
// it. The pure mask functions (prune_mask.h, prune_groups.h) run on the view on every rank, so
// every layout computes the mask one process computes, and each rank takes back its parameters'
// elements. Costs one f32 per weight of the whole model on each rank during an update.
//
// The view's order is the pipeline stages' in rank order, each stage's parameters in arena order:
// one process's order except under the interleaved schedule, where it only changes which of two
// weights of exactly equal magnitude in different layers a global threshold takes first.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "comm/communicator.h"
#include "compression/prune_groups.h"
#include "compression/prune_mask.h"

namespace zt {

class PruneView {
  public:
    // Collective over tp and pp (null or one rank: that dimension is not split). params: this
    // rank's arena parameters; targets: those of them pruning applies to (arena offsets).
    PruneView(const std::vector<Parameter*>& params, std::span<const PruneTarget> targets,
              Communicator* tp, Communicator* pp);

    int64_t numel() const { return numel_; }
    // Every stage's targets, whole tensors at view offsets, in view order.
    const std::vector<PruneTarget>& targets() const { return targets_; }
    // Collective over pp: every stage's unit groups (this rank's given at arena offsets over
    // its parts), in view coordinates with their whole unit counts.
    std::vector<PruneUnitGroup> groups(std::span<const PruneUnitGroup> local) const;
    // Collective over tp and pp: this rank's arena values (`local`, arena offsets) -> the view.
    std::vector<float> gather(std::span<const float> local) const;
    // The view's bytes -> this rank's arena bytes (`arena` elements; outside the parameters 0).
    std::vector<uint8_t> scatter(const std::vector<uint8_t>& view, int64_t arena) const;

  private:
    struct Local {
        const Parameter* p;
        int64_t view_offset;
        bool writes;  // this rank holds the one copy of these elements the view sums
    };
    const Local& local_at(int64_t arena_offset) const;

    std::vector<Local> local_;
    std::vector<PruneTarget> targets_;
    int64_t numel_ = 0;
    Communicator* tp_;
    Communicator* pp_;
};

}  // namespace zt
