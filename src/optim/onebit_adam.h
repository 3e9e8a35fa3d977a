// 1-bit Adam (Tang et al. 2021, "1-bit Adam: Communication Efficient Large-Scale Training with
// Adam's Convergence Speed"), as DeepSpeed's OnebitAdam runs it: Adam without bias correction for
// `freeze_step` updates (the warm-up; gradients all-reduced in full precision), then the variance
// exp_avg_sq frozen and the momentum exp_avg exchanged between data-parallel ranks through a
// 1-bit codec with error feedback instead of the gradients (parallel/momentum_exchange.h).
// Note [1-bit Adam] in runtime/engine_onebit.cpp says how the engine drives the two phases.
//
// This type is the update alone, over state the caller holds (Optimizer's contract):
// - update u <= freeze_step: AdamW's fused kernel (optim/adamw.h) with bias correction off, op for
//   op the engine's AdamW, so a run that never leaves the warm-up equals AdamW with
//   bias_correction false bit for bit;
// - update u > freeze_step: `grads` holds the momentum the ranks agreed on (the exchange's
//   average); the step stores it as exp_avg, leaves exp_avg_sq as it is, and updates
//     p = p * f32(1 - lr*wd)                      (decay segments; DeepSpeed adds wd*p to the
//                                                  update, the same step in exact arithmetic)
//     p = p + (f32(-lr) * m) / (sqrt(v) + f32(eps))
//   one instruction sequence per element, no FMA (Note [One compiled update]).
#pragma once

#include <string>

#include "optim/adamw.h"

namespace zt {

struct OneBitAdamOptions {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    int64_t freeze_step = 100000;  // DeepSpeed's default: updates in the warm-up
    // The compressed phase exchanges the update m / (sqrt(v) + eps) instead of the momentum m
    // (Note [Update exchange] in runtime/engine_onebit.cpp); false: DeepSpeed's exchange.
    bool exchange_update = true;
};

class OneBitAdam final : public Optimizer {
  public:
    explicit OneBitAdam(const OneBitAdamOptions& options);

    std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
    void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                 std::span<const OptimSegment> segments, float lr, int64_t step,
                 const ComputeCopy& copy) const override;
    std::string name() const override { return "OneBitAdam"; }

    const OneBitAdamOptions& options() const { return options_; }
    // Whether update number `step` (from 1) runs with the frozen variance and the exchanged
    // momentum.
    bool compressed(int64_t step) const { return step > options_.freeze_step; }

  private:
    OneBitAdamOptions options_;
    AdamWOptions warmup_;  // the warm-up's AdamW: the same betas, eps, decay; no bias correction
};

// What 1-bit Adam composes with (Note [1-bit Adam] in runtime/engine_onebit.cpp): the layout
// facts the engine and the config parser both know, and the reason it is refused (empty: it runs).
struct OneBitAdamLayout {
    int zero_stage = 0;
    bool tensor_or_pipeline = false;
    double gradient_clipping = 0;
    bool fp16 = false;
    bool offload_optimizer = false;
    bool pruning = false;
    bool grad_compression = false;
};
std::string onebit_adam_refusal(const OneBitAdamLayout& l);

// The compressed phase's local momentum, in place: g[i] <- m[i] * f32(beta1) + f32(1 - beta1) *
// (g[i] * f32(scale)) for i in [0, n) (DeepSpeed's exp_avg.mul_(beta1).add_(grad, 1 - beta1),
// with the rank's gradient scaled by `scale` first). No FMA.
void onebit_local_momentum(float* g, const float* m, int64_t n, double beta1, double scale);

// Around the compressed phase's exchange, with d = sqrt(v[i]) + f32(eps) the frozen step's own
// denominator. Before it, x[i] <- 0 where sqrt(v[i]) < eps (Note [Unset variance]), else x[i] / d
// with `update` (Note [Update exchange]) or x[i] as it is; after it, the same mask and x[i] * d
// with `update`. No FMA.
void onebit_exchange_in(float* x, const float* v, int64_t n, double eps, bool update);
void onebit_exchange_out(float* x, const float* v, int64_t n, double eps, bool update);

}  // namespace zt
