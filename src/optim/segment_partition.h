// Internal to optim: splits an optimizer's flat range into static per-thread shares and walks the
// segments that fall into the calling thread's share. Elementwise updates computed this way give
// the same bits for any thread count, since no element's result depends on who computes it. Also
// what the fused kernels (adam_kernel.cpp, adagrad.cpp, lion.cpp) share: the no-contraction
// markers, the kernel path, and the compute-copy conversions (Note [Fused compute copy]).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <span>

#include "optim/optimizer.h"
#include "tensor/dtype.h"
#include "util/error.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12's intrinsic headers trip -Wuninitialized (GCC bug 105593; see tensor/kernels/vec16.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define ZT_OPTIM_AVX512 1
#endif

namespace zt::optim_detail {

constexpr int64_t kParallelMinNumel = 1 << 15;  // elements; below this one thread is faster
constexpr int64_t kShareGrain = 16;             // elements; one 64-byte cache line of f32
constexpr int kBlock = 16;                      // elements per kernel block; one AVX-512 vector

// Note [One compiled update]
// GCC fuses a*b + c into an FMA by default (even with -std=c++20), and may fuse differently in
// a loop's vector body and its scalar remainder; which elements land in a remainder depends on
// the thread shares, so the bits could depend on the thread count. Kernels therefore run every
// element through one compiled instance: a non-inlined function over whole blocks of kBlock
// elements (a remainder goes through it in a zero-padded block), compiled without contraction so
// the ops round one by one in the order written, like PyTorch's scalar code.
// ZT_OPTIM_KERNEL goes before such a function, ZT_OPTIM_NO_CONTRACT first in its body.
#if defined(__clang__)
#define ZT_OPTIM_KERNEL __attribute__((noinline))
#define ZT_OPTIM_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define ZT_OPTIM_KERNEL __attribute__((noinline, optimize("fp-contract=off")))
#define ZT_OPTIM_NO_CONTRACT
#endif

inline void check_segments(std::span<const OptimSegment> segments, int64_t numel) {
    for (const OptimSegment& s : segments)
        ZT_ASSERT(s.offset >= 0 && s.numel >= 0 && s.offset + s.numel <= numel, "segment (",
                  s.offset, ", ", s.numel, ") outside the optimizer range of ", numel, " elements");
}

// Calls fn(begin, end, decay) for each part of a segment inside this thread's share of
// [0, numel). Call from inside an OpenMP parallel region (or outside one: one share, all of it).
template <typename Fn>
void for_each_share_part(std::span<const OptimSegment> segments, int64_t numel, Fn&& fn) {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t grains = (numel + kShareGrain - 1) / kShareGrain;
    const int64_t lo = std::min(numel, grains * t / nt * kShareGrain);
    const int64_t hi = std::min(numel, grains * (t + 1) / nt * kShareGrain);
    for (const OptimSegment& s : segments) {
        const int64_t b = std::max(s.offset, lo);
        const int64_t e = std::min(s.offset + s.numel, hi);
        if (b < e) fn(b, e, s.decay);
    }
}

// Writes params [b, e) into the compute copy (when there is one) with convert(): for an optimizer
// whose kernel does not fuse the copy (Sgd), a second pass over the part it just updated.
inline void write_compute_copy(const float* params, const ComputeCopy& copy, int64_t b, int64_t e) {
    if (copy.data == nullptr || b >= e) return;
    char* dst = static_cast<char*>(copy.data) + b * static_cast<int64_t>(dtype_size(copy.dtype));
    convert(params + b, DType::kF32, dst, copy.dtype, static_cast<size_t>(e - b));
}

enum class KernelPath : uint8_t {
    kBest,      // AVX-512 where compiled, else portable
    kPortable,  // 16-element blocks in plain C++ (for tests of the portable path anywhere)
};

constexpr bool kHasAvx512Path =
#ifdef ZT_OPTIM_AVX512
    true;
#else
    false;
#endif

// Note [Fused compute copy]
// The copy is the updated p converted as f32_to_bf16 / f32_to_f16 convert it (round to nearest
// even; a NaN becomes bf16 (bits >> 16) | 0x40, f16 sign | 0x7e00), so a step that writes it gives
// the bits that a convert() of the master weights after the step would (up to f16 NaN payloads,
// which convert()'s vector body keeps). AVX-512: bf16 by integer rounding, not VCVTNEPS2BF16,
// which flushes f32 denormals to zero; f16 by VCVTPS2PH, exact under nearest even, with the NaN
// lanes replaced.

enum class CopyKind : uint8_t { kNone, kF32, kBF16, kF16 };

inline CopyKind copy_kind(const void* copy, DType dtype) {
    if (copy == nullptr) return CopyKind::kNone;
    switch (dtype) {
        case DType::kF32:
            return CopyKind::kF32;
        case DType::kBF16:
            return CopyKind::kBF16;
        case DType::kF16:
            return CopyKind::kF16;
    }
    ZT_ASSERT(false, "optim: unknown compute copy dtype");
    return CopyKind::kNone;
}

// Portable path: p (n,) converted into copy[at, at + n).
template <CopyKind kCopy>
void copy_block(const float* p, void* copy, int64_t at, int64_t n) {
    if constexpr (kCopy == CopyKind::kF32) std::copy_n(p, n, static_cast<float*>(copy) + at);
    if constexpr (kCopy == CopyKind::kBF16)
        for (int64_t j = 0; j < n; ++j) static_cast<bf16*>(copy)[at + j] = f32_to_bf16(p[j]);
    if constexpr (kCopy == CopyKind::kF16)
        for (int64_t j = 0; j < n; ++j) static_cast<f16*>(copy)[at + j] = f32_to_f16(p[j]);
}

// Bytes of one copy element (the portable tails' scratch copy).
template <CopyKind kCopy>
constexpr size_t copy_elem_bytes() {
    return kCopy == CopyKind::kF32 ? 4 : 2;
}

#ifdef ZT_OPTIM_AVX512
#define ZT_OPTIM_INLINE __attribute__((always_inline)) inline

ZT_OPTIM_INLINE __m256i avx512_to_bf16(__m512 x) {  // f32_to_bf16, lane by lane
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

ZT_OPTIM_INLINE __m256i avx512_to_f16(__m512 x) {  // f32_to_f16, lane by lane
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i sign =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 16), _mm512_set1_epi32(0x8000));
    const __m256i qnan = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
    return _mm256_mask_mov_epi16(h, nan, qnan);
}

// Writes lanes k of pn (the 16 elements from copy element i on) into the copy; whole: all 16.
template <CopyKind kCopy>
ZT_OPTIM_INLINE void avx512_store_copy(void* copy, int64_t i, __m512 pn, bool whole, __mmask16 k) {
    if constexpr (kCopy == CopyKind::kF32) {
        float* cp = static_cast<float*>(copy) + i;
        if (whole)
            _mm512_storeu_ps(cp, pn);
        else
            _mm512_mask_storeu_ps(cp, k, pn);
    }
    if constexpr (kCopy == CopyKind::kBF16 || kCopy == CopyKind::kF16) {
        uint16_t* cp = static_cast<uint16_t*>(copy) + i;
        const __m256i h = kCopy == CopyKind::kBF16 ? avx512_to_bf16(pn) : avx512_to_f16(pn);
        if (whole)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(cp), h);
        else
            _mm256_mask_storeu_epi16(cp, k, h);
    }
}
#endif  // ZT_OPTIM_AVX512

}  // namespace zt::optim_detail
