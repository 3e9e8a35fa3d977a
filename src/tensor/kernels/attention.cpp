// Causal attention kernels, blockwise with an online softmax (Note [Attention tiling]). The only
// scratch is the caller's workspace: per thread, one head's rows in f32 plus a few square tiles,
// so memory is linear in T. A thread owns a whole (b, h) head at a time: results do not depend on
// the thread count and dk, dv need no cross-thread reduction. Leaves out dropout and other masks.
#include "tensor/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/gemm.h"
#include "tensor/kernels/attention_common.h"
#include "tensor/kernels/attention_dot.h"
#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"
#include "util/error.h"

// Note [Attention tiling]
// Score tiles are kBlock queries by kBlock keys. For its head a thread converts q, k, v (backward:
// also dout) to f32 rows padded with zeros to Tp = ceil(T / kBlock) kBlock rows and Dp =
// ceil(D / 16) 16 columns, and the operands a product reads down its columns to transposed
// (Dp, kBlock) tiles, once per block. Every product is then a small GEMM whose inner step is one
// broadcast and up to four contiguous 16-float FMAs (tile_gemm). The forward keeps its scores
// transposed, keys by queries, so the softmax statistics of 16 queries are one vector and need no
// horizontal reductions. Key blocks above the diagonal are skipped; in a diagonal block, register
// tiles wholly above it are skipped (Causal) and the rest is masked. Padded keys lie above the
// diagonal of every real query and padded queries are never used, so padding cannot leak.

