#include "optim/optimizer.h"

namespace zt {

void Optimizer::init_state(MemoryPool& pool, int64_t numel) {
    ZT_ASSERT(numel >= 0);
    numel_ = numel;
    state_.clear();
    for (size_t i = 0; i < state_names().size(); ++i)
        state_.push_back(Tensor::zeros(pool, {numel}, DType::kF32, MemCategory::kOptimizer));
}

void Optimizer::step(float* params, const float* grads, std::span<const OptimSegment> segments,
                     float lr, int64_t step, const ComputeCopy& copy) {
    ZT_ASSERT(numel_ >= 0, name(), "::step before init_state");
    std::vector<float*> s;
    s.reserve(state_.size());
    for (Tensor& t : state_) s.push_back(t.data<float>());
    step_on(params, grads, s.data(), numel_, segments, lr, step, copy);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() {
    std::vector<std::pair<std::string, Tensor>> out;
    const std::vector<std::string> names = state_names();
    for (size_t i = 0; i < state_.size(); ++i) out.emplace_back(names[i], state_[i]);
    return out;
}

}  // namespace zt
