// LayerNorm over the last dimension (see layernorm.h): two-pass mean and biased variance per row,
// rows in parallel. Backward sums dgamma and dbeta per chunk of kChunkRows rows, then adds the
// chunks in order (Note [chunked column sums]), so they do not depend on the thread count.
#include "tensor/kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 14;  // below this, one thread is faster

// Note [chunked column sums]: a parameter gradient that sums over rows (dgamma, dbeta) is reduced
// in chunks of a fixed number of rows, each chunk in row order into its own partial row, and the
// partials are then added in chunk order. Chunks depend only on N, not on the threads that run
// them, so the bits are the same for any thread count, and dy and x are still read only once.
constexpr int64_t kChunkRows = 32;

struct Sums {
    V16 dxhat, dxhat_xhat;  // sum dxhat, sum dxhat * xhat
};

// One row of the input gradient; adds dy * xhat and dy into the chunk partials pg, pb: (C).
template <typename T>
void backward_row(const T* dy, const T* x, const T* gamma, float mean, float rstd, T* dx, float* pg,
                  float* pb, int64_t C) {
    const V16 mv = splat(mean), rv = splat(rstd);
    const Sums s = reduce_row(
        C, Sums{zero(), zero()},
        [&](Sums a, int64_t j, int64_t n) {
            V16 xhat = (load_part(x + j, n, mean) - mv) * rv;  // padded lanes: 0
            V16 dxhat = load_part(dy + j, n) * load_part(gamma + j, n);
            return Sums{a.dxhat + dxhat, fma(dxhat, xhat, a.dxhat_xhat)};
        },
        [](Sums a, Sums b) {
            return Sums{a.dxhat + b.dxhat, a.dxhat_xhat + b.dxhat_xhat};
        });
    const V16 a = splat(hsum(s.dxhat) / static_cast<float>(C));
    const V16 b = splat(hsum(s.dxhat_xhat) / static_cast<float>(C));
    for_each_vec(C, [&](int64_t j, int64_t n) {
        V16 xhat = (load_part(x + j, n) - mv) * rv;
        V16 g = load_part(dy + j, n);  // read before dx is written: dx may alias dy
        V16 dxhat = g * load_part(gamma + j, n);
        store_part(dx + j, (dxhat - a - xhat * b) * rv, n);
        store_part(pg + j, fma(g, xhat, load_part(pg + j, n)), n);
        store_part(pb + j, load_part(pb + j, n) + g, n);
    });
}

}  // namespace

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                       int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) {
        const T* xr = x + i * C;
        T* yr = y + i * C;
        const float inv_c = 1.0f / static_cast<float>(C);
        const float m = inv_c * sum_row(C, [&](V16 a, int64_t j, int64_t n) {
                            return a + load_part(xr + j, n);
                        });
        const V16 mv = splat(m);
        const float var = inv_c * sum_row(C, [&](V16 a, int64_t j, int64_t n) {
                              V16 d = load_part(xr + j, n, m) - mv;  // padded lanes: 0
                              return fma(d, d, a);
                          });
        const float r = 1.0f / std::sqrt(var + eps);
        const V16 rv = splat(r);
        for_each_vec(C, [&](int64_t j, int64_t n) {
            V16 xhat = (load_part(xr + j, n) - mv) * rv;
            store_part(yr + j, fma(xhat, load_part(gamma + j, n), load_part(beta + j, n)), n);
        });
        mean[i] = m;
        rstd[i] = r;
    }
}

template <typename T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const float* mean,
                        const float* rstd, T* dx, float* dgamma, float* dbeta, int64_t N,
                        int64_t C) {
    const int64_t chunks = (N + kChunkRows - 1) / kChunkRows;
    std::vector<float> part(static_cast<size_t>(2 * chunks * C), 0.0f);  // per chunk: pg then pb
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t k = 0; k < chunks; ++k) {
        float* pg = part.data() + 2 * k * C;
        for (int64_t i = k * kChunkRows; i < std::min(N, (k + 1) * kChunkRows); ++i)
            backward_row(dy + i * C, x + i * C, gamma, mean[i], rstd[i], dx + i * C, pg, pg + C, C);
    }
    for_each_vec(C, [&](int64_t j, int64_t n) {
        V16 g = zero(), b = zero();
        for (int64_t k = 0; k < chunks; ++k) {
            g = g + load_part(part.data() + 2 * k * C + j, n);
            b = b + load_part(part.data() + (2 * k + 1) * C + j, n);
        }
        store_part(dgamma + j, load_part(dgamma + j, n) + g, n);
        store_part(dbeta + j, load_part(dbeta + j, n) + b, n);
    });
}

template void layernorm_forward<float>(const float*, const float*, const float*, float*, float*,
                                       float*, int64_t, int64_t, float);
template void layernorm_forward<bf16>(const bf16*, const bf16*, const bf16*, bf16*, float*, float*,
                                      int64_t, int64_t, float);
template void layernorm_backward<float>(const float*, const float*, const float*, const float*,
                                        const float*, float*, float*, float*, int64_t, int64_t);
template void layernorm_backward<bf16>(const bf16*, const bf16*, const bf16*, const float*,
                                       const float*, bf16*, float*, float*, int64_t, int64_t);
template void layernorm_forward<f16>(const f16*, const f16*, const f16*, f16*, float*, float*,
                                     int64_t, int64_t, float);
template void layernorm_backward<f16>(const f16*, const f16*, const f16*, const float*,
                                      const float*, f16*, float*, float*, int64_t, int64_t);

}  // namespace zt::kernels