namespace zt::kernels {

namespace {

using namespace attn;  // NOLINT(google-build-using-namespace): the kernels' shared internals

// c (MR, 16 NV) (+)= a (MR, [kb, ke)) b ([kb, ke), 16 NV); a(m, k) = a[m lda + k], or a[k lda + m]
// when kTransA; rows of b and c are ldb and ldc floats apart.
template <int MR, int NV, bool kTransA>
void micro_gemm(int64_t kb, int64_t ke, const float* a, int64_t lda, const float* b, int64_t ldb,
                float* c, int64_t ldc, bool accumulate) {
    V16 acc[MR][NV];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
            acc[m][v] = accumulate ? vec::load(c + m * ldc + v * kLanes) : vec::zero();
    for (int64_t k = kb; k < ke; ++k) {
        V16 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = vec::load(b + k * ldb + v * kLanes);
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
            const V16 am = vec::splat(kTransA ? a[k * lda + m] : a[m * lda + k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[m][v] = vec::fma(am, bv[v], acc[m][v]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) vec::store(c + m * ldc + v * kLanes, acc[m][v]);
}

struct GemmArgs {
    int64_t M, N, K;
    const float* a;
    int64_t lda;
    const float* b;
    int64_t ldb;
    float* c;
    int64_t ldc;
    bool accumulate;
    Causal causal;
};

// Rows from m0 of columns [n0, n0 + 16 nvec), MR at a time while MR remain; returns the row after.
template <int MR, bool kTransA>
int64_t gemm_rows(const GemmArgs& g, int64_t m0, int64_t n0, int64_t nvec) {
    for (; m0 + MR <= g.M; m0 += MR) {
        const auto [kb, ke, v0, nv] = causal_span(g.causal, m0, MR, n0, nvec, g.K);
        const float* a = kTransA ? g.a + m0 : g.a + m0 * g.lda;
        const float* b = g.b + n0 + v0 * kLanes;
        float* c = g.c + m0 * g.ldc + n0 + v0 * kLanes;
        using Micro = void (*)(int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                               float*, int64_t, bool);
        constexpr Micro kMicro[] = {micro_gemm<MR, 1, kTransA>, micro_gemm<MR, 2, kTransA>,
                                    micro_gemm<MR, 3, kTransA>, micro_gemm<MR, 4, kTransA>};
        if (nv > 0)  // else the whole group lies beside these columns
            kMicro[nv - 1](kb, ke, a, g.lda, b, g.ldb, c, g.ldc, g.accumulate);
    }
    return m0;
}

// c (M, N) (+)= a (M, K) b (K, N), N a multiple of 16; a is read transposed when kTransA.
// AVX-512: 6 x 4 vectors is 24 of the 32 vector registers for accumulators. AVX2 has 16
// registers and a vector is two of them: 6 x 1 vectors (12 registers) keeps every accumulator
// in a register, where 6 x 4 spilled.
template <bool kTransA>
void tile_gemm(const GemmArgs& g) {
#ifdef ZT_VEC16_AVX2
    for (int64_t n0 = 0; n0 < g.N; n0 += kLanes) {
        const int64_t m0 = gemm_rows<6, kTransA>(g, 0, n0, 1);
        gemm_rows<1, kTransA>(g, gemm_rows<4, kTransA>(g, m0, n0, 1), n0, 1);
    }
#else
    for (int64_t n0 = 0; n0 < g.N; n0 += 4 * kLanes) {
        const int64_t nvec = std::min<int64_t>(4, (g.N - n0) / kLanes);
        int64_t m0 = nvec >= 3 ? gemm_rows<6, kTransA>(g, 0, n0, nvec)
                               : gemm_rows<8, kTransA>(g, 0, n0, nvec);
        m0 = gemm_rows<4, kTransA>(g, m0, n0, nvec);
        gemm_rows<1, kTransA>(g, m0, n0, nvec);
    }
#endif
}

// One thread's scratch (floats; every piece a multiple of 16). Forward uses rows[0..1] (k, v),
// tile_t[0] (q^T), tile_r (O, staging), sq (scores, alpha) and vec (m, l); backward uses all.
struct Scratch {
    float* rows[4];    // (Tp, Dp) each
    float* vec[2];     // (Tp) each
    float* tile_t[2];  // (Dp, kBlock) each
    float* tile_r[2];  // (kBlock, Dp) each
    float* sq[2];      // (kBlock, kBlock) each
    static int64_t floats(const Dims& d) {
        return 4 * d.Tp * d.Dp + 2 * d.Tp + 4 * d.Dp * kBlock + 2 * kBlock * kBlock;
    }
    Scratch(float* p, const Dims& d) {
        for (float*& r : rows) r = p, p += d.Tp * d.Dp;
        for (float*& r : vec) r = p, p += d.Tp;
        for (float*& r : tile_t) r = p, p += d.Dp * kBlock;
        for (float*& r : tile_r) r = p, p += kBlock * d.Dp;
        for (float*& r : sq) r = p, p += kBlock * kBlock;
    }
};

// dst (n, Dp) <- rows [0, n) of src, ld elements apart, D wide; zeros in the padding columns.
template <typename T>
void load_rows(const T* src, int64_t ld, int64_t n, const Dims& d, float* dst) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < d.Dp; e += kLanes)
            vec::store(dst + t * d.Dp + e, vec::load_part(src + t * ld + e, d.D - e));
}

// Rows [0, n) of dst, ld elements apart, D wide <- src (n, Dp), rounded to T.
template <typename T>
void store_rows(const float* src, int64_t n, const Dims& d, T* dst, int64_t ld) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < d.D; e += kLanes)
            vec::store_part(dst + t * ld + e, vec::load(src + t * d.Dp + e), d.D - e);
}

// dst (Dp, kBlock) <- the transpose of rows (kBlock, Dp).
void transpose_block(const float* rows, const Dims& d, float* dst) {
    for (int64_t c = 0; c < kBlock; c += kLanes)
        for (int64_t e = 0; e < d.Dp; e += kLanes)
            transpose16(rows + c * d.Dp + e, d.Dp, dst + e * kBlock + c, kBlock);
}

// One head bh = b H + h of the forward; next: the thread's next head or -1.
template <typename T>
void forward_head(const T* qkv, T* out, float* lse, const Dims& d, int64_t bh, int64_t next,
                  float* slab) {
    Scratch w(slab, d);
    float *k = w.rows[0], *v = w.rows[1], *qt = w.tile_t[0], *o = w.tile_r[0], *stage = w.tile_r[1];
    float *st = w.sq[0], *alpha = w.sq[1], *m = w.vec[0], *l = w.vec[1];
    const T* qh = head_in(qkv, d, bh);
    T* oh = head_out(out, d, bh);
    std::fill(k, k + 2 * d.Tp * d.Dp, 0.0f);  // rows[0..1] are contiguous: zero the padding rows
    load_rows(qh + d.C, d.ld, d.T, d, k);
    load_rows(qh + 2 * d.C, d.ld, d.T, d, v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
    for (int64_t i = 0; i < d.nb; ++i) {
        const int64_t r0 = i * kBlock, nr = std::min(kBlock, d.T - r0);
        prefetch_forward_block(qkv, oh, d, next, r0, nr);
        std::fill(stage, stage + kBlock * d.Dp, 0.0f);
        load_rows(qh + r0 * d.ld, d.ld, nr, d, stage);
        transpose_block(stage, d, qt);
        std::fill(o, o + kBlock * d.Dp, 0.0f);
        std::fill(m, m + kBlock, kNegInf);
        std::fill(l, l + kBlock, 0.0f);
        for (int64_t j = 0; j <= i; ++j) {
            const bool diag = j == i;
            const int64_t nk = diag ? nr : kBlock;  // keys past T only occur in a diagonal block
            tile_gemm<false>({nk, kBlock, d.Dp, k + j * kBlock * d.Dp, d.Dp, qt, kBlock, st, kBlock,
                              false, diag ? Causal::kColsFrom : Causal::kNone});
            if (diag) mask_lower(st, nk, kNegInf);
            softmax_columns(st, nk, scale, m, l, alpha);
            for (int64_t r = 0; r < nr; ++r)
                for (int64_t e = 0; e < d.Dp; e += kLanes)
                    vec::store(o + r * d.Dp + e,
                               vec::load(o + r * d.Dp + e) * vec::splat(alpha[r]));
            tile_gemm<true>({nr, d.Dp, nk, st, kBlock, v + j * kBlock * d.Dp, d.Dp, o, d.Dp, true,
                             diag ? Causal::kKLow : Causal::kNone});
        }
        for (int64_t r = 0; r < nr; ++r) {
            for (int64_t e = 0; e < d.Dp; e += kLanes)
                vec::store(o + r * d.Dp + e, vec::load(o + r * d.Dp + e) * vec::splat(1.0f / l[r]));
            lse[bh * d.T + r0 + r] = m[r] + std::log(l[r]);
        }
        store_rows(o, nr, d, oh + r0 * d.C, d.C);
    }
}

// Backward for query block i against key block j of one head (Scratch as backward_head lays it
// out): accumulates dv_j, dk_j (tile_r) and dq_i (rows[3]); p and ds are the score tiles.
void backward_tile(const Scratch& w, const Dims& d, int64_t i, int64_t j, float scale) {
    const float *q = w.rows[0], *k = w.rows[1], *dout = w.rows[2], *di = w.vec[0], *lse = w.vec[1],
                *kt = w.tile_t[0], *vt = w.tile_t[1];
    float *dq = w.rows[3], *dk = w.tile_r[0], *dv = w.tile_r[1], *p = w.sq[0], *ds = w.sq[1];
    const int64_t r0 = i * kBlock, nr = std::min(kBlock, d.T - r0);
    const bool diag = i == j;
    const Causal cols = diag ? Causal::kColsTo : Causal::kNone;
    const Causal low = diag ? Causal::kKLow : Causal::kNone;
    const Causal high = diag ? Causal::kKHigh : Causal::kNone;
    tile_gemm<false>({nr, kBlock, d.Dp, q + r0 * d.Dp, d.Dp, kt, kBlock, p, kBlock, false, cols});
    if (diag) mask_upper(p, nr, kNegInf);
    scores_to_probs(p, nr, scale, lse + r0);
    // dv_j += p^T dout_i; dp = dout_i v_j^T
    tile_gemm<true>({kBlock, d.Dp, nr, p, kBlock, dout + r0 * d.Dp, d.Dp, dv, d.Dp, true, high});
    tile_gemm<false>(
        {nr, kBlock, d.Dp, dout + r0 * d.Dp, d.Dp, vt, kBlock, ds, kBlock, false, cols});
    if (diag) mask_upper(ds, nr, 0.0f);  // skipped entries are stale; p is 0 there
    probs_to_score_grads(p, ds, nr, di + r0, scale);
    // dq_i += ds k_j; dk_j += ds^T q_i
    tile_gemm<false>({nr, d.Dp, kBlock, ds, kBlock, k + j * kBlock * d.Dp, d.Dp, dq + r0 * d.Dp,
                      d.Dp, true, low});
    tile_gemm<true>({kBlock, d.Dp, nr, ds, kBlock, q + r0 * d.Dp, d.Dp, dk, d.Dp, true, high});
}

// One head bh = b H + h of the backward; next: the thread's next head or -1.
template <typename T>
void backward_head(const T* qkv, const T* out, const T* dout, const float* lse, T* dqkv,
                   const Dims& d, int64_t bh, int64_t next, float* slab) {
    Scratch w(slab, d);
    float *q = w.rows[0], *k = w.rows[1], *dor = w.rows[2], *dq = w.rows[3], *di = w.vec[0];
    float *kt = w.tile_t[0], *vt = w.tile_t[1], *dk = w.tile_r[0], *dv = w.tile_r[1];
    const T* qh = head_in(qkv, d, bh);
    const T* oh = head_out(out, d, bh);
    T* dqh = head_in(dqkv, d, bh);
    std::fill(q, q + 4 * d.Tp * d.Dp, 0.0f);  // rows[0..3] are contiguous
    load_rows(qh, d.ld, d.T, d, q);
    load_rows(qh + d.C, d.ld, d.T, d, k);
    load_rows(head_out(dout, d, bh), d.C, d.T, d, dor);
    for (int64_t t0 = 0; t0 < d.T; t0 += kBlock) {  // D_t = dout_t . out_t, out staged through dk
        const int64_t n = std::min(kBlock, d.T - t0);
        load_rows(oh + t0 * d.C, d.C, n, d, dk);
        for (int64_t t = t0; t < t0 + n; ++t) {
            V16 acc = vec::zero();
            const float *o_row = dk + (t - t0) * d.Dp, *do_row = dor + t * d.Dp;
            for (int64_t e = 0; e < d.Dp; e += kLanes)
                acc = vec::fma(vec::load(o_row + e), vec::load(do_row + e), acc);
            di[t] = vec::hsum(acc);
        }
    }
    std::copy(lse + bh * d.T, lse + (bh + 1) * d.T, w.vec[1]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
    for (int64_t j = 0; j < d.nb; ++j) {
        const int64_t c0 = j * kBlock, nc = std::min(kBlock, d.T - c0);
        prefetch_backward_block(qkv, out, dout, dqh, d, next, c0, nc);
        transpose_block(k + c0 * d.Dp, d, kt);
        std::fill(dv, dv + kBlock * d.Dp, 0.0f);  // v_j staged through dv
        load_rows(qh + 2 * d.C + c0 * d.ld, d.ld, nc, d, dv);
        transpose_block(dv, d, vt);
        std::fill(dk, dk + 2 * kBlock * d.Dp, 0.0f);  // tile_r[0..1] are contiguous
        for (int64_t i = j; i < d.nb; ++i) backward_tile(w, d, i, j, scale);
        store_rows(dk, nc, d, dqh + d.C + c0 * d.ld, d.ld);
        store_rows(dv, nc, d, dqh + 2 * d.C + c0 * d.ld, d.ld);
    }
    store_rows(dq, d.T, d, dqh, d.ld);
}

void check_shape(AttentionShape s) {
    ZT_CHECK(s.B >= 1 && s.T >= 1 && s.H >= 1 && s.C >= s.H && s.C % s.H == 0,
             "attention: expected B, T >= 1 and C a positive multiple of H, got B=", s.B,
             " T=", s.T, " C=", s.C, " H=", s.H);
}

}  // namespace

bool attention_dot_available() { return dot_available(); }

AttentionMath attention_math_from_env(const char* value, bool dot_available) {
    const std::string v = value ? value : "";
    ZT_CHECK(v.empty() || v == "dot" || v == "widened",
             "ZT_ATTENTION: expected \"dot\" or \"widened\", got \"", v, "\"");
    ZT_CHECK(v != "dot" || dot_available,
             "ZT_ATTENTION=dot: this build has no AVX512_BF16 dot products (built for a CPU "
             "without them); unset ZT_ATTENTION or set it to \"widened\"");
    if (v.empty()) return AttentionMath::kAuto;
    return v == "dot" ? AttentionMath::kDot : AttentionMath::kWidened;
}

bool attention_uses_dot(AttentionMath math) {
    // Note [bf16 dot products in attention]: where the measured choice for a large bf16 product
    // is the native one, bf16 dot products beat widened f32 FMAs on this machine. ZT_ATTENTION
    // ("dot" or "widened") overrides the choice, as ZT_GEMM_BF16 does the GEMM's; it is read
    // (and a "dot" this build cannot run refused) whatever the caller asks.
    static const bool dot = [] {
        const AttentionMath env =
            attention_math_from_env(std::getenv("ZT_ATTENTION"), dot_available());
        if (env != AttentionMath::kAuto) return env == AttentionMath::kDot;
        return dot_available() && gemm_library_for(DType::kBF16, false, true, 2048, 2048, 2048) ==
                                      GemmLibrary::kOneDnn;
    }();
    if (!dot_available() || math == AttentionMath::kWidened) return false;
    if (math == AttentionMath::kDot) return true;
    return dot;
}

// The larger of the two kernels' scratch, so that the bytes do not depend on which runs.
int64_t attention_workspace_bytes(AttentionShape s, int threads) {
    check_shape(s);
    const Dims d = make_dims(s);
    const int64_t slab = std::max(Scratch::floats(d), dot_slab_floats(d));
    return 64 + int64_t{threads_for(d, threads)} * slab * static_cast<int64_t>(sizeof(float));
}

// Both run on zt::num_threads() threads (at most B H): the count the caller must have given
// attention_workspace_bytes.
template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, AttentionShape s, void* workspace,
                       AttentionMath math) {
    check_shape(s);
    const Dims d = make_dims(s);
    if constexpr (std::is_same_v<T, bf16>) {
        if (attention_uses_dot(math)) return dot_forward(qkv, out, lse, d, workspace);
    }
    for_each_head(d, workspace, Scratch::floats(d), [&](int64_t bh, int64_t next, float* slab) {
        forward_head(qkv, out, lse, d, bh, next, slab);
    });
}

template <typename T>
void attention_backward(const T* qkv, const T* out, const T* dout, const float* lse, T* dqkv,
                        AttentionShape s, void* workspace, AttentionMath math) {
    check_shape(s);
    const Dims d = make_dims(s);
    if constexpr (std::is_same_v<T, bf16>) {
        if (attention_uses_dot(math)) return dot_backward(qkv, out, dout, lse, dqkv, d, workspace);
    }
    for_each_head(d, workspace, Scratch::floats(d), [&](int64_t bh, int64_t next, float* slab) {
        backward_head(qkv, out, dout, lse, dqkv, d, bh, next, slab);
    });
}

#define ZT_ATTENTION_INSTANTIATE(T)                                                     \
    template void attention_forward<T>(const T*, T*, float*, AttentionShape, void*,     \
                                       AttentionMath);                                  \
    template void attention_backward<T>(const T*, const T*, const T*, const float*, T*, \
                                        AttentionShape, void*, AttentionMath);
ZT_ATTENTION_INSTANTIATE(float)
ZT_ATTENTION_INSTANTIATE(bf16)
ZT_ATTENTION_INSTANTIATE(f16)
#undef ZT_ATTENTION_INSTANTIATE

}  // namespace zt::kernels
