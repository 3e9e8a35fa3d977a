// Internal to the attention kernels (attention.cpp, attention_dot.cpp): the shapes of one head,
// the per-head thread loop, prefetching, 16 x 16 transposes, causal masks and the online softmax
// step that both the f32 and the bf16-dot-product kernels share (Note [Attention tiling]).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tensor/kernels/attention.h"
#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"

namespace zt::kernels::attn {

using vec::kLanes;
using vec::V16;

constexpr int64_t kBlock = 64;  // queries and keys per score tile; a multiple of kLanes
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Which part of a diagonal tile a product needs; row m and column (or k) n share one origin there.
enum class Causal {
    kNone,      // the whole product
    kColsTo,    // scores: only columns n <= m (register tiles wholly right of them are skipped)
    kColsFrom,  // transposed scores: only columns n >= m (tiles wholly left of them are skipped)
    kKLow,      // a(m, k) = 0 for k > m: P V and dS K
    kKHigh,     // a(m, k) = 0 for k < m: P^T dO and dS^T Q
};

// Shapes of one head; `ld` is the row stride of qkv.
struct Dims {
    int64_t B, T, C, H, D, Tp, Dp, nb, ld;
};

inline Dims make_dims(AttentionShape s) {
    const int64_t D = s.C / s.H, Tp = (s.T + kBlock - 1) / kBlock * kBlock;
    return {s.B, s.T, s.C, s.H, D, Tp, (D + kLanes - 1) / kLanes * kLanes, Tp / kBlock, 3 * s.C};
}

inline int threads_for(const Dims& d, int threads) {
    return static_cast<int>(std::clamp<int64_t>(d.B * d.H, 1, std::max(threads, 1)));
}

// Head bh = b H + h of qkv (B, T, 3C): its q; its k and v are C and 2C further.
template <typename T>
T* head_in(T* qkv, const Dims& d, int64_t bh) {
    return qkv + (bh / d.H) * d.T * d.ld + (bh % d.H) * d.D;
}
// Head bh of out or dout (B, T, C).
template <typename T>
T* head_out(T* out, const Dims& d, int64_t bh) {
    return out + (bh / d.H) * d.T * d.C + (bh % d.H) * d.D;
}

// Runs fn(bh, next, slab) over the B H heads; each thread takes a contiguous range, like
// schedule(static), and `next` is its following head (-1 after the last) so it can be prefetched.
template <typename F>
void for_each_head(const Dims& d, void* workspace, int64_t slab_floats, F fn) {
    char* base = static_cast<char*>(workspace);  // aligned to 64 bytes: the workspace has room
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    const int64_t n = d.B * d.H;
#pragma omp parallel num_threads(threads_for(d, num_threads()))
    {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t begin = t * (n / nt) + std::min(t, n % nt);
        const int64_t end = begin + n / nt + (t < n % nt ? 1 : 0);
        float* slab = reinterpret_cast<float*>(base) + t * slab_floats;
        for (int64_t bh = begin; bh < end; ++bh) fn(bh, bh + 1 < end ? bh + 1 : -1, slab);
    }
}

// Asks for rows [0, n) of a D-wide slice, ld elements apart, to be brought into L2 while other
// work runs: the next head's inputs, or rows about to be written. Each row sits in its own pages,
// which the hardware prefetcher does not follow.
template <typename T>
void prefetch_rows(const T* src, int64_t ld, int64_t n, const Dims& d, bool for_write) {
    const int64_t row_bytes = d.D * static_cast<int64_t>(sizeof(T));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t off = 0; off < row_bytes; off += 64) {
            const char* a = reinterpret_cast<const char*>(src + t * ld) + off;
            if (for_write)
                __builtin_prefetch(a, 1, 2);
            else
                __builtin_prefetch(a, 0, 2);
        }
}

#ifdef ZT_VEC16_AVX2
// dst (8, 8; rows ldd apart) <- the transpose of src (8, 8; rows lds apart): interleave 32-bit,
// then 64-bit elements of row pairs, then swap 128-bit halves.
inline void transpose8(const float* src, int64_t lds, float* dst, int64_t ldd) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 8; g += 4) {  // rows g..g+3: columns 4 lanes x {0,1} | {2,3} per pair
        r[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
        r[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xee);
        r[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        r[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xee);
    }
    for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(dst + k * ldd, _mm256_permute2f128_ps(r[k], r[4 + k], 0x20));
        _mm256_storeu_ps(dst + (4 + k) * ldd, _mm256_permute2f128_ps(r[k], r[4 + k], 0x31));
    }
}
#endif

