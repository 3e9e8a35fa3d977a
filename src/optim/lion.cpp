#include "optim/lion.h"

#include <algorithm>
#include <cstring>

#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {

// Note [Lion op order]
// lion-pytorch's update_fn on f32 tensors, with Python scalars (double) turned into f32 where a
// tensor op takes them:
//   p = p * f32(1 - lr*wd)                                   (p.mul_, decay segments)
//   c = m * f32(beta1) + f32(1 - beta1) * g                  (mul_, then add(g, alpha=1 - beta1))
//   u = (0 < c) - (c < 0)                                    (sign_: 0 for 0 and NaN, as PyTorch)
//   p = p + f32(-lr) * u                                     (add_(u, alpha=-lr))
//   m = m * f32(beta2) + f32(1 - beta2) * g                  (mul_, then add_(g, alpha=1 - beta2))
// No FMA, one instruction sequence for every element (Note [One compiled update]). A NaN gradient
// leaves p's update 0 (sign of NaN) but makes m NaN, as in PyTorch.

namespace {

using optim_detail::copy_block;
using optim_detail::kBlock;
using optim_detail::KernelPath;
using Copy = optim_detail::CopyKind;

struct LionCoefs {
    float decay_factor;  // 1 - lr*wd
    float beta1;
    float one_minus_beta1;
    float beta2;
    float one_minus_beta2;
    float neg_lr;
};

struct LionRange {
    float* p;
    const float* g;
    float* m;
    void* copy;  // the copy's dtype, or nullptr
    int64_t n;
};

// ---- Portable path: 16-element blocks, a tail in a zero-padded block.

// p, g, m: (nblocks * kBlock,) f32; copy: the same count in the copy's dtype (kCopy).
template <bool kDecay, Copy kCopy>
ZT_OPTIM_KERNEL void lion_blocks(float* __restrict p, const float* __restrict g,
                                 float* __restrict m, void* copy, int64_t nblocks,
                                 const LionCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    const LionCoefs k = c;  // locals, so the compiler keeps them in registers
    for (int64_t b = 0; b < nblocks * kBlock; b += kBlock) {
#pragma omp simd
        for (int j = 0; j < kBlock; ++j) {
            float pi = p[b + j];
            const float gi = g[b + j];
            const float mi = m[b + j];
            if constexpr (kDecay) pi = pi * k.decay_factor;
            const float ci = mi * k.beta1 + k.one_minus_beta1 * gi;
            const float ui = (0.0f < ci ? 1.0f : 0.0f) - (ci < 0.0f ? 1.0f : 0.0f);
            p[b + j] = pi + k.neg_lr * ui;
            m[b + j] = mi * k.beta2 + k.one_minus_beta2 * gi;
        }
        if constexpr (kCopy != Copy::kNone) copy_block<kCopy>(p + b, copy, b, kBlock);
    }
}

template <bool kDecay, Copy kCopy>
void lion_portable(const LionRange& r, const LionCoefs& c) {
    const int64_t full = r.n / kBlock;
    if (full > 0) lion_blocks<kDecay, kCopy>(r.p, r.g, r.m, r.copy, full, c);
    const int64_t off = full * kBlock;
    const int64_t rest = r.n - off;
    if (rest == 0) return;
    alignas(64) float pb[kBlock] = {}, gb[kBlock] = {}, mb[kBlock] = {};
    alignas(64) float cb[kBlock] = {};  // the copy's tail: kBlock elements of at most 4 bytes
    std::copy_n(r.p + off, rest, pb);
    std::copy_n(r.g + off, rest, gb);
    std::copy_n(r.m + off, rest, mb);
    lion_blocks<kDecay, kCopy>(pb, gb, mb, cb, 1, c);
    std::copy_n(pb, rest, r.p + off);
    std::copy_n(mb, rest, r.m + off);
    if constexpr (kCopy != Copy::kNone) {
        const size_t es = optim_detail::copy_elem_bytes<kCopy>();
        std::memcpy(static_cast<char*>(r.copy) + off * es, cb, rest * es);
    }
}

#ifdef ZT_OPTIM_AVX512
// ---- AVX-512 path: 16 lanes a step, the tail under a lane mask; the portable path's IEEE ops in
// its order, no FMA. The sign is two ordered compares (false for NaN) selecting 1 or 0.

template <bool kDecay, Copy kCopy>
ZT_OPTIM_KERNEL void lion_avx512(const LionRange& r, const LionCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    float* __restrict p = r.p;
    const float* __restrict g = r.g;
    float* __restrict m = r.m;
    void* const copy = r.copy;  // a local: the stores through p, m cannot change it
    const int64_t n = r.n;
    const __m512 decay_factor = _mm512_set1_ps(c.decay_factor);
    const __m512 beta1 = _mm512_set1_ps(c.beta1);
    const __m512 one_minus_beta1 = _mm512_set1_ps(c.one_minus_beta1);
    const __m512 beta2 = _mm512_set1_ps(c.beta2);
    const __m512 one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2);
    const __m512 neg_lr = _mm512_set1_ps(c.neg_lr);
    const __m512 zero = _mm512_setzero_ps();
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const bool whole = n - i >= 16;  // every iteration but a tail's
        const __mmask16 k = whole ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
        __m512 pi = whole ? _mm512_loadu_ps(p + i) : _mm512_maskz_loadu_ps(k, p + i);
        const __m512 gi = whole ? _mm512_loadu_ps(g + i) : _mm512_maskz_loadu_ps(k, g + i);
        const __m512 mi = whole ? _mm512_loadu_ps(m + i) : _mm512_maskz_loadu_ps(k, m + i);
        if constexpr (kDecay) pi = _mm512_mul_ps(pi, decay_factor);
        const __m512 ci =
            _mm512_add_ps(_mm512_mul_ps(mi, beta1), _mm512_mul_ps(one_minus_beta1, gi));
        const __m512 ui =
            _mm512_sub_ps(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(zero, ci, _CMP_LT_OQ), one),
                          _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(ci, zero, _CMP_LT_OQ), one));
        const __m512 pn = _mm512_add_ps(pi, _mm512_mul_ps(neg_lr, ui));
        const __m512 mn =
            _mm512_add_ps(_mm512_mul_ps(mi, beta2), _mm512_mul_ps(one_minus_beta2, gi));
        if (whole) {
            _mm512_storeu_ps(m + i, mn);
            _mm512_storeu_ps(p + i, pn);
        } else {
            _mm512_mask_storeu_ps(m + i, k, mn);
            _mm512_mask_storeu_ps(p + i, k, pn);
        }
        optim_detail::avx512_store_copy<kCopy>(copy, i, pn, whole, k);
    }
}
#endif  // ZT_OPTIM_AVX512

