#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "optim/segment_partition.h"

namespace zt {

// Note [AdamW op order]
// PyTorch's single-tensor AdamW (the CPU default), with Python scalars (double) turned into f32
// where a tensor op takes them:
//   p = p * f32(1 - lr*wd)                                  (adam_w_mode, decay segments)
//   g = g + f32(wd) * p                                     (classic Adam, decay segments)
//   m = lerp(m, g, w),  w = f32(1 - beta1)                  m + w*(g - m) when |w| < 0.5,
//                                                           else g - (g - m)*(1 - w)
//   v = v * f32(beta2);  v = v + (f32(1 - beta2) * g) * g   (mul_, then addcmul_)
//   denom = sqrt(v) / f32(sqrt(bc2)) + f32(eps)
//   p = p + (f32(-lr/bc1) * m) / denom                      (addcdiv_)
// with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t in double. The lerp is not b1*m + (1-b1)*g: it
// differs from it by an ulp once m is nonzero. No step uses FMA, and every element goes through
// one compiled instance (Note [One compiled update]), so any two thread counts give the same bits.

namespace {

struct AdamCoefs {
    float decay_factor;  // 1 - lr*wd
    float l2;            // wd
    float lerp_coef;     // w or (w - 1): m_new = base + lerp_coef * (g - m), base m or g
    float beta2;
    float one_minus_beta2;
    float bc2_sqrt;
    float eps;
    float neg_step_size;  // -lr / bc1
};

enum class Decay { kNone, kDecoupled, kL2 };

// p, g, m, v: (nblocks * kBlock,) f32. Note [One compiled update] in segment_partition.h.
template <Decay kDecay, bool kLerpFromM>
ZT_OPTIM_KERNEL void adam_blocks(float* __restrict p, const float* __restrict g,
                                 float* __restrict m, float* __restrict v, int64_t nblocks,
                                 const AdamCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    using optim_detail::kBlock;
    const AdamCoefs k = c;  // locals, so the compiler keeps them in registers
    for (int64_t b = 0; b < nblocks * kBlock; b += kBlock) {
#pragma omp simd
        for (int j = 0; j < kBlock; ++j) {
            float pi = p[b + j];
            float gi = g[b + j];
            if constexpr (kDecay == Decay::kDecoupled) pi = pi * k.decay_factor;
            if constexpr (kDecay == Decay::kL2) gi = gi + k.l2 * pi;
            const float mi = m[b + j];
            // g - (g - m)*(1 - w) == g + (w - 1)*(g - m) exactly: negation commutes with rounding.
            const float mn = (kLerpFromM ? mi : gi) + k.lerp_coef * (gi - mi);
            float vn = v[b + j] * k.beta2;
            vn = vn + (k.one_minus_beta2 * gi) * gi;
            const float denom = std::sqrt(vn) / k.bc2_sqrt + k.eps;
            m[b + j] = mn;
            v[b + j] = vn;
            p[b + j] = pi + (k.neg_step_size * mn) / denom;
        }
    }
}

template <Decay kDecay, bool kLerpFromM>
void adam_range(float* p, const float* g, float* m, float* v, int64_t n, const AdamCoefs& c) {
    using optim_detail::kBlock;
    const int64_t full = n / kBlock;
    if (full > 0) adam_blocks<kDecay, kLerpFromM>(p, g, m, v, full, c);
    const int64_t off = full * kBlock;
    const int64_t rest = n - off;
    if (rest == 0) return;
    alignas(64) float pb[kBlock] = {}, gb[kBlock] = {}, mb[kBlock] = {}, vb[kBlock] = {};
    std::copy_n(p + off, rest, pb);
    std::copy_n(g + off, rest, gb);
    std::copy_n(m + off, rest, mb);
    std::copy_n(v + off, rest, vb);
    adam_blocks<kDecay, kLerpFromM>(pb, gb, mb, vb, 1, c);
    std::copy_n(pb, rest, p + off);
    std::copy_n(mb, rest, m + off);
    std::copy_n(vb, rest, v + off);
}

template <bool kLerpFromM>
void adam_dispatch(Decay decay, float* p, const float* g, float* m, float* v, int64_t n,
                   const AdamCoefs& c) {
    switch (decay) {
        case Decay::kNone:
            adam_range<Decay::kNone, kLerpFromM>(p, g, m, v, n, c);
            break;
        case Decay::kDecoupled:
            adam_range<Decay::kDecoupled, kLerpFromM>(p, g, m, v, n, c);
            break;
        case Decay::kL2:
            adam_range<Decay::kL2, kLerpFromM>(p, g, m, v, n, c);
            break;
    }
}

}  // namespace

AdamW::AdamW(const AdamWOptions& options) : options_(options) {
    const AdamWOptions& o = options_;
    ZT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0,
             "optimizer.params.betas[0]: expected a value in [0, 1), got ", o.beta1);
    ZT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0,
             "optimizer.params.betas[1]: expected a value in [0, 1), got ", o.beta2);
    ZT_CHECK(o.eps >= 0.0, "optimizer.params.eps: expected a value >= 0, got ", o.eps);
    ZT_CHECK(o.weight_decay >= 0.0, "optimizer.params.weight_decay: expected a value >= 0, got ",
             o.weight_decay);
}

