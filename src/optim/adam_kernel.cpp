#include "optim/adam_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optim/segment_partition.h"
#include "util/error.h"

namespace zt::optim_detail {

namespace {

using Copy = CopyKind;  // Note [Fused compute copy] in segment_partition.h

// ---- Portable path: 16-element blocks, a tail in a zero-padded block (Note [One compiled
// update]).

// p, g, m, v: (nblocks * kBlock,) f32; copy: the same count in the copy's dtype (kCopy).
template <AdamDecay kDecay, bool kLerpFromM, Copy kCopy>
ZT_OPTIM_KERNEL void adam_blocks(float* __restrict p, const float* __restrict g,
                                 float* __restrict m, float* __restrict v, void* copy,
                                 int64_t nblocks, const AdamCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    const AdamCoefs k = c;  // locals, so the compiler keeps them in registers
    for (int64_t b = 0; b < nblocks * kBlock; b += kBlock) {
#pragma omp simd
        for (int j = 0; j < kBlock; ++j) {
            float pi = p[b + j];
            float gi = g[b + j];
            if constexpr (kDecay == AdamDecay::kDecoupled) pi = pi * k.decay_factor;
            if constexpr (kDecay == AdamDecay::kL2) gi = gi + k.l2 * pi;
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
        if constexpr (kCopy != Copy::kNone) copy_block<kCopy>(p + b, copy, b, kBlock);
    }
}

template <AdamDecay kDecay, bool kLerpFromM, Copy kCopy>
void adam_portable(const AdamRange& r, const AdamCoefs& c) {
    const int64_t full = r.n / kBlock;
    if (full > 0) adam_blocks<kDecay, kLerpFromM, kCopy>(r.p, r.g, r.m, r.v, r.copy, full, c);
    const int64_t off = full * kBlock;
    const int64_t rest = r.n - off;
    if (rest == 0) return;
    alignas(64) float pb[kBlock] = {}, gb[kBlock] = {}, mb[kBlock] = {}, vb[kBlock] = {};
    std::copy_n(r.p + off, rest, pb);
    std::copy_n(r.g + off, rest, gb);
    std::copy_n(r.m + off, rest, mb);
    std::copy_n(r.v + off, rest, vb);
    alignas(64) float cb[kBlock] = {};  // the copy's tail: kBlock elements of at most 4 bytes
    adam_blocks<kDecay, kLerpFromM, kCopy>(pb, gb, mb, vb, cb, 1, c);
    std::copy_n(pb, rest, r.p + off);
    std::copy_n(mb, rest, r.m + off);
    std::copy_n(vb, rest, r.v + off);
    if constexpr (kCopy != Copy::kNone) {
        const size_t es = kCopy == Copy::kF32 ? 4 : 2;
        std::memcpy(static_cast<char*>(r.copy) + off * es, cb, rest * es);
    }
}

#ifdef ZT_OPTIM_AVX512
// ---- AVX-512 path: 16 lanes a step, the tail under a lane mask; the same instructions (IEEE
// add, mul, div, sqrt in the order of the portable path, no FMA) for every lane.

template <AdamDecay kDecay, bool kLerpFromM, Copy kCopy>
ZT_OPTIM_KERNEL void adam_avx512(const AdamRange& r, const AdamCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    float* __restrict p = r.p;
    const float* __restrict g = r.g;
    float* __restrict m = r.m;
    float* __restrict v = r.v;
    void* const copy = r.copy;  // a local: the stores through p, m, v cannot change it
    const int64_t n = r.n;
    const __m512 decay_factor = _mm512_set1_ps(c.decay_factor);
    const __m512 l2 = _mm512_set1_ps(c.l2);
    const __m512 lerp_coef = _mm512_set1_ps(c.lerp_coef);
    const __m512 beta2 = _mm512_set1_ps(c.beta2);
    const __m512 one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2);
    const __m512 bc2_sqrt = _mm512_set1_ps(c.bc2_sqrt);
    const __m512 eps = _mm512_set1_ps(c.eps);
    const __m512 neg_step_size = _mm512_set1_ps(c.neg_step_size);
    for (int64_t i = 0; i < n; i += 16) {
        const bool whole = n - i >= 16;  // every iteration but a tail's
        const __mmask16 k = whole ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
        __m512 pi = whole ? _mm512_loadu_ps(p + i) : _mm512_maskz_loadu_ps(k, p + i);
        __m512 gi = whole ? _mm512_loadu_ps(g + i) : _mm512_maskz_loadu_ps(k, g + i);
        const __m512 mi = whole ? _mm512_loadu_ps(m + i) : _mm512_maskz_loadu_ps(k, m + i);
        const __m512 vi = whole ? _mm512_loadu_ps(v + i) : _mm512_maskz_loadu_ps(k, v + i);
        if constexpr (kDecay == AdamDecay::kDecoupled) pi = _mm512_mul_ps(pi, decay_factor);
        if constexpr (kDecay == AdamDecay::kL2) gi = _mm512_add_ps(gi, _mm512_mul_ps(l2, pi));
        const __m512 mn =
            _mm512_add_ps(kLerpFromM ? mi : gi, _mm512_mul_ps(lerp_coef, _mm512_sub_ps(gi, mi)));
        __m512 vn = _mm512_mul_ps(vi, beta2);
        vn = _mm512_add_ps(vn, _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, gi), gi));
        const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vn), bc2_sqrt), eps);
        const __m512 pn = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(neg_step_size, mn), denom));
        if (whole) {
            _mm512_storeu_ps(m + i, mn);
            _mm512_storeu_ps(v + i, vn);
            _mm512_storeu_ps(p + i, pn);
        } else {
            _mm512_mask_storeu_ps(m + i, k, mn);
            _mm512_mask_storeu_ps(v + i, k, vn);
            _mm512_mask_storeu_ps(p + i, k, pn);
        }
        avx512_store_copy<kCopy>(copy, i, pn, whole, k);
    }
}
#endif  // ZT_OPTIM_AVX512

