#include "optim/onebit_adam.h"

#include <cmath>

#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {

namespace {

struct FrozenCoefs {
    float decay_factor;  // 1 - lr*wd
    float neg_lr;
    float eps;
};

// p, m, v (n,) f32, mbar (n,) the agreed momentum. One compiled instance for every element.
template <bool kDecay>
ZT_OPTIM_KERNEL void frozen_update(float* __restrict p, const float* __restrict mbar,
                                   float* __restrict m, const float* __restrict v, int64_t n,
                                   FrozenCoefs c) {
    ZT_OPTIM_NO_CONTRACT
    for (int64_t i = 0; i < n; ++i) {
        float pi = p[i];
        if constexpr (kDecay) pi = pi * c.decay_factor;
        const float mi = mbar[i];
        m[i] = mi;
        p[i] = pi + (c.neg_lr * mi) / (std::sqrt(v[i]) + c.eps);
    }
}

ZT_OPTIM_KERNEL void local_momentum(float* __restrict g, const float* __restrict m, int64_t n,
                                    float beta1, float one_minus_beta1, float scale) {
    ZT_OPTIM_NO_CONTRACT
    for (int64_t i = 0; i < n; ++i) g[i] = m[i] * beta1 + one_minus_beta1 * (g[i] * scale);
}

}  // namespace

OneBitAdam::OneBitAdam(const OneBitAdamOptions& options) : options_(options) {
    ZT_CHECK(options_.freeze_step >= 0,
             "optimizer.params.freeze_step: expected a count of updates >= 0, got ",
             options_.freeze_step);
    warmup_.beta1 = options_.beta1;
    warmup_.beta2 = options_.beta2;
    warmup_.eps = options_.eps;
    warmup_.weight_decay = options_.weight_decay;
    warmup_.adam_w_mode = true;
    warmup_.bias_correction = false;
    AdamW check(warmup_);  // the same range checks as AdamW's
}

void OneBitAdam::step_on(float* params, const float* grads, float* const* state, int64_t numel,
                         std::span<const OptimSegment> segments, float lr, int64_t step,
                         const ComputeCopy& copy) const {
    ZT_ASSERT(step >= 1, "OneBitAdam steps count from 1, got ", step);
    if (!compressed(step))
        return adamw_step(warmup_, params, grads, state[0], state[1], numel, segments, lr, step,
                          copy);
    optim_detail::check_segments(segments, numel);
    const FrozenCoefs c{static_cast<float>(1.0 - static_cast<double>(lr) * options_.weight_decay),
                        -lr, static_cast<float>(options_.eps)};
    const bool decay = options_.weight_decay != 0.0;
    float* m = state[0];
    const float* v = state[1];
#pragma omp parallel if (numel >= parallel_min_elems(optim_detail::kParallelMinNumel))
    optim_detail::for_each_share_part(segments, numel, [&](int64_t b, int64_t e, bool d) {
        if (decay && d)
            frozen_update<true>(params + b, grads + b, m + b, v + b, e - b, c);
        else
            frozen_update<false>(params + b, grads + b, m + b, v + b, e - b, c);
        optim_detail::write_compute_copy(params, copy, b, e);
    });
}

std::string onebit_adam_refusal(const OneBitAdamLayout& l) {
    const char* why = nullptr;
    if (l.zero_stage != 0)
        why =
            "ZeRO stages 1-3 partition the momentum that 1-bit Adam exchanges whole; use "
            "zero_optimization.stage 0 (as DeepSpeed's OnebitAdam)";
    else if (l.tensor_or_pipeline)
        why =
            "tensor and pipeline parallelism are not supported with it yet; use data "
            "parallelism";
    else if (l.gradient_clipping > 0)
        why =
            "its compressed phase never forms the global gradient, so gradient_clipping "
            "cannot apply; remove gradient_clipping";
    else if (l.fp16)
        why = "fp16 loss scaling is not supported with it yet; use bf16.enabled or fp32";
    else if (l.offload_optimizer)
        why = "zero_optimization.offload_optimizer is not supported with it yet";
    else if (l.pruning)
        why = "compression.pruning is not supported with it yet";
    else if (l.grad_compression)
        why = "it compresses the momentum itself; remove compression.gradients";
    return why ? str_cat("optimizer.type \"OneBitAdam\": ", why) : std::string();
}

void onebit_local_momentum(float* g, const float* m, int64_t n, double beta1, double scale) {
    const auto b1 = static_cast<float>(beta1), w = static_cast<float>(1.0 - beta1);
    const auto s = static_cast<float>(scale);
    constexpr int64_t kChunk = 1 << 15;
#pragma omp parallel for if (n >= parallel_min_elems(optim_detail::kParallelMinNumel)) \
    schedule(static)
    for (int64_t lo = 0; lo < n; lo += kChunk)
        local_momentum(g + lo, m + lo, std::min(kChunk, n - lo), b1, w, s);
}

namespace {

// x[i] <- 0 where v[i] < eps^2 (sqrt(v[i]) < eps), else x[i] / d or x[i] * d (update) or x[i].
template <bool kIn>
void onebit_exchange_side(float* x, const float* v, int64_t n, double eps, bool update) {
    const auto e = static_cast<float>(eps);
    const float unset = e * e;
#pragma omp parallel for if (n >= parallel_min_elems(optim_detail::kParallelMinNumel)) \
    schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        if (!(v[i] >= unset)) {
            x[i] = 0.0f;
        } else if (update) {
            const float d = std::sqrt(v[i]) + e;
            x[i] = kIn ? x[i] / d : x[i] * d;
        }
    }
}

}  // namespace

void onebit_exchange_in(float* x, const float* v, int64_t n, double eps, bool update) {
    onebit_exchange_side<true>(x, v, n, eps, update);
}

void onebit_exchange_out(float* x, const float* v, int64_t n, double eps, bool update) {
    onebit_exchange_side<false>(x, v, n, eps, update);
}

}  // namespace zt
