#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "optim/clip.h"
#include "util/error.h"

// Note [Dynamic loss scale]
// DeepSpeed's DynamicLossScaler.update_scale, rule for rule (scale_factor is 2, as there):
// - overflow, and hysteresis == 1 or cur_hysteresis == 1: if the scale already equals min_scale,
//   raise (raise_error_at_min_scale); else scale = max(scale / 2, min_scale).
// - overflow otherwise: cur_hysteresis -= 1, the scale stays.
// - every overflow: last_overflow_iter = cur_iter.
// - clean step: with consecutive_hysteresis, cur_hysteresis = hysteresis. Then with
//   stable = cur_iter - last_overflow_iter - 1, if stable > 0 and stable % scale_window == 0:
//   without consecutive_hysteresis cur_hysteresis = hysteresis; scale *= 2.
// - every step: cur_iter += 1.
// So the scale first doubles on the (scale_window + 1)-th clean step after the latest overflow
// (or after the start), then every scale_window clean steps; hysteresis is used up by
// overflows and, without consecutive_hysteresis, refilled only when the scale grows.
// A static scale never changes; an overflow still skips its step (DeepSpeed's FP16_Optimizer
// checks overflow itself whenever fp16 scales gradients).

namespace zt {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
    if (dynamic()) {
        ZT_CHECK(options_.initial_scale_power >= 0 && options_.initial_scale_power <= 64,
                 "fp16.initial_scale_power: expected 0..64, got ", options_.initial_scale_power);
        ZT_CHECK(options_.scale_window >= 1, "fp16.loss_scale_window: expected >= 1, got ",
                 options_.scale_window);
        ZT_CHECK(options_.hysteresis >= 1, "fp16.hysteresis: expected >= 1, got ",
                 options_.hysteresis);
        ZT_CHECK(options_.min_scale > 0, "fp16.min_loss_scale: expected > 0, got ",
                 options_.min_scale);
        state_.scale = std::ldexp(1.0, static_cast<int>(options_.initial_scale_power));
    } else {
        state_.scale = options_.static_scale;
    }
    state_.cur_hysteresis = options_.hysteresis;
}

bool LossScaler::update(bool overflow) {
    if (!dynamic()) return overflow;
    LossScalerState& s = state_;
    if (overflow) {
        if (options_.hysteresis == 1 || s.cur_hysteresis == 1) {
            if (s.scale == options_.min_scale && options_.raise_error_at_min_scale)
                throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                            str_cat("fp16: gradients overflowed at the minimum loss scale ",
                                    options_.min_scale, " (step ", s.cur_iter + 1,
                                    "); the scale cannot go lower. The model produces non-finite "
                                    "values at any scale: lower the learning rate, lower "
                                    "fp16.min_loss_scale, or train in bf16; nan_policy \"stop\" "
                                    "names the module whose output went non-finite"));
            s.scale = std::max(s.scale / 2.0, options_.min_scale);
        } else {
            s.cur_hysteresis -= 1;
        }
        s.last_overflow_iter = s.cur_iter;
    } else {
        if (options_.consecutive_hysteresis) s.cur_hysteresis = options_.hysteresis;
        const int64_t stable = s.cur_iter - s.last_overflow_iter - 1;
        if (stable > 0 && stable % options_.scale_window == 0) {
            if (!options_.consecutive_hysteresis) s.cur_hysteresis = options_.hysteresis;
            s.scale *= 2.0;
        }
    }
    s.cur_iter += 1;
    return overflow;
}

namespace {

constexpr int kLanes = 16;
constexpr int64_t kChunkBatch = 1024;                      // chunks per parallel batch
constexpr int64_t kParallelMinNumel = 2 * kGradNormChunk;  // below this, one thread

// g: (n,) with n <= kGradNormChunk; the lane pattern of clip.cpp's chunk_sq_sum.
double chunk_unscale_sq_sum(float* __restrict g, int64_t n, float inv_scale) {
    double acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
        for (int k = 0; k < kLanes; ++k) {
            const float x = g[i + k] * inv_scale;
            g[i + k] = x;
            acc[k] += static_cast<double>(x) * x;
        }
    }
    for (int k = 0; i < n; ++i, ++k) {
        const float x = g[i] * inv_scale;
        g[i] = x;
        acc[k] += static_cast<double>(x) * x;
    }
    for (int width = kLanes / 2; width >= 1; width /= 2)
        for (int k = 0; k < width; ++k) acc[k] = acc[k] + acc[k + width];
    return acc[0];
}

}  // namespace

double unscale_grad_sq_sum(float* g, int64_t n, float inv_scale) {
    ZT_ASSERT(n >= 0);
    return sum_over_chunks(n, [g, inv_scale](int64_t begin, int64_t len) {
        return chunk_unscale_sq_sum(g + begin, len, inv_scale);
    });
}

}  // namespace zt
