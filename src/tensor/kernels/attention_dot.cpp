// Causal attention on bf16 tensors with bf16 dot products (Note [bf16 dot products in attention]).
#include "tensor/kernels/attention_dot.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "util/error.h"

// Note [bf16 dot products in attention]
// On a CPU whose bf16 dot product (vdpbf16ps: per f32 lane, the sum of two bf16 products added to
// an f32 accumulator) runs at twice its f32 FMA rate, bf16 training's attention products take
// their bf16 operands as they are, as FlashAttention does on GPUs: q, k, v and dout are bf16
// already, and the probabilities P and score gradients dS are rounded to bf16 (to nearest even)
// before the products that read them (P V, P^T dO, dS K, dS^T Q). Accumulation stays f32, as do
// the softmax, its statistics, lse and D_t. The rounding of P and dS (relative 2^-9 per entry) is
// the only numerical difference from the widened kernel of attention.cpp. A product reads its
// first operand a pair of k at a time (one 32-bit broadcast) and its second as rows of pairs:
// element (k, n) sits in 32-bit word (k / 2, n), half k % 2. So the second operand of a product
// over the head width is the transpose of bf16 rows seen as 32-bit words (transpose16), and that
// of a product over keys or queries interleaves consecutive rows (pair_rows). The head width is
// padded with zeros to a multiple of 32 (16 pairs), odd key or query counts with a zero row, so
// every pair is whole; the rest follows Note [Attention tiling]: the same blocks, causal skips and
// masks, one thread per head. attention.cpp takes this path only where the build targets
// AVX512_BF16 and the machine's measured GEMM choice runs bf16 products natively: on CPUs whose
// bf16 dot product runs at half the f32 rate that measurement picks widened products, and so does
// attention.

namespace zt::kernels::attn {

#if defined(__AVX512BF16__) && defined(ZT_VEC16_AVX512)

namespace {

using u16 = uint16_t;
using u32 = uint32_t;

// The head width padded to a multiple of 32 elements, and its pairs.
struct Width {
    int64_t Dw, W2;
};
Width width(const Dims& d) {
    const int64_t Dw = (d.D + 31) / 32 * 32;
    return {Dw, Dw / 2};
}

int64_t even(int64_t n) { return (n + 1) / 2 * 2; }

// c (MR, 16 NV) (+)= a (MR, pairs [kb, ke)) b (pair rows [kb, ke), 16 NV); row m of a is at
// a + m lda words, pair row k of b at b + k ldb words.
template <int MR, int NV>
void dot_micro(int64_t kb, int64_t ke, const u32* a, int64_t lda, const u32* b, int64_t ldb,
               float* c, int64_t ldc, bool accumulate) {
    __m512 acc[MR][NV];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
            acc[m][v] =
                accumulate ? _mm512_loadu_ps(c + m * ldc + v * kLanes) : _mm512_setzero_ps();
    for (int64_t k = kb; k < ke; ++k) {
        __m512bh bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
            bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + k * ldb + v * kLanes));
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
            const auto am =
                reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[m * lda + k])));
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], am, bv[v]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + m * ldc + v * kLanes, acc[m][v]);
}

// c (M, N) (+)= a (M, K) b (K, N): K even, counted in elements; N a multiple of 16.
struct DotArgs {
    int64_t M, N, K;
    const u32* a;
    int64_t lda;  // words
    const u32* b;
    int64_t ldb;  // words
    float* c;
    int64_t ldc;
    bool accumulate;
    Causal causal;
};

// Rows from m0 of columns [n0, n0 + 16 nvec), MR at a time while MR remain; returns the row after.
template <int MR>
int64_t dot_rows(const DotArgs& g, int64_t m0, int64_t n0, int64_t nvec) {
    for (; m0 + MR <= g.M; m0 += MR) {
        const auto [kb, ke, v0, nv] = causal_span(g.causal, m0, MR, n0, nvec, g.K);
        using Micro = void (*)(int64_t, int64_t, const u32*, int64_t, const u32*, int64_t, float*,
                               int64_t, bool);
        constexpr Micro kMicro[] = {dot_micro<MR, 1>, dot_micro<MR, 2>, dot_micro<MR, 3>,
                                    dot_micro<MR, 4>};
        if (nv > 0)  // pairs: a zero entry completes a pair at either end
            kMicro[nv - 1](kb / 2, (ke + 1) / 2, g.a + m0 * g.lda, g.lda, g.b + n0 + v0 * kLanes,
                           g.ldb, g.c + m0 * g.ldc + n0 + v0 * kLanes, g.ldc, g.accumulate);
    }
    return m0;
}

