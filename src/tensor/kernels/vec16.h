// Internal 16-lane f32 vector for the CPU kernels (not a public header: only kernels/*.cpp use it).
// AVX-512 where the compiler targets it, two AVX2 halves where that is the widest (vec16_avx2.h),
// a plain array elsewhere, so kernels are written once.
// Loads and stores convert the storage type (float, bf16, f16); a bf16 store rounds to nearest even
// like f32_to_bf16 (Note [bf16 store] for the one difference), an f16 store like f32_to_f16 (F16C,
// round to nearest even, overflow to infinity; a NaN stays NaN but may keep payload bits). `n`
// arguments count valid lanes from the pointer: n >= 16 is a full vector, n <= 0 an empty one
// (masked, never touches memory).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/dtype.h"
#include "tensor/threads.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12 reports its own _mm512_undefined_ps() placeholders as uninitialized once the intrinsics
// are inlined (GCC bug 105593); the state is looked up at the header's lines, so this silences
// only that header (when it is first included here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define ZT_VEC16_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ZT_VEC16_AVX2 1  // two 256-bit halves (vec16_avx2.h)
#endif

namespace zt::kernels::vec {

constexpr int64_t kLanes = 16;
// Note [vec16 exp]'s polynomial for e^r, highest degree first (Cephes expf coefficients); every
// path's exp evaluates it in this order.
constexpr float kExpPoly[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                              4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

#ifdef ZT_VEC16_AVX512

struct V16 {
    __m512 v;
};

inline __mmask16 lane_mask(int64_t n) {
    return n >= kLanes ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

inline V16 splat(float x) { return {_mm512_set1_ps(x)}; }
inline V16 operator+(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V16 operator-(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V16 operator*(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V16 operator/(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a * b + c
// NaN in b propagates (max/min return their second operand when either is NaN).
inline V16 max(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline V16 min(V16 a, V16 b) { return {_mm512_min_ps(a.v, b.v)}; }
// Selects (no arithmetic, so the kept lanes are a's bits): a where c > 0, else +0 (NaN c gives 0);
// and a unless c <= 0, else +0 (NaN c keeps a).
inline V16 where_positive(V16 c, V16 a) {
    return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c.v, _mm512_setzero_ps(), _CMP_GT_OQ), a.v)};
}
inline V16 unless_nonpositive(V16 c, V16 a) {
    return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c.v, _mm512_setzero_ps(), _CMP_NLE_UQ), a.v)};
}
inline float hsum(V16 a) { return _mm512_reduce_add_ps(a.v); }  // fixed shuffle tree
inline float hmax(V16 a) { return _mm512_reduce_max_ps(a.v); }

inline __m512 widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#ifdef __AVX512BF16__
// Note [bf16 store]: VCVTNEPS2BF16 rounds to nearest even and quiets NaN like f32_to_bf16, one
// instruction instead of nine; unlike it, it flushes f32 denormal inputs (|x| < 1.2e-38) to zero.
inline __m256i narrow_bf16(__m512 x) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)); }
#else
inline __m256i narrow_bf16(__m512 x) {  // round to nearest even; NaN stays a quiet NaN
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}
#endif

// f16 <-> f32 with VCVTPH2PS / VCVTPS2PH (AVX-512F); exact for every f16 and, with nearest-even
// rounding, the same bits as f32_to_f16 except for NaN payloads.
inline __m512 widen_f16(__m256i h) { return _mm512_cvtph_ps(h); }
inline __m256i narrow_f16(__m512 x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

inline V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 load(const f16* p) {
    return {widen_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline V16 load(const bf16* p) {
    return {widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
// Partial loads and stores take the plain instruction for a full vector: a masked 16-bit store
// measured 1.7x slower than a plain one on AMD Zen 4, and the branch is predictable in a row.
inline V16 load_part(const float* p, int64_t n, float fill = 0.0f) {
    if (n >= kLanes) return load(p);
    return {_mm512_mask_loadu_ps(_mm512_set1_ps(fill), lane_mask(n), p)};
}
inline V16 load_part(const bf16* p, int64_t n, float fill = 0.0f) {
    if (n >= kLanes) return load(p);
    __mmask16 m = lane_mask(n);
    __m512 x = widen_bf16(_mm256_maskz_loadu_epi16(m, p));
    return {_mm512_mask_blend_ps(m, _mm512_set1_ps(fill), x)};
}
inline V16 load_part(const f16* p, int64_t n, float fill = 0.0f) {
    if (n >= kLanes) return load(p);
    __mmask16 m = lane_mask(n);
    __m512 x = widen_f16(_mm256_maskz_loadu_epi16(m, p));
    return {_mm512_mask_blend_ps(m, _mm512_set1_ps(fill), x)};
}
inline void store(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
inline void store(f16* p, V16 a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_f16(a.v));
}
inline void store_part(f16* p, V16 a, int64_t n) {
    if (n >= kLanes) return store(p, a);
    _mm256_mask_storeu_epi16(p, lane_mask(n), narrow_f16(a.v));
}
inline void store(bf16* p, V16 a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_bf16(a.v));
}
inline void store_part(float* p, V16 a, int64_t n) {
    if (n >= kLanes) return store(p, a);
    _mm512_mask_storeu_ps(p, lane_mask(n), a.v);
}
inline void store_part(bf16* p, V16 a, int64_t n) {
    if (n >= kLanes) return store(p, a);
    _mm256_mask_storeu_epi16(p, lane_mask(n), narrow_bf16(a.v));
}

// Note [vec16 exp]: exp(x) = 2^k * e^r with k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2]
// (ln 2 split in two so k ln 2 is exact), e^r from a degree-7 polynomial (Cephes expf
// coefficients), 2^k applied with scalef. About 2 ulp over the normal range; inputs are
// clamped to [-115, 89] so -inf gives exactly 0, +inf gives inf, NaN stays NaN.
inline V16 exp(V16 x) {
    __m512 t = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-115.0f), x.v));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), t);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(kExpPoly[0]);
