#include "optim/adagrad.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {

// Note [Adagrad op order]
// PyTorch's _single_tensor_adagrad on dense f32 tensors, with Python scalars (double) turned into
// f32 where a tensor op takes them:
//   clr = lr / (1 + (t - 1) * lr_decay)                      (double; t the step, from 1)
//   g = g + f32(wd) * p                                       (grad.add(p, alpha=wd), decay segs)
//   sum = sum + g * g                                         (addcmul_ value 1: 1*g is exact)
//   std = sqrt(sum) + f32(eps)                                (sqrt, then add_)
//   p = p + (f32(-clr) * g) / std                             (addcdiv_ value -clr)
// No FMA, one instruction sequence for every element (Note [One compiled update]). PyTorch fills
// sum with initial_accumulator_value at construction; here state is zero before the first step
// (Optimizer::state_names), so step 1 reads f32(initial_accumulator_value) in place of the buffer
// and writes the true sum: the same bits from step 1 on.

namespace {

using optim_detail::copy_block;
using optim_detail::kBlock;
using optim_detail::KernelPath;
using Copy = optim_detail::CopyKind;

struct AdagradCoefs {
    float l2;    // wd
    float init;  // initial_accumulator_value, read in place of sum on step 1
    float eps;
    float neg_clr;  // -lr / (1 + (t - 1) * lr_decay)
};

struct AdagradRange {
    float* p;
    const float* g;
    float* sum;
    void* copy;  // the copy's dtype, or nullptr
    int64_t n;
};

// ---- Portable path: 16-element blocks, a tail in a zero-padded block.

// p, g, s: (nblocks * kBlock,) f32; copy: the same count in the copy's dtype (kCopy).
template <bool kL2, bool kFromInit, Copy kCopy>
ZT_OPTIM_KERNEL void adagrad_blocks(float* __restrict p, const float* __restrict g,
                                    float* __restrict s, void* copy, int64_t nblocks,
                                    const AdagradCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    const AdagradCoefs k = c;  // locals, so the compiler keeps them in registers
    for (int64_t b = 0; b < nblocks * kBlock; b += kBlock) {
#pragma omp simd
        for (int j = 0; j < kBlock; ++j) {
            const float pi = p[b + j];
            float gi = g[b + j];
            if constexpr (kL2) gi = gi + k.l2 * pi;
            const float sn = (kFromInit ? k.init : s[b + j]) + gi * gi;
            const float denom = std::sqrt(sn) + k.eps;
            s[b + j] = sn;
            p[b + j] = pi + (k.neg_clr * gi) / denom;
        }
        if constexpr (kCopy != Copy::kNone) copy_block<kCopy>(p + b, copy, b, kBlock);
    }
}

template <bool kL2, bool kFromInit, Copy kCopy>
void adagrad_portable(const AdagradRange& r, const AdagradCoefs& c) {
    const int64_t full = r.n / kBlock;
    if (full > 0) adagrad_blocks<kL2, kFromInit, kCopy>(r.p, r.g, r.sum, r.copy, full, c);
    const int64_t off = full * kBlock;
    const int64_t rest = r.n - off;
    if (rest == 0) return;
    alignas(64) float pb[kBlock] = {}, gb[kBlock] = {}, sb[kBlock] = {};
    alignas(64) float cb[kBlock] = {};  // the copy's tail: kBlock elements of at most 4 bytes
    std::copy_n(r.p + off, rest, pb);
    std::copy_n(r.g + off, rest, gb);
    std::copy_n(r.sum + off, rest, sb);
    adagrad_blocks<kL2, kFromInit, kCopy>(pb, gb, sb, cb, 1, c);
    std::copy_n(pb, rest, r.p + off);
    std::copy_n(sb, rest, r.sum + off);
    if constexpr (kCopy != Copy::kNone) {
        const size_t es = optim_detail::copy_elem_bytes<kCopy>();
        std::memcpy(static_cast<char*>(r.copy) + off * es, cb, rest * es);
    }
}

#ifdef ZT_OPTIM_AVX512
// ---- AVX-512 path: 16 lanes a step, the tail under a lane mask; the portable path's IEEE ops in
// its order, no FMA.

template <bool kL2, bool kFromInit, Copy kCopy>
ZT_OPTIM_KERNEL void adagrad_avx512(const AdagradRange& r, const AdagradCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    float* __restrict p = r.p;
    const float* __restrict g = r.g;
    float* __restrict s = r.sum;
    void* const copy = r.copy;  // a local: the stores through p, s cannot change it
    const int64_t n = r.n;
    const __m512 l2 = _mm512_set1_ps(c.l2);
    const __m512 init = _mm512_set1_ps(c.init);
    const __m512 eps = _mm512_set1_ps(c.eps);
    const __m512 neg_clr = _mm512_set1_ps(c.neg_clr);
    for (int64_t i = 0; i < n; i += 16) {
        const bool whole = n - i >= 16;  // every iteration but a tail's
        const __mmask16 k = whole ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
        const __m512 pi = whole ? _mm512_loadu_ps(p + i) : _mm512_maskz_loadu_ps(k, p + i);
        __m512 gi = whole ? _mm512_loadu_ps(g + i) : _mm512_maskz_loadu_ps(k, g + i);
        __m512 si = init;
        if constexpr (!kFromInit)
            si = whole ? _mm512_loadu_ps(s + i) : _mm512_maskz_loadu_ps(k, s + i);
        if constexpr (kL2) gi = _mm512_add_ps(gi, _mm512_mul_ps(l2, pi));
        const __m512 sn = _mm512_add_ps(si, _mm512_mul_ps(gi, gi));
        const __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(sn), eps);
        const __m512 pn = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(neg_clr, gi), denom));
        if (whole) {
            _mm512_storeu_ps(s + i, sn);
            _mm512_storeu_ps(p + i, pn);
        } else {
            _mm512_mask_storeu_ps(s + i, k, sn);
            _mm512_mask_storeu_ps(p + i, k, pn);
        }
        optim_detail::avx512_store_copy<kCopy>(copy, i, pn, whole, k);
    }
}
#endif  // ZT_OPTIM_AVX512