// 6 x 4 vectors: 24 accumulators, 4 operand vectors and a broadcast of the 32 registers.
void dot_gemm(const DotArgs& g) {
    for (int64_t n0 = 0; n0 < g.N; n0 += 4 * kLanes) {
        const int64_t nvec = std::min<int64_t>(4, (g.N - n0) / kLanes);
        int64_t m0 = nvec >= 3 ? dot_rows<6>(g, 0, n0, nvec) : dot_rows<8>(g, 0, n0, nvec);
        m0 = dot_rows<4>(g, m0, n0, nvec);
        dot_rows<1>(g, m0, n0, nvec);
    }
}

const u32* words(const u16* p) { return reinterpret_cast<const u32*>(p); }

// One thread's scratch (floats; every piece a multiple of 16). u16 pieces hold bf16 bits.
struct DotScratch {
    u16* rows[3];      // (Tp, Dw) bf16: q, k, dout (forward: k, and v before pairing)
    u32* pairs[3];     // (Tp / 2, Dw) words: q, k, dout paired along T (forward: v)
    float* dq;         // (Tp, Dw)
    float* vec[2];     // (Tp) each
    u32* tile_t[2];    // (W2, kBlock) words: a block's rows transposed
    float* tile_r[2];  // (kBlock, Dw)
    u16* block;        // (kBlock, Dw) bf16: the forward's q block, the backward's v block
    float* sq[3];      // (kBlock, kBlock)
    u16* sqb;          // (kBlock, kBlock) bf16
    static int64_t floats(const Dims& d) {
        const Width w = width(d);
        return 3 * d.Tp * w.Dw + d.Tp * w.Dw + 2 * d.Tp + 2 * w.W2 * kBlock + 2 * kBlock * w.Dw +
               kBlock * w.W2 + 3 * kBlock * kBlock + kBlock * kBlock / 2;
    }
    DotScratch(float* p, const Dims& d) {
        const Width w = width(d);
        auto take = [&](int64_t n) { return std::exchange(p, p + n); };
        for (u16*& r : rows) r = reinterpret_cast<u16*>(take(d.Tp * w.W2));
        for (u32*& r : pairs) r = reinterpret_cast<u32*>(take(d.Tp * w.W2));
        dq = take(d.Tp * w.Dw);
        for (float*& r : vec) r = take(d.Tp);
        for (u32*& r : tile_t) r = reinterpret_cast<u32*>(take(w.W2 * kBlock));
        for (float*& r : tile_r) r = take(kBlock * w.Dw);
        block = reinterpret_cast<u16*>(take(kBlock * w.W2));
        for (float*& r : sq) r = take(kBlock * kBlock);
        sqb = reinterpret_cast<u16*>(take(kBlock * kBlock / 2));
    }
};

// dst (n, Dw) <- rows [0, n) of src, ld elements apart, D wide; zeros in the padding columns.
void load_rows_b(const bf16* src, int64_t ld, int64_t n, const Dims& d, int64_t Dw, u16* dst) {
    for (int64_t t = 0; t < n; ++t) {
        std::memcpy(dst + t * Dw, src + t * ld, static_cast<size_t>(d.D) * sizeof(u16));
        std::memset(dst + t * Dw + d.D, 0, static_cast<size_t>(Dw - d.D) * sizeof(u16));
    }
}

// Pair row r of dst (Dw words) <- rows 2 r and 2 r + 1 of rows (Dw wide), interleaved.
void pair_rows(const u16* rows, int64_t pairs, int64_t Dw, u32* dst) {
    for (int64_t r = 0; r < pairs; ++r) {
        const u16* lo = rows + 2 * r * Dw;
        for (int64_t e = 0; e < Dw; e += kLanes) {
            const __m512i a =
                _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + e)));
            const __m512i b = _mm512_cvtepu16_epi32(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + Dw + e)));
            _mm512_storeu_si512(dst + r * Dw + e, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
        }
    }
}

