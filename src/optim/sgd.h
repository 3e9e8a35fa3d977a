// SGD with optional momentum (dampening 0) and Nesterov, PyTorch's torch.optim.SGD update op for
// op in f32. Weight decay is L2, added to the gradient on segments marked `decay`. State: one flat
// f32 momentum buffer as long as the range, only when momentum != 0; the first step copies the
// gradient into it, as PyTorch does.
#pragma once

#include "optim/optimizer.h"

namespace zt {

struct SgdOptions {
    double momentum = 0.0;
    double weight_decay = 0.0;
    bool nesterov = false;  // needs momentum > 0
};

class Sgd final : public Optimizer {
public:
    explicit Sgd(const SgdOptions& options);

    // {"momentum_buffer"} with momentum, else none.
    std::vector<std::string> state_names() const override;
    void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                 std::span<const OptimSegment> segments, float lr, int64_t step,
                 const ComputeCopy& copy) const override;
    std::string name() const override { return "SGD"; }

    const SgdOptions& options() const { return options_; }

private:
    SgdOptions options_;
};

}  // namespace zt
