#include "optim/adam_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optim/segment_partition.h"
#include "util/error.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12's intrinsic headers trip -Wuninitialized (GCC bug 105593; see tensor/kernels/vec16.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define ZT_ADAM_AVX512 1
#endif

namespace zt::optim_detail {

// Note [Fused compute copy]
// The copy is the updated p converted as f32_to_bf16 / f32_to_f16 convert it (round to nearest
// even; a NaN becomes bf16 (bits >> 16) | 0x40, f16 sign | 0x7e00), so a step that writes it gives
// the bits that a convert() of the master weights after the step would (up to f16 NaN payloads,
// which convert()'s vector body keeps). AVX-512: bf16 by integer rounding, not VCVTNEPS2BF16,
// which flushes f32 denormals to zero; f16 by VCVTPS2PH, exact under nearest even, with the NaN
// lanes replaced.

namespace {

enum class Copy : uint8_t { kNone, kF32, kBF16, kF16 };

// ---- Portable path: 16-element blocks, a tail in a zero-padded block (Note [One compiled
// update]).

template <Copy kCopy>
void copy_block(const float* p, void* copy, int64_t at, int64_t n) {
    if constexpr (kCopy == Copy::kF32) std::copy_n(p, n, static_cast<float*>(copy) + at);
    if constexpr (kCopy == Copy::kBF16)
        for (int64_t j = 0; j < n; ++j) static_cast<bf16*>(copy)[at + j] = f32_to_bf16(p[j]);
    if constexpr (kCopy == Copy::kF16)
        for (int64_t j = 0; j < n; ++j) static_cast<f16*>(copy)[at + j] = f32_to_f16(p[j]);
}

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

#ifdef ZT_ADAM_AVX512
// ---- AVX-512 path: 16 lanes a step, the tail under a lane mask; the same instructions (IEEE
// add, mul, div, sqrt in the order of the portable path, no FMA) for every lane.

#define ZT_ADAM_INLINE __attribute__((always_inline)) inline

ZT_ADAM_INLINE __m256i adam_to_bf16(__m512 x) {  // f32_to_bf16, lane by lane
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

ZT_ADAM_INLINE __m256i adam_to_f16(__m512 x) {  // f32_to_f16, lane by lane
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 16), _mm512_set1_epi32(0x8000));
    const __m256i qnan = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
    return _mm256_mask_mov_epi16(h, nan, qnan);
}

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
        if constexpr (kCopy == Copy::kF32) {
            float* cp = static_cast<float*>(copy) + i;
            if (whole)
                _mm512_storeu_ps(cp, pn);
            else
                _mm512_mask_storeu_ps(cp, k, pn);
        }
        if constexpr (kCopy == Copy::kBF16 || kCopy == Copy::kF16) {
            uint16_t* cp = static_cast<uint16_t*>(copy) + i;
            const __m256i h = kCopy == Copy::kBF16 ? adam_to_bf16(pn) : adam_to_f16(pn);
            if (whole)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(cp), h);
            else
                _mm256_mask_storeu_epi16(cp, k, h);
        }
    }
}
#endif  // ZT_ADAM_AVX512

template <AdamDecay kDecay, bool kLerpFromM, Copy kCopy>
void adam_path(const AdamRange& r, const AdamCoefs& c, KernelPath path) {
#ifdef ZT_ADAM_AVX512
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

Copy copy_kind(const void* copy, DType dtype) {
    if (copy == nullptr) return Copy::kNone;
    switch (dtype) {
        case DType::kF32:
            return Copy::kF32;
        case DType::kBF16:
            return Copy::kBF16;
        case DType::kF16:
            return Copy::kF16;
    }
    ZT_ASSERT(false, "adam: unknown compute copy dtype");
    return Copy::kNone;
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

bool adam_has_avx512_path() {
#ifdef ZT_ADAM_AVX512
    return true;
#else
    return false;
#endif
}

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