// dst (16, 16; rows ldd apart) <- the transpose of src (16, 16; rows lds apart). With AVX-512:
// interleave 32-bit then 64-bit elements of row pairs, then transpose the 4 x 4 grid of 128-bit
// lanes; 4x faster than scalar copies, which were 8% of the forward.
inline void transpose16(const float* src, int64_t lds, float* dst, int64_t ldd) {
#ifdef ZT_VEC16_AVX512
    auto lo = [](__m512 a, __m512 b) {
        return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    auto hi = [](__m512 a, __m512 b) {
        return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
    };
    __m512 u[16];  // u[4 g + k], lane L: column 4 L + k of rows 4 g .. 4 g + 3
    for (int g = 0; g < 16; g += 4) {
        const __m512 r0 = _mm512_loadu_ps(src + g * lds), r1 = _mm512_loadu_ps(src + (g + 1) * lds);
        const __m512 r2 = _mm512_loadu_ps(src + (g + 2) * lds);
        const __m512 r3 = _mm512_loadu_ps(src + (g + 3) * lds);
        const __m512 t0 = _mm512_unpacklo_ps(r0, r1), t1 = _mm512_unpackhi_ps(r0, r1);
        const __m512 t2 = _mm512_unpacklo_ps(r2, r3), t3 = _mm512_unpackhi_ps(r2, r3);
        u[g] = lo(t0, t2), u[g + 1] = hi(t0, t2), u[g + 2] = lo(t1, t3), u[g + 3] = hi(t1, t3);
    }
    for (int k = 0; k < 4; ++k) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
        const __m512 v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xee);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xee);
        _mm512_storeu_ps(dst + k * ldd, _mm512_shuffle_f32x4(v0, v2, 0x88));
        _mm512_storeu_ps(dst + (4 + k) * ldd, _mm512_shuffle_f32x4(v0, v2, 0xdd));
        _mm512_storeu_ps(dst + (8 + k) * ldd, _mm512_shuffle_f32x4(v1, v3, 0x88));
        _mm512_storeu_ps(dst + (12 + k) * ldd, _mm512_shuffle_f32x4(v1, v3, 0xdd));
    }
#elif defined(ZT_VEC16_AVX2)
    for (int bi = 0; bi < 16; bi += 8)
        for (int bj = 0; bj < 16; bj += 8)
            transpose8(src + bi * lds + bj, lds, dst + bj * ldd + bi, ldd);
#else
    for (int64_t e = 0; e < kLanes; ++e)
        for (int64_t c = 0; c < kLanes; ++c) dst[e * ldd + c] = src[c * lds + e];
#endif
}

// Entries right (mask_upper) or left (mask_lower) of the diagonal of a (n, kBlock) tile <- value.
inline void mask_upper(float* tile, int64_t n, float value) {
    for (int64_t r = 0; r < n; ++r)
        std::fill(tile + r * kBlock + r + 1, tile + (r + 1) * kBlock, value);
}
inline void mask_lower(float* tile, int64_t n, float value) {
    for (int64_t r = 0; r < n; ++r) std::fill(tile + r * kBlock, tile + r * kBlock + r, value);
}

// The online softmax step on a transposed score tile st (nk keys, kBlock queries) holding k.q:
// each lane is one query. On return st holds p = e^(x - m_new) with x = k.q scale, m and l
// (kBlock queries each) are updated, and alpha holds what the output rows must be rescaled by.
inline void softmax_columns(float* st, int64_t nk, float scale, float* m, float* l, float* alpha) {
    constexpr int kVecs = kBlock / kLanes;
    const V16 sc = vec::splat(scale);
    V16 mx[kVecs], neg[kVecs], sum[kVecs];
    for (int v = 0; v < kVecs; ++v) mx[v] = vec::neg_inf(), sum[v] = vec::zero();
    for (int64_t c = 0; c < nk; ++c)
        for (int v = 0; v < kVecs; ++v)
            mx[v] = vec::max(mx[v], vec::load(st + c * kBlock + v * kLanes));
    for (int v = 0; v < kVecs; ++v) {  // max(x) = max(k.q) scale, as scale > 0
        mx[v] = vec::max(vec::load(m + v * kLanes), mx[v] * sc);
        neg[v] = vec::zero() - mx[v];
    }
    for (int64_t c = 0; c < nk; ++c)
        for (int v = 0; v < kVecs; ++v) {
            float* p = st + c * kBlock + v * kLanes;
            const V16 e = vec::exp(vec::fma(vec::load(p), sc, neg[v]));
            vec::store(p, e);
            sum[v] = sum[v] + e;
        }
    for (int v = 0; v < kVecs; ++v) {
        const V16 a = vec::exp(vec::load(m + v * kLanes) + neg[v]);  // 0 on the first block
        vec::store(alpha + v * kLanes, a);
        vec::store(l + v * kLanes, vec::fma(vec::load(l + v * kLanes), a, sum[v]));
        vec::store(m + v * kLanes, mx[v]);
    }
}