// dst (W2, kBlock) words <- the transpose of kBlock bf16 rows (Dw wide) seen as W2 words each.
void transpose_words(const u16* rows, const Width& w, u32* dst) {
    const auto* src = reinterpret_cast<const float*>(rows);
    auto* out = reinterpret_cast<float*>(dst);
    for (int64_t c = 0; c < kBlock; c += kLanes)
        for (int64_t e = 0; e < w.W2; e += kLanes)
            transpose16(src + c * w.W2 + e, w.W2, out + e * kBlock + c, kBlock);
}

// dst (kBlock, kBlock) bf16 <- rows [0, n) of tile (kBlock, kBlock) f32, rounded.
void round_rows(const float* tile, int64_t n, u16* dst) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < kBlock; c += kLanes)
            vec::store(reinterpret_cast<bf16*>(dst + r * kBlock + c),
                       vec::load(tile + r * kBlock + c));
}

// dst (kBlock, kBlock) bf16 <- the transpose of tile (kBlock, kBlock) f32 whose rows from n on
// count as zeros (they are zeroed), rounded; tmp: a (kBlock, kBlock) f32 scratch tile.
void round_transposed(float* tile, int64_t n, float* tmp, u16* dst) {
    std::fill(tile + n * kBlock, tile + kBlock * kBlock, 0.0f);
    for (int64_t r = 0; r < kBlock; r += kLanes)
        for (int64_t c = 0; c < kBlock; c += kLanes)
            transpose16(tile + r * kBlock + c, kBlock, tmp + c * kBlock + r, kBlock);
    round_rows(tmp, kBlock, dst);
}

// Rows [0, n) of dst, ld elements apart, D wide <- src (n, Dw) f32, rounded to bf16.
void store_rows_b(const float* src, int64_t n, const Dims& d, int64_t Dw, bf16* dst, int64_t ld) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < d.D; e += kLanes)
            vec::store_part(dst + t * ld + e, vec::load(src + t * Dw + e), d.D - e);
}

