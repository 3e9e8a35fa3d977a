#include "compression/masked_optimizer.h"

#include <cstring>

#include "util/error.h"

namespace zt {

MaskedOptimizer::MaskedOptimizer(std::unique_ptr<Optimizer> inner) : inner_(std::move(inner)) {
    ZT_ASSERT(inner_ != nullptr, "MaskedOptimizer: no optimizer");
    inner_states_ = static_cast<int>(inner_->state_names().size());
}

std::vector<std::string> MaskedOptimizer::state_names() const {
    std::vector<std::string> names = inner_->state_names();
    names.emplace_back(kPrunedStateName);
    return names;
}

void MaskedOptimizer::step_on(float* params, const float* grads, float* const* state, int64_t numel,
                              std::span<const OptimSegment> segments, float lr, int64_t step,
                              const ComputeCopy& copy) const {
    inner_->step_on(params, grads, state, numel, segments, lr, step, copy);
    // The engine zeroes pruned gradients and pruning zeroes their state, so every optimizer
    // here leaves a pruned weight at 0 already; this pass makes it so whatever the update rule.
    const float* pruned = state[inner_states_];
    const size_t es = copy.data ? dtype_size(copy.dtype) : 0;
    for (const OptimSegment& s : segments)
        for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            if (pruned[i] == 0.0f) continue;
            params[i] = 0.0f;
            if (copy.data) std::memset(static_cast<char*>(copy.data) + i * es, 0, es);
        }
}

}  // namespace zt