template <bool kDecay, Copy kCopy>
void lion_path(const LionRange& r, const LionCoefs& c, KernelPath path) {
#ifdef ZT_OPTIM_AVX512
    if (path == KernelPath::kBest) return lion_avx512<kDecay, kCopy>(r, c);
#endif
    (void)path;
    lion_portable<kDecay, kCopy>(r, c);
}

template <bool kDecay>
void lion_copy_dispatch(const LionRange& r, Copy copy, const LionCoefs& c, KernelPath path) {
    switch (copy) {
        case Copy::kNone:
            return lion_path<kDecay, Copy::kNone>(r, c, path);
        case Copy::kF32:
            return lion_path<kDecay, Copy::kF32>(r, c, path);
        case Copy::kBF16:
            return lion_path<kDecay, Copy::kBF16>(r, c, path);
        case Copy::kF16:
            return lion_path<kDecay, Copy::kF16>(r, c, path);
    }
}

}  // namespace

Lion::Lion(const LionOptions& options) : options_(options) {
    const LionOptions& o = options_;
    ZT_CHECK(o.beta1 >= 0.0 && o.beta1 <= 1.0,
             "optimizer.params.betas[0]: expected a value in [0, 1], got ", o.beta1);
    ZT_CHECK(o.beta2 >= 0.0 && o.beta2 <= 1.0,
             "optimizer.params.betas[1]: expected a value in [0, 1], got ", o.beta2);
    ZT_CHECK(o.weight_decay >= 0.0, "optimizer.params.weight_decay: expected a value >= 0, got ",
             o.weight_decay);
}

void lion_step(const LionOptions& options, float* params, const float* grads, float* exp_avg,
               int64_t numel, std::span<const OptimSegment> segments, float lr, int64_t step,
               const ComputeCopy& copy, KernelPath path) {
    ZT_ASSERT(step >= 1, "Lion steps count from 1, got ", step);
    optim_detail::check_segments(segments, numel);
    const LionOptions& o = options;
    const LionCoefs c{static_cast<float>(1.0 - static_cast<double>(lr) * o.weight_decay),
                      static_cast<float>(o.beta1),
                      static_cast<float>(1.0 - o.beta1),
                      static_cast<float>(o.beta2),
                      static_cast<float>(1.0 - o.beta2),
                      static_cast<float>(-static_cast<double>(lr))};
    const bool any_decay = o.weight_decay != 0.0;
    const Copy copy_as = optim_detail::copy_kind(copy.data, copy.dtype);
    char* copy_base = static_cast<char*>(copy.data);
    const size_t copy_es = dtype_size(copy.dtype);
#pragma omp parallel if (numel >= parallel_min_elems(optim_detail::kParallelMinNumel))
    optim_detail::for_each_share_part(segments, numel, [&](int64_t b, int64_t e, bool decay) {
        const LionRange r{params + b, grads + b, exp_avg + b,
                          copy_base ? copy_base + b * copy_es : nullptr, e - b};
        if (r.n <= 0) return;
        if (decay && any_decay)
            lion_copy_dispatch<true>(r, copy_as, c, path);
        else
            lion_copy_dispatch<false>(r, copy_as, c, path);
    });
}

void Lion::step_on(float* params, const float* grads, float* const* state, int64_t numel,
                   std::span<const OptimSegment> segments, float lr, int64_t step,
                   const ComputeCopy& copy) const {
    lion_step(options_, params, grads, state[0], numel, segments, lr, step, copy,
              KernelPath::kBest);
}

}  // namespace zt