template <bool kL2, bool kFromInit, Copy kCopy>
void adagrad_path(const AdagradRange& r, const AdagradCoefs& c, KernelPath path) {
#ifdef ZT_OPTIM_AVX512
    if (path == KernelPath::kBest) return adagrad_avx512<kL2, kFromInit, kCopy>(r, c);
#endif
    (void)path;
    adagrad_portable<kL2, kFromInit, kCopy>(r, c);
}

template <bool kL2, bool kFromInit>
void adagrad_copy_dispatch(const AdagradRange& r, Copy copy, const AdagradCoefs& c,
                           KernelPath path) {
    switch (copy) {
        case Copy::kNone:
            return adagrad_path<kL2, kFromInit, Copy::kNone>(r, c, path);
        case Copy::kF32:
            return adagrad_path<kL2, kFromInit, Copy::kF32>(r, c, path);
        case Copy::kBF16:
            return adagrad_path<kL2, kFromInit, Copy::kBF16>(r, c, path);
        case Copy::kF16:
            return adagrad_path<kL2, kFromInit, Copy::kF16>(r, c, path);
    }
}

void adagrad_update_range(const AdagradRange& r, bool l2, bool from_init, Copy copy,
                          const AdagradCoefs& c, KernelPath path) {
    if (r.n <= 0) return;
    if (l2 && from_init) return adagrad_copy_dispatch<true, true>(r, copy, c, path);
    if (l2) return adagrad_copy_dispatch<true, false>(r, copy, c, path);
    if (from_init) return adagrad_copy_dispatch<false, true>(r, copy, c, path);
    adagrad_copy_dispatch<false, false>(r, copy, c, path);
}

}  // namespace

Adagrad::Adagrad(const AdagradOptions& options) : options_(options) {
    const AdagradOptions& o = options_;
    ZT_CHECK(o.lr_decay >= 0.0, "optimizer.params.lr_decay: expected a value >= 0, got ",
             o.lr_decay);
    ZT_CHECK(o.weight_decay >= 0.0, "optimizer.params.weight_decay: expected a value >= 0, got ",
             o.weight_decay);
    ZT_CHECK(o.initial_accumulator_value >= 0.0,
             "optimizer.params.initial_accumulator_value: expected a value >= 0, got ",
             o.initial_accumulator_value);
    ZT_CHECK(o.eps >= 0.0, "optimizer.params.eps: expected a value >= 0, got ", o.eps);
}

void adagrad_step(const AdagradOptions& options, float* params, const float* grads, float* sum,
                  int64_t numel, std::span<const OptimSegment> segments, float lr, int64_t step,
                  const ComputeCopy& copy, KernelPath path) {
    ZT_ASSERT(step >= 1, "Adagrad steps count from 1, got ", step);
    optim_detail::check_segments(segments, numel);
    const AdagradOptions& o = options;
    const double clr = static_cast<double>(lr) / (1.0 + static_cast<double>(step - 1) * o.lr_decay);
    const AdagradCoefs c{static_cast<float>(o.weight_decay),
                         static_cast<float>(o.initial_accumulator_value), static_cast<float>(o.eps),
                         static_cast<float>(-clr)};
    const bool any_decay = o.weight_decay != 0.0;
    const bool from_init = step == 1 && o.initial_accumulator_value != 0.0;
    const Copy copy_as = optim_detail::copy_kind(copy.data, copy.dtype);
    char* copy_base = static_cast<char*>(copy.data);
    const size_t copy_es = dtype_size(copy.dtype);
#pragma omp parallel if (numel >= parallel_min_elems(optim_detail::kParallelMinNumel))
    optim_detail::for_each_share_part(segments, numel, [&](int64_t b, int64_t e, bool decay) {
        const AdagradRange r{params + b, grads + b, sum + b,
                             copy_base ? copy_base + b * copy_es : nullptr, e - b};
        adagrad_update_range(r, decay && any_decay, from_init, copy_as, c, path);
    });
}

void Adagrad::step_on(float* params, const float* grads, float* const* state, int64_t numel,
                      std::span<const OptimSegment> segments, float lr, int64_t step,
                      const ComputeCopy& copy) const {
    adagrad_step(options_, params, grads, state[0], numel, segments, lr, step, copy,
                 KernelPath::kBest);
}

}  // namespace zt
