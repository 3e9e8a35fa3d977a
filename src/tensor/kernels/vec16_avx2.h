// vec16.h's V16 on AVX2 + FMA + F16C CPUs without AVX-512 (AMD Zen 2/3, Intel Haswell to Alder
// Lake): two 256-bit halves, lanes 0-7 in lo and 8-15 in hi. Included by vec16.h only; the
// interface and the rounding are vec16.h's: bf16 stores round to nearest even like f32_to_bf16
// (NaN quieted, denormals kept), f16 stores like VCVTPS2PH, hsum adds in the same tree as
// _mm512_reduce_add_ps (halves, then quarters, ...), so both paths give a row sum the same bits.
// Partial loads and stores go through a 16-element stack copy: AVX2 has no 16-bit masked moves.
#pragma once

#include <immintrin.h>

#include <cstring>

namespace zt::kernels::vec {

struct V16 {
    __m256 lo, hi;
};

inline V16 splat(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline V16 operator+(V16 a, V16 b) {
    return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}
inline V16 operator-(V16 a, V16 b) {
    return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
}
inline V16 operator*(V16 a, V16 b) {
    return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
}
inline V16 operator/(V16 a, V16 b) {
    return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)};
}
inline V16 fma(V16 a, V16 b, V16 c) {  // a * b + c, one rounding
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
// NaN in b propagates (max/min return their second operand when either is NaN), as with AVX-512.
inline V16 max(V16 a, V16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline V16 min(V16 a, V16 b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
// The selects of vec16.h: a where c > 0 (NaN c gives 0); a unless c <= 0 (NaN c keeps a).
inline V16 where_positive(V16 c, V16 a) {
    const __m256 z = _mm256_setzero_ps();
    return {_mm256_and_ps(_mm256_cmp_ps(c.lo, z, _CMP_GT_OQ), a.lo),
            _mm256_and_ps(_mm256_cmp_ps(c.hi, z, _CMP_GT_OQ), a.hi)};
}
inline V16 unless_nonpositive(V16 c, V16 a) {
    const __m256 z = _mm256_setzero_ps();
    return {_mm256_and_ps(_mm256_cmp_ps(c.lo, z, _CMP_NLE_UQ), a.lo),
            _mm256_and_ps(_mm256_cmp_ps(c.hi, z, _CMP_NLE_UQ), a.hi)};
}

// The last three steps of the tree on 8 lanes: lane i += lane i + 4, then + 2, then + 1.
inline float hsum8(__m256 s) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
inline float hsum(V16 a) { return hsum8(_mm256_add_ps(a.lo, a.hi)); }
inline float hmax(V16 a) {
    __m256 s = _mm256_max_ps(a.lo, a.hi);
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

inline __m256 widen_bf16(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// 8 lanes to bf16 bits (in 32-bit lanes): round to nearest even; NaN stays a quiet NaN.
inline __m256i round_bf16(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(quiet), nan));
}
// 16 lanes to 16 bf16 values; packus interleaves 128-bit lanes, the permute restores the order.
inline __m256i narrow_bf16(V16 x) {
    const __m256i p = _mm256_packus_epi32(round_bf16(x.lo), round_bf16(x.hi));
    return _mm256_permute4x64_epi64(p, 0xd8);
}
inline __m256i narrow_f16(V16 x) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm256_set_m128i(_mm256_cvtps_ph(x.hi, kRound), _mm256_cvtps_ph(x.lo, kRound));
}

inline V16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V16 load(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {widen_bf16(_mm256_castsi256_si128(h)), widen_bf16(_mm256_extracti128_si256(h, 1))};
}
inline V16 load(const f16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
            _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
inline void store(float* p, V16 a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
inline void store(bf16* p, V16 a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_bf16(a));
}
inline void store(f16* p, V16 a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_f16(a));
}

// Partial vectors: the n valid elements are copied through a full-width buffer, so nothing past
// p + n is read or written; the other lanes hold `fill`.
template <typename T>
inline V16 load_part(const T* p, int64_t n, float fill = 0.0f) {
    if (n >= kLanes) return load(p);
    alignas(32) float buf[kLanes];
    for (int64_t i = 0; i < kLanes; ++i) buf[i] = i < n ? to_f32(p[i]) : fill;
    return load(static_cast<const float*>(buf));
}
template <typename T>
inline void store_part(T* p, V16 a, int64_t n) {
    if (n >= kLanes) return store(p, a);
    if (n <= 0) return;
    T buf[kLanes];
    store(buf, a);
    std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(T));
}

// vec16.h's Note [vec16 exp] on 8 lanes. AVX2 has no scalef: 2^k is applied as two exact powers
// of two, 2^(k/2) and 2^(k - k/2), each a normal float for the clamped range (|k| <= 166), so
// overflow to infinity and underflow to 0 come out as with scalef.
inline __m256 exp8(__m256 x) {
    const __m256 t =
        _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-115.0f), x));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), t);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(kExpPoly[0]);
#pragma GCC unroll 6
    for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ki = _mm256_cvtps_epi32(k);  // NaN gives INT_MIN; p is NaN then anyway
    const __m256i k1 = _mm256_srai_epi32(ki, 1);
    const __m256i k2 = _mm256_sub_epi32(ki, k1);
    auto pow2 = [](__m256i e) {  // 2^e for -126 <= e <= 127
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
    };
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2(k1)), pow2(k2));
}
inline V16 exp(V16 x) { return {exp8(x.lo), exp8(x.hi)}; }

}  // namespace zt::kernels::vec