void AdamW::init_state(MemoryPool& pool, int64_t numel) {
    ZT_ASSERT(numel >= 0);
    numel_ = numel;
    exp_avg_ = Tensor::zeros(pool, {numel}, DType::kF32, MemCategory::kOptimizer);
    exp_avg_sq_ = Tensor::zeros(pool, {numel}, DType::kF32, MemCategory::kOptimizer);
}

void AdamW::step(float* params, const float* grads, std::span<const OptimSegment> segments,
                 float lr, int64_t step) {
    ZT_ASSERT(exp_avg_.defined(), "AdamW::step before init_state");
    ZT_ASSERT(step >= 1, "AdamW steps count from 1, got ", step);
    optim_detail::check_segments(segments, numel_);
    const AdamWOptions& o = options_;

    const double t = static_cast<double>(step);
    const double bc1 = o.bias_correction ? 1.0 - std::pow(o.beta1, t) : 1.0;
    const double bc2 = o.bias_correction ? 1.0 - std::pow(o.beta2, t) : 1.0;
    const float w = static_cast<float>(1.0 - o.beta1);
    AdamCoefs c{};
    c.decay_factor = static_cast<float>(1.0 - static_cast<double>(lr) * o.weight_decay);
    c.l2 = static_cast<float>(o.weight_decay);
    const bool from_m = std::fabs(w) < 0.5f;  // PyTorch's lerp: base m for a small weight
    c.lerp_coef = from_m ? w : w - 1.0f;
    c.beta2 = static_cast<float>(o.beta2);
    c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    c.eps = static_cast<float>(o.eps);
    c.neg_step_size = static_cast<float>(-(static_cast<double>(lr) / bc1));

    float* m = exp_avg_.data<float>();
    float* v = exp_avg_sq_.data<float>();
    const Decay decay_mode = o.weight_decay == 0.0 ? Decay::kNone
                             : o.adam_w_mode       ? Decay::kDecoupled
                                                   : Decay::kL2;
    const int64_t n = numel_;
#pragma omp parallel if (n >= optim_detail::kParallelMinNumel)
    optim_detail::for_each_share_part(segments, n, [&](int64_t b, int64_t e, bool decay) {
        const Decay d = decay ? decay_mode : Decay::kNone;
        if (from_m)
            adam_dispatch<true>(d, params + b, grads + b, m + b, v + b, e - b, c);
        else
            adam_dispatch<false>(d, params + b, grads + b, m + b, v + b, e - b, c);
    });
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() {
    return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

}  // namespace zt