#pragma GCC unroll 6
    for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return {_mm512_scalef_ps(p, k)};
}

#elif defined(ZT_VEC16_AVX2)
}  // namespace zt::kernels::vec
#include "tensor/kernels/vec16_avx2.h"
namespace zt::kernels::vec {

#else  // portable fallback: same interface, plain loops

struct V16 {
    float v[kLanes];
};

template <typename F>
inline V16 map2(V16 a, V16 b, F f) {
    V16 r;
    for (int64_t i = 0; i < kLanes; ++i) r.v[i] = f(a.v[i], b.v[i]);
    return r;
}
inline V16 splat(float x) {
    V16 r;
    for (float& e : r.v) e = x;
    return r;
}
inline V16 operator+(V16 a, V16 b) {
    return map2(a, b, [](float x, float y) { return x + y; });
}
inline V16 operator-(V16 a, V16 b) {
    return map2(a, b, [](float x, float y) { return x - y; });
}
inline V16 operator*(V16 a, V16 b) {
    return map2(a, b, [](float x, float y) { return x * y; });
}
inline V16 operator/(V16 a, V16 b) {
    return map2(a, b, [](float x, float y) { return x / y; });
}
inline V16 fma(V16 a, V16 b, V16 c) { return a * b + c; }
inline V16 max(V16 a, V16 b) {
    return map2(a, b, [](float x, float y) { return x > y ? x : y; });
}
inline V16 min(V16 a, V16 b) {
    return map2(a, b, [](float x, float y) { return x < y ? x : y; });
}
inline V16 where_positive(V16 c, V16 a) {
    return map2(c, a, [](float x, float y) { return x > 0.0f ? y : 0.0f; });
}
inline V16 unless_nonpositive(V16 c, V16 a) {
    return map2(c, a, [](float x, float y) { return x <= 0.0f ? 0.0f : y; });
}
inline float hsum(V16 a) {
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
        for (int64_t i = 0; i < w; ++i) a.v[i] += a.v[i + w];
    return a.v[0];
}
inline float hmax(V16 a) {
    float m = a.v[0];
    for (float e : a.v) m = e > m ? e : m;
    return m;
}
template <typename T>
inline V16 load_part(const T* p, int64_t n, float fill = 0.0f) {
    V16 r;
    for (int64_t i = 0; i < kLanes; ++i) r.v[i] = i < n ? to_f32(p[i]) : fill;
    return r;
}
template <typename T>
inline V16 load(const T* p) {
    return load_part(p, kLanes);
}
template <typename T>
inline void store_part(T* p, V16 a, int64_t n) {
    for (int64_t i = 0; i < kLanes && i < n; ++i) p[i] = from_f32<T>(a.v[i]);
}
template <typename T>
inline void store(T* p, V16 a) {
    store_part(p, a, kLanes);
}
inline V16 exp(V16 a) {
    for (float& e : a.v) e = std::exp(e);
    return a;
}

#endif

inline V16 zero() { return splat(0.0f); }
inline V16 neg_inf() { return splat(-std::numeric_limits<float>::infinity()); }

// f(j, n) for each vector of a row of length C: full ones with n = kLanes, a constant once f is
// inlined, so the masked path compiles away; then the partial tail, if any.
template <typename F>
inline void for_each_vec(int64_t C, F f) {
    int64_t j = 0;
    for (; j + kLanes <= C; j += kLanes) f(j, kLanes);
    if (j < C) f(j, C - j);
}

// f(i, m) for each vector [i, i + m) of [0, n), in blocks of kElemBlock elements run in parallel
// (static schedule) when n >= parallel_min. Shared by the flat elementwise kernels.
constexpr int64_t kElemBlock = 4096;  // elements per parallel work item
template <typename F>
inline void for_each_block(int64_t n, [[maybe_unused]] int64_t parallel_min,
                           F f) {  // unused without OpenMP
    const int64_t blocks = (n + kElemBlock - 1) / kElemBlock;
#pragma omp parallel for schedule(static) if (n >= parallel_min_elems(parallel_min))
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kElemBlock;
        const int64_t len = n - begin < kElemBlock ? n - begin : kElemBlock;
        for_each_vec(len, [&](int64_t j, int64_t m) { f(begin + j, m); });
    }
}

// Reduction over a row: acc = f(acc, j, n) for each vector, in four interleaved accumulators (one
// chain would be bound by the add latency), merged in a fixed order. A is V16 or a struct of them.
template <typename A, typename F, typename Merge>
inline A reduce_row(int64_t C, A init, F f, Merge merge) {
    A a0 = init, a1 = init, a2 = init, a3 = init;
    int64_t j = 0;
    for (; j + 4 * kLanes <= C; j += 4 * kLanes) {
        a0 = f(a0, j, kLanes);
        a1 = f(a1, j + kLanes, kLanes);
        a2 = f(a2, j + 2 * kLanes, kLanes);
        a3 = f(a3, j + 3 * kLanes, kLanes);
    }
    for (; j + kLanes <= C; j += kLanes) a0 = f(a0, j, kLanes);
    if (j < C) a0 = f(a0, j, C - j);
    return merge(merge(a0, a1), merge(a2, a3));
}

template <typename F>
inline float sum_row(int64_t C, F f) {
    return hsum(reduce_row(C, zero(), f, [](V16 a, V16 b) { return a + b; }));
}

}  // namespace zt::kernels::vec