// Register tiles of a product's rows [m0, m0 + MR) by columns [n0, n0 + 16 nvec) that the causal
// part needs: k in [kb, ke), column vectors [v0, v0 + nv) of the nvec (nv 0: none).
struct CausalSpan {
    int64_t kb, ke, v0, nv;
};
inline CausalSpan causal_span(Causal causal, int64_t m0, int64_t MR, int64_t n0, int64_t nvec,
                              int64_t K) {
    CausalSpan s{0, K, 0, nvec};
    if (causal == Causal::kKLow) s.ke = std::min(K, m0 + MR);
    if (causal == Causal::kKHigh) s.kb = std::min(K, m0);
    if (causal == Causal::kColsTo) {
        const int64_t last = m0 + MR - 1 - n0;  // the last column any row of the group needs
        s.nv = last < 0 ? 0 : std::min(nvec, last / kLanes + 1);
    }
    if (causal == Causal::kColsFrom) {
        s.v0 = std::min(nvec, std::max<int64_t>(0, m0 - n0) / kLanes);  // first vector needed
        s.nv = nvec - s.v0;
    }
    return s;
}

// The forward's prefetches for query block r0 (nr rows): the next head's q, k, v rows and this
// head's output rows about to be written.
template <typename T>
void prefetch_forward_block(const T* qkv, const T* oh, const Dims& d, int64_t next, int64_t r0,
                            int64_t nr) {
    if (next >= 0)
        for (int64_t part = 0; part < 3; ++part)
            prefetch_rows(head_in(qkv, d, next) + part * d.C + r0 * d.ld, d.ld, nr, d, false);
    prefetch_rows(oh + r0 * d.C, d.C, nr, d, true);
}

// The backward's prefetches for key block c0 (nc rows): the next head's inputs and this head's
// dq, dk, dv rows of the block.
template <typename T>
void prefetch_backward_block(const T* qkv, const T* out, const T* dout, const T* dqh, const Dims& d,
                             int64_t next, int64_t c0, int64_t nc) {
    if (next >= 0) {
        for (int64_t part = 0; part < 3; ++part)
            prefetch_rows(head_in(qkv, d, next) + part * d.C + c0 * d.ld, d.ld, nc, d, false);
        prefetch_rows(head_out(out, d, next) + c0 * d.C, d.C, nc, d, false);
        prefetch_rows(head_out(dout, d, next) + c0 * d.C, d.C, nc, d, false);
    }
    for (int64_t part = 0; part < 3; ++part)
        prefetch_rows(dqh + part * d.C + c0 * d.ld, d.ld, nc, d, true);
}

// Rows [0, nr) of a (nr, kBlock) score tile holding q.k: p = e^(q.k scale - lse_r).
inline void scores_to_probs(float* p, int64_t nr, float scale, const float* lse) {
    for (int64_t r = 0; r < nr; ++r) {
        const V16 neg_lse = vec::splat(-lse[r]);
        for (int64_t c = r * kBlock; c < (r + 1) * kBlock; c += kLanes)
            vec::store(p + c, vec::exp(vec::fma(vec::load(p + c), vec::splat(scale), neg_lse)));
    }
}

// Rows [0, nr) of ds holding dp: ds = p (dp - D_r) scale.
inline void probs_to_score_grads(const float* p, float* ds, int64_t nr, const float* di,
                                 float scale) {
    for (int64_t r = 0; r < nr; ++r) {
        const V16 dr = vec::splat(di[r]);
        for (int64_t c = r * kBlock; c < (r + 1) * kBlock; c += kLanes)
            vec::store(ds + c, vec::load(p + c) * (vec::load(ds + c) - dr) * vec::splat(scale));
    }
}

}  // namespace zt::kernels::attn
