// Loss scaling for fp16 training, with DeepSpeed's semantics (deepspeed/runtime/fp16/
// loss_scaler.py): a static scale when `static_scale` > 0, else DynamicLossScaler. The scaler only
// decides; the engine multiplies the loss seed by scale() and unscales the gradients
// (unscale_grad_sq_sum). Note [Dynamic loss scale] in loss_scaler.cpp gives the rules.
// Leaves out DeepSpeed's unscale-after-update quirk: gradients are unscaled by the scale they
// were computed with, also on a step where the scale grows.
#pragma once

#include <cstdint>

namespace zt {

// DeepSpeed's "fp16" keys and defaults; the runtime maps Fp16Config onto this.
struct LossScalerOptions {
    double static_scale = 0.0;            // fp16.loss_scale: > 0 a fixed scale, 0 dynamic
    int64_t initial_scale_power = 16;     // first dynamic scale 2^power
    int64_t scale_window = 1000;          // fp16.loss_scale_window
    int64_t hysteresis = 2;               // fp16.hysteresis (DeepSpeed's delayed_shift)
    bool consecutive_hysteresis = false;  // refill hysteresis after every clean step
    double min_scale = 1.0;               // fp16.min_loss_scale
    bool raise_error_at_min_scale = true; // DeepSpeed's default: overflow at the floor is fatal
};

// The dynamic scaler's state, for metrics and checkpoints.
struct LossScalerState {
    double scale = 1.0;
    int64_t cur_iter = 0;             // update() calls so far
    int64_t last_overflow_iter = -1;  // cur_iter of the latest overflow; -1: none yet
    int64_t cur_hysteresis = 0;       // overflows still tolerated before the scale halves
};

class LossScaler {
public:
    explicit LossScaler(const LossScalerOptions& options);

    double scale() const { return state_.scale; }
    bool dynamic() const { return options_.static_scale <= 0; }
    const LossScalerState& state() const { return state_; }
    void restore(const LossScalerState& state) { state_ = state; }
    const LossScalerOptions& options() const { return options_; }

    // Records one optimizer step's outcome (overflow: non-finite gradients or loss) and returns
    // whether the step must be skipped (exactly when it overflowed). Throws zt::Error (kInternal)
    // on an overflow that would take a dynamic scale below min_scale, as DeepSpeed raises.
    bool update(bool overflow);

private:
    LossScalerOptions options_;
    LossScalerState state_;
};

// Multiplies g (n, f32) by inv_scale in place and returns the sum of squares of the result, in
// double with the deterministic chunking of clip.h (same bits for any thread count). A
// non-finite element makes the sum non-finite: that is the overflow check.
double unscale_grad_sq_sum(float* g, int64_t n, float inv_scale);

}  // namespace zt
