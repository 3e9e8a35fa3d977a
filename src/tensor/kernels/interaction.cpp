// DLRM dot interaction kernels (see interaction.h). Per sample, the n = K + 1 feature rows are
// gathered as f32 into thread-local scratch; Z = T T^T is a small GEMM over blocks of 4 rows of T
// against 16 columns of T^T (broadcast-FMA, no horizontal sums), only the lower triangle's
// blocks; the backward forms the symmetric G from dout's pair part and computes dT = G T the same
// way. Each sample is one thread's, and every sum runs in a fixed order.
#include "tensor/kernels/interaction.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 14;  // B * (K + 1) * D below this: one thread
constexpr int64_t kRowBlock = 4;                // rows of T per register block

// Per-thread scratch for one sample, sized for n = K + 1 rows of width D. Row counts are rounded up
// to kRowBlock and Z's and T^T's columns to kLanes; the padding stays zero.
struct Scratch {
    int64_t n, n4, npad, D;
    std::vector<float> rows;  // T: (n4, D)
    std::vector<float> cols;  // T^T: (D, npad)
    std::vector<float> mat;   // Z: (n4, npad) forward, G: (n4, n) backward
    Scratch(int64_t K, int64_t D_)
        : n(K + 1),
          n4((K + kRowBlock) / kRowBlock * kRowBlock),
          npad((K + kLanes) / kLanes * kLanes),
          D(D_),
          rows(static_cast<size_t>(n4 * D), 0.0f),
          cols(static_cast<size_t>(D * npad), 0.0f),
          mat(static_cast<size_t>(n4 * npad), 0.0f) {}

    template <typename T>
    void gather(const T* x, const T* const* embs, int64_t b) {
        for (int64_t i = 0; i < n; ++i) {
            const T* src = (i == 0 ? x : embs[i - 1]) + b * D;
            float* dst = rows.data() + i * D;
            for_each_vec(
                D, [&](int64_t j, int64_t m) { store_part(dst + j, load_part(src + j, m), m); });
        }
    }
};

// Z rows [i0, i0 + 4) at the column vectors that hold j <= i0 + 3. The four accumulators are
// locals, not an array, so they stay in registers.
void z_block(Scratch& s, int64_t i0) {
    static_assert(kRowBlock == 4);
    const int64_t D = s.D, last = std::min(i0 + kRowBlock, s.n) - 1;
    for (int64_t j0 = 0; j0 <= last; j0 += kLanes) {
        V16 a0 = zero(), a1 = zero(), a2 = zero(), a3 = zero();
        const float* t = s.rows.data() + i0 * D;
        for (int64_t d = 0; d < D; ++d) {
            const V16 c = load(s.cols.data() + d * s.npad + j0);
            a0 = fma(splat(t[d]), c, a0);
            a1 = fma(splat(t[D + d]), c, a1);
            a2 = fma(splat(t[2 * D + d]), c, a2);
            a3 = fma(splat(t[3 * D + d]), c, a3);
        }
        float* z = s.mat.data() + i0 * s.npad + j0;
        store(z, a0);
        store(z + s.npad, a1);
        store(z + 2 * s.npad, a2);
        store(z + 3 * s.npad, a3);
    }
}

// dT rows [i0, i0 + 4), columns [j, j + m): sum over k of G[i][k] T[k], in order of k.
void dt_block(const Scratch& s, int64_t i0, int64_t j, int64_t m, V16* acc) {
    const int64_t D = s.D, n = s.n;
    V16 a0 = zero(), a1 = zero(), a2 = zero(), a3 = zero();
    const float* g = s.mat.data() + i0 * n;
    for (int64_t k = 0; k < n; ++k) {
        const V16 t = load_part(s.rows.data() + k * D + j, m);
        a0 = fma(splat(g[k]), t, a0);
        a1 = fma(splat(g[n + k]), t, a1);
        a2 = fma(splat(g[2 * n + k]), t, a2);
        a3 = fma(splat(g[3 * n + k]), t, a3);
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

}  // namespace

template <typename T>
void dot_interaction_forward(const T* x, const T* const* embs, int64_t K, int64_t B, int64_t D,
                             bool self, T* out) {
    const int64_t width = D + dot_interaction_pairs(K, self), diag = self ? 1 : 0;
#pragma omp parallel if (B * (K + 1) * D >= parallel_min_elems(kParallelMinElems))
    {
        Scratch s(K, D);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            s.gather(x, embs, b);
            for (int64_t i = 0; i < s.n; ++i)
                for (int64_t d = 0; d < D; ++d) s.cols[d * s.npad + i] = s.rows[i * D + d];
            for (int64_t i0 = 0; i0 < s.n; i0 += kRowBlock) z_block(s, i0);
            T* o = out + b * width;
            std::memcpy(o, x + b * D, sizeof(T) * D);
            int64_t p = D;
            for (int64_t i = 0; i < s.n; ++i)
                for (int64_t j = 0; j < i + diag; ++j) o[p++] = from_f32<T>(s.mat[i * s.npad + j]);
        }
    }
}

// dZ[i][j] = g for each output pair (i, j); Z[i][j] = T[i] . T[j] gives dT[i] += g T[j] and
// dT[j] += g T[i], so G = dZ + dZ^T (2g on the diagonal) and dT = G T.
template <typename T>
void dot_interaction_backward(const T* x, const T* const* embs, const T* dout, int64_t K, int64_t B,
                              int64_t D, bool self, T* dx, T* const* dembs) {
    const int64_t width = D + dot_interaction_pairs(K, self), diag = self ? 1 : 0;
#pragma omp parallel if (B * (K + 1) * D >= parallel_min_elems(kParallelMinElems))
    {
        Scratch s(K, D);
        const int64_t n = s.n;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            s.gather(x, embs, b);
            const T* g = dout + b * width;
            std::fill(s.mat.begin(), s.mat.begin() + n * n, 0.0f);
            int64_t p = D;
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < i + diag; ++j) {
                    const float v = to_f32(g[p++]);
                    s.mat[i * n + j] += v;
                    s.mat[j * n + i] += v;
                }
            for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
                for_each_vec(D, [&](int64_t j, int64_t m) {
                    V16 acc[kRowBlock];
                    dt_block(s, i0, j, m, acc);
                    for (int64_t r = 0; r < kRowBlock && i0 + r < n; ++r) {
                        const int64_t i = i0 + r;
                        if (i == 0)
                            store_part(dx + b * D + j, acc[r] + load_part(g + j, m), m);
                        else
                            store_part(dembs[i - 1] + b * D + j, acc[r], m);
                    }
                });
            }
        }
    }
}

#define ZT_INSTANTIATE(T)                                                                          \
    template void dot_interaction_forward<T>(const T*, const T* const*, int64_t, int64_t, int64_t, \
                                             bool, T*);                                            \
    template void dot_interaction_backward<T>(const T*, const T* const*, const T*, int64_t,        \
                                              int64_t, int64_t, bool, T*, T* const*);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(bf16)
ZT_INSTANTIATE(f16)
#undef ZT_INSTANTIATE

}  // namespace zt::kernels
