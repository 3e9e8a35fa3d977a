// An optimizer whose pruned weights stay exactly zero (docs/pruning.md): the wrapped optimizer's
// update, then every weight the "pruned" state marks (1.0 pruned, 0.0 kept) set to 0 in the
// master and in the compute copy. The mask is one more f32 state buffer, so it lives where the
// optimizer state lives: partitioned with ZeRO, on the offload tier, in checkpoints (resharded
// by name like the moments). Zero-initialized state means nothing pruned. The name is the
// wrapped optimizer's: a checkpoint with or without the mask resumes into either.
#pragma once

#include <memory>

#include "optim/optimizer.h"

namespace zt {

inline constexpr const char* kPrunedStateName = "pruned";

class MaskedOptimizer final : public Optimizer {
  public:
    explicit MaskedOptimizer(std::unique_ptr<Optimizer> inner);
    std::vector<std::string> state_names() const override;  // the inner's, then "pruned"
    void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                 std::span<const OptimSegment> segments, float lr, int64_t step,
                 const ComputeCopy& copy) const override;
    std::string name() const override { return inner_->name(); }
    // Index of the mask among state_names().
    int mask_index() const { return inner_states_; }

  private:
    std::unique_ptr<Optimizer> inner_;
    int inner_states_ = 0;
};

}  // namespace zt