void dot_forward_head(const bf16* qkv, bf16* out, float* lse, const Dims& d, int64_t bh,
                      int64_t next, float* slab) {
    const Width w = width(d);
    DotScratch s(slab, d);
    u16 *k = s.rows[0], *vr = s.rows[1], *qb = s.block, *p = s.sqb;
    u32 *v = s.pairs[0], *qt = s.tile_t[0];
    float *o = s.tile_r[0], *st = s.sq[0], *alpha = s.sq[1], *tmp = s.sq[2];
    float *m = s.vec[0], *l = s.vec[1];
    const bf16* qh = head_in(qkv, d, bh);
    bf16* oh = head_out(out, d, bh);
    std::fill(k, k + 2 * d.Tp * w.Dw, u16{0});  // rows[0..1] are contiguous: the padding rows
    load_rows_b(qh + d.C, d.ld, d.T, d, w.Dw, k);
    load_rows_b(qh + 2 * d.C, d.ld, d.T, d, w.Dw, vr);
    pair_rows(vr, d.Tp / 2, w.Dw, v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
    for (int64_t i = 0; i < d.nb; ++i) {
        const int64_t r0 = i * kBlock, nr = std::min(kBlock, d.T - r0);
        prefetch_forward_block(qkv, oh, d, next, r0, nr);
        std::fill(qb, qb + kBlock * w.Dw, u16{0});
        load_rows_b(qh + r0 * d.ld, d.ld, nr, d, w.Dw, qb);
        transpose_words(qb, w, qt);
        std::fill(o, o + kBlock * w.Dw, 0.0f);
        std::fill(m, m + kBlock, kNegInf);
        std::fill(l, l + kBlock, 0.0f);
        for (int64_t j = 0; j <= i; ++j) {
            const bool diag = j == i;
            const int64_t nk = diag ? nr : kBlock;  // keys past T only occur in a diagonal block
            dot_gemm({nk, kBlock, w.Dw, words(k + j * kBlock * w.Dw), w.W2, qt, kBlock, st, kBlock,
                      false, diag ? Causal::kColsFrom : Causal::kNone});
            if (diag) mask_lower(st, nk, kNegInf);
            softmax_columns(st, nk, scale, m, l, alpha);
            for (int64_t r = 0; r < nr; ++r)
                for (int64_t e = 0; e < w.Dw; e += kLanes)
                    vec::store(o + r * w.Dw + e,
                               vec::load(o + r * w.Dw + e) * vec::splat(alpha[r]));
            round_transposed(st, nk, tmp, p);  // p (queries, keys) in bf16
            dot_gemm({nr, w.Dw, even(nk), words(p), kBlock / 2, v + j * (kBlock / 2) * w.Dw, w.Dw,
                      o, w.Dw, true, diag ? Causal::kKLow : Causal::kNone});
        }
        for (int64_t r = 0; r < nr; ++r) {
            for (int64_t e = 0; e < w.Dw; e += kLanes)
                vec::store(o + r * w.Dw + e, vec::load(o + r * w.Dw + e) * vec::splat(1.0f / l[r]));
            lse[bh * d.T + r0 + r] = m[r] + std::log(l[r]);
        }
        store_rows_b(o, nr, d, w.Dw, oh + r0 * d.C, d.C);
    }
}

// Backward for query block i against key block j of one head: accumulates dv_j, dk_j (tile_r)
// and dq_i; sq[0] and sq[1] are p and ds.
void dot_backward_tile(const DotScratch& s, const Dims& d, const Width& w, int64_t i, int64_t j,
                       float scale) {
    const u16 *q = s.rows[0], *dout = s.rows[2];
    const u32 *qp = s.pairs[0], *kp = s.pairs[1], *dop = s.pairs[2];
    const u32 *kt = s.tile_t[0], *vt = s.tile_t[1];
    const float *di = s.vec[0], *lse = s.vec[1];
    float *dk = s.tile_r[0], *dv = s.tile_r[1], *p = s.sq[0], *ds = s.sq[1], *tmp = s.sq[2];
    u16* tb = s.sqb;
    const int64_t r0 = i * kBlock, nr = std::min(kBlock, d.T - r0);
    const bool diag = i == j;
    const Causal cols = diag ? Causal::kColsTo : Causal::kNone;
    const Causal low = diag ? Causal::kKLow : Causal::kNone;
    const Causal high = diag ? Causal::kKHigh : Causal::kNone;
    dot_gemm({nr, kBlock, w.Dw, words(q + r0 * w.Dw), w.W2, kt, kBlock, p, kBlock, false, cols});
    if (diag) mask_upper(p, nr, kNegInf);
    scores_to_probs(p, nr, scale, lse + r0);
    // dv_j += p^T dout_i; dp = dout_i v_j^T
    round_transposed(p, nr, tmp, tb);
    dot_gemm({kBlock, w.Dw, even(nr), words(tb), kBlock / 2, dop + (r0 / 2) * w.Dw, w.Dw, dv, w.Dw,
              true, high});
    dot_gemm(
        {nr, kBlock, w.Dw, words(dout + r0 * w.Dw), w.W2, vt, kBlock, ds, kBlock, false, cols});
    if (diag) mask_upper(ds, nr, 0.0f);  // skipped entries are stale; p is 0 there
    probs_to_score_grads(p, ds, nr, di + r0, scale);
    // dq_i += ds k_j; dk_j += ds^T q_i
    round_rows(ds, nr, tb);
    dot_gemm({nr, w.Dw, kBlock, words(tb), kBlock / 2, kp + j * (kBlock / 2) * w.Dw, w.Dw,
              s.dq + r0 * w.Dw, w.Dw, true, low});
    round_transposed(ds, nr, tmp, tb);
    dot_gemm({kBlock, w.Dw, even(nr), words(tb), kBlock / 2, qp + (r0 / 2) * w.Dw, w.Dw, dk, w.Dw,
              true, high});
}

void dot_backward_head(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse,
                       bf16* dqkv, const Dims& d, int64_t bh, int64_t next, float* slab) {
    const Width w = width(d);
    DotScratch s(slab, d);
    u16 *q = s.rows[0], *k = s.rows[1], *dor = s.rows[2], *vb = s.block;
    float *dk = s.tile_r[0], *dv = s.tile_r[1], *di = s.vec[0];
    const bf16* qh = head_in(qkv, d, bh);
    const bf16* oh = head_out(out, d, bh);
    bf16* dqh = head_in(dqkv, d, bh);
    std::fill(q, q + 3 * d.Tp * w.Dw, u16{0});  // rows[0..2] are contiguous
    load_rows_b(qh, d.ld, d.T, d, w.Dw, q);
    load_rows_b(qh + d.C, d.ld, d.T, d, w.Dw, k);
    load_rows_b(head_out(dout, d, bh), d.C, d.T, d, w.Dw, dor);
    for (int r = 0; r < 3; ++r) pair_rows(s.rows[r], d.Tp / 2, w.Dw, s.pairs[r]);
    std::fill(s.dq, s.dq + d.Tp * w.Dw, 0.0f);
    for (int64_t t = 0; t < d.T; ++t) {  // D_t = dout_t . out_t
        V16 acc = vec::zero();
        for (int64_t e = 0; e < d.D; e += kLanes)
            acc = vec::fma(vec::load_part(oh + t * d.C + e, d.D - e),
                           vec::load(reinterpret_cast<const bf16*>(dor + t * w.Dw + e)), acc);
        di[t] = vec::hsum(acc);
    }
    std::copy(lse + bh * d.T, lse + (bh + 1) * d.T, s.vec[1]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
    for (int64_t j = 0; j < d.nb; ++j) {
        const int64_t c0 = j * kBlock, nc = std::min(kBlock, d.T - c0);
        prefetch_backward_block(qkv, out, dout, dqh, d, next, c0, nc);
        transpose_words(k + c0 * w.Dw, w, s.tile_t[0]);
        std::fill(vb, vb + kBlock * w.Dw, u16{0});
        load_rows_b(qh + 2 * d.C + c0 * d.ld, d.ld, nc, d, w.Dw, vb);
        transpose_words(vb, w, s.tile_t[1]);
        std::fill(dk, dk + 2 * kBlock * w.Dw, 0.0f);  // tile_r[0..1] are contiguous
        for (int64_t i = j; i < d.nb; ++i) dot_backward_tile(s, d, w, i, j, scale);
        store_rows_b(dk, nc, d, w.Dw, dqh + d.C + c0 * d.ld, d.ld);
        store_rows_b(dv, nc, d, w.Dw, dqh + 2 * d.C + c0 * d.ld, d.ld);
    }
    store_rows_b(s.dq, d.T, d, w.Dw, dqh, d.ld);
}

}  // namespace

bool dot_available() { return true; }

int64_t dot_slab_floats(const Dims& d) { return DotScratch::floats(d); }

void dot_forward(const bf16* qkv, bf16* out, float* lse, const Dims& d, void* workspace) {
    for_each_head(d, workspace, DotScratch::floats(d), [&](int64_t bh, int64_t next, float* slab) {
        dot_forward_head(qkv, out, lse, d, bh, next, slab);
    });
}

void dot_backward(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse, bf16* dqkv,
                  const Dims& d, void* workspace) {
    for_each_head(d, workspace, DotScratch::floats(d), [&](int64_t bh, int64_t next, float* slab) {
        dot_backward_head(qkv, out, dout, lse, dqkv, d, bh, next, slab);
    });
}

#else  // no AVX512_BF16 in this build: attention.cpp never calls these

bool dot_available() { return false; }
int64_t dot_slab_floats(const Dims&) { return 0; }
void dot_forward(const bf16*, bf16*, float*, const Dims&, void*) {
    ZT_ASSERT(false, "attention: bf16 dot products are not in this build");
}
void dot_backward(const bf16*, const bf16*, const bf16*, const float*, bf16*, const Dims&, void*) {
    ZT_ASSERT(false, "attention: bf16 dot products are not in this build");
}

#endif

}  // namespace zt::kernels::attn
