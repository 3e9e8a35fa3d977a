// AdamW (decoupled weight decay) and classic Adam (L2 decay added to the gradient), one fused pass
// over the flat range: PyTorch's torch.optim.AdamW / Adam update, op for op in f32 (Note [AdamW
// op order] in adamw.cpp), AVX-512 where the target has it (optim/adam_kernel.h), threads over
// contiguous shares; the same bits for any thread count and either path. The pass can also write
// the compute copy of the updated weights (ComputeCopy, bf16/f16/f32). State: exp_avg and
// exp_avg_sq, flat f32, as long as the range. Decay applies only on segments marked `decay`.
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

    std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
    void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                 std::span<const OptimSegment> segments, float lr, int64_t step,
                 const ComputeCopy& copy) const override;
    std::string name() const override { return options_.adam_w_mode ? "AdamW" : "Adam"; }

    const AdamWOptions& options() const { return options_; }

private:
    AdamWOptions options_;
};

// The fused step over state the caller holds (an offload tier streams master weights and moments
// through its own buffers): params, grads, exp_avg, exp_avg_sq (numel,) f32; copy as in
// Optimizer::step. Threads over contiguous shares of [0, numel) (the OpenMP thread count; one
// thread below 32Ki elements). AdamW::step_on is this over state[0], state[1].
void adamw_step(const AdamWOptions& options, float* params, const float* grads, float* exp_avg,
                float* exp_avg_sq, int64_t numel, std::span<const OptimSegment> segments, float lr,
                int64_t step, const ComputeCopy& copy = {});

}  // namespace zt