template <AdamDecay kDecay, bool kLerpFromM, Copy kCopy>
void adam_path(const AdamRange& r, const AdamCoefs& c, KernelPath path) {
#ifdef ZT_OPTIM_AVX512
    if (path == KernelPath::kBest) return adam_avx512<kDecay, kLerpFromM, kCopy>(r, c);
#endif
    (void)path;
    adam_portable<kDecay, kLerpFromM, kCopy>(r, c);
}

template <AdamDecay kDecay, bool kLerpFromM>
void adam_copy_dispatch(const AdamRange& r, Copy copy, const AdamCoefs& c, KernelPath path) {
    switch (copy) {
        case Copy::kNone:
            return adam_path<kDecay, kLerpFromM, Copy::kNone>(r, c, path);
        case Copy::kF32:
            return adam_path<kDecay, kLerpFromM, Copy::kF32>(r, c, path);
        case Copy::kBF16:
            return adam_path<kDecay, kLerpFromM, Copy::kBF16>(r, c, path);
        case Copy::kF16:
            return adam_path<kDecay, kLerpFromM, Copy::kF16>(r, c, path);
    }
}

template <AdamDecay kDecay>
void adam_lerp_dispatch(const AdamRange& r, Copy copy, const AdamCoefs& c, KernelPath path) {
    if (c.lerp_from_m) return adam_copy_dispatch<kDecay, true>(r, copy, c, path);
    adam_copy_dispatch<kDecay, false>(r, copy, c, path);
}

}  // namespace

AdamCoefs adam_coefs(const AdamWOptions& o, float lr, int64_t step) {
    const double t = static_cast<double>(step);
    const double bc1 = o.bias_correction ? 1.0 - std::pow(o.beta1, t) : 1.0;
    const double bc2 = o.bias_correction ? 1.0 - std::pow(o.beta2, t) : 1.0;
    const float w = static_cast<float>(1.0 - o.beta1);
    AdamCoefs c{};
    c.decay_factor = static_cast<float>(1.0 - static_cast<double>(lr) * o.weight_decay);
    c.l2 = static_cast<float>(o.weight_decay);
    c.lerp_from_m = std::fabs(w) < 0.5f;  // PyTorch's lerp: base m for a small weight
    c.lerp_coef = c.lerp_from_m ? w : w - 1.0f;
    c.beta2 = static_cast<float>(o.beta2);
    c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    c.eps = static_cast<float>(o.eps);
    c.neg_step_size = static_cast<float>(-(static_cast<double>(lr) / bc1));
    return c;
}

bool adam_has_avx512_path() { return kHasAvx512Path; }

void adam_update_range(const AdamRange& r, AdamDecay decay, DType copy_dtype, const AdamCoefs& c,
                       KernelPath path) {
    if (r.n <= 0) return;
    const Copy copy = copy_kind(r.copy, copy_dtype);
    switch (decay) {
        case AdamDecay::kNone:
            return adam_lerp_dispatch<AdamDecay::kNone>(r, copy, c, path);
        case AdamDecay::kDecoupled:
            return adam_lerp_dispatch<AdamDecay::kDecoupled>(r, copy, c, path);
        case AdamDecay::kL2:
            return adam_lerp_dispatch<AdamDecay::kL2>(r, copy, c, path);
    }
}

}  // namespace zt::optim_detail
