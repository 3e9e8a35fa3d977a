// AdamW (decoupled weight decay) and classic Adam (L2 decay added to the gradient), one fused pass
// over the flat range: PyTorch's torch.optim.AdamW / Adam update, op for op in f32 (Note [AdamW
// op order] in adamw.cpp). State: exp_avg and exp_avg_sq, flat f32, as long as the range.
// Decay applies only on segments marked `decay`. The learning rate comes with each step.
#pragma once

#include "optim/optimizer.h"

namespace zt {

struct AdamWOptions {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    bool adam_w_mode = true;  // true: p -= lr*wd*p; false: g += wd*p (classic Adam, L2)
    bool bias_correction = true;
};

class AdamW final : public Optimizer {
public:
    explicit AdamW(const AdamWOptions& options);

    void init_state(MemoryPool& pool, int64_t numel) override;
    void step(float* params, const float* grads, std::span<const OptimSegment> segments, float lr,
              int64_t step) override;
    std::vector<std::pair<std::string, Tensor>> state() override;
    std::string name() const override { return options_.adam_w_mode ? "AdamW" : "Adam"; }

    const AdamWOptions& options() const { return options_; }

private:
    AdamWOptions options_;
    int64_t numel_ = 0;
    Tensor exp_avg_;     // (numel,) f32
    Tensor exp_avg_sq_;  // (numel,) f32
};

}  // namespace zt
