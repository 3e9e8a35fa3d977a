// Fused softmax + cross-entropy (see cross_entropy.h), rows in parallel. The forward reads each row
// once (Note [one-pass log-sum-exp]); the backward recomputes softmax from the saved lse in one
// pass, so probabilities never exist apart from dlogits. dlogits may alias logits.
#include "tensor/kernels/cross_entropy.h"

#include <cfloat>
#include <cmath>
#include <limits>

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 14;  // below this, one thread is faster
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Note [one-pass log-sum-exp]: each lane keeps a running max m and a sum s of exp(x - m). The row
// goes by blocks of kBlock logits (1 KiB in f32, so the block is still in L1 when read again): take
// the block's max, rescale s once to the new max, then add the block's exponentials. One exp per
// logit plus one per block, and the row crosses the memory bus once. m starts at -FLT_MAX, not
// -inf, so m - max(m, .) is never -inf - -inf.
constexpr int64_t kBlock = 16 * kLanes;

template <typename T>
float row_log_sum_exp(const T* x, int64_t V) {
    V16 m = splat(-FLT_MAX), s = zero();
    for (int64_t j = 0; j < V; j += kBlock) {
        const int64_t n = V - j;  // logits left; the block covers min(n, kBlock)
        V16 bm = m;
        if (n >= kBlock) {
            V16 bm1 = m;  // two max chains: one would be bound by its latency
            for (int64_t k = 0; k < kBlock; k += 2 * kLanes) {
                bm = max(bm, load(x + j + k));
                bm1 = max(bm1, load(x + j + k + kLanes));
            }
            bm = max(bm, bm1);
            s = s * exp(m - bm);
            for (int64_t k = 0; k < kBlock; k += kLanes) s = s + exp(load(x + j + k) - bm);
        } else {
            for (int64_t k = 0; k < n; k += kLanes)
                bm = max(bm, load_part(x + j + k, n - k, kNegInf));
            s = s * exp(m - bm);
            for (int64_t k = 0; k < n; k += kLanes)
                s = s + exp(load_part(x + j + k, n - k, kNegInf) - bm);  // padded lanes add 0
        }
        m = bm;
    }
    const float mx = hmax(m);
    return mx + std::log(hsum(s * exp(m - splat(mx))));
}

void check_targets(const int32_t* targets, int64_t N, int64_t V) {
    for (int64_t i = 0; i < N; ++i)
        ZT_CHECK(targets[i] < V, "cross_entropy: target ", targets[i], " at row ", i,
                 " is out of range for vocabulary size ", V,
                 "; targets must be < vocab_size (negative targets are ignored)");
}

}  // namespace

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, float* losses, float* lse,
                           int64_t N, int64_t V) {
    check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (N * V >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) {
        const T* x = logits + i * V;
        const float l = row_log_sum_exp(x, V);
        lse[i] = l;
        losses[i] = targets[i] < 0 ? 0.0f : l - to_f32(x[targets[i]]);
    }
}

// Row i of dlogits: dloss * (exp(x - lse) - onehot(t)); t < 0: no onehot. x may alias d.
template <typename T>
void softmax_grad_row(const T* x, T* d, int32_t t, float dloss, float lse, int64_t V) {
    const float xt = t >= 0 ? to_f32(x[t]) : 0.0f;  // read before the row is overwritten
    const V16 g = splat(dloss), l = splat(lse);
    for_each_vec(V, [&](int64_t j, int64_t n) {
        store_part(d + j, g * exp(load_part(x + j, n) - l), n);
    });
    if (t >= 0) d[t] = from_f32<T>(dloss * (std::exp(xt - lse) - 1.0f));
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const float* lse,
                            const float* dloss, T* dlogits, int64_t N, int64_t V) {
    check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (N * V >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) {
        T* d = dlogits + i * V;
        if (targets[i] < 0) {
            for_each_vec(V, [&](int64_t j, int64_t n) { store_part(d + j, zero(), n); });
            continue;
        }
        softmax_grad_row(logits + i * V, d, targets[i], dloss[i], lse[i], V);
    }
}

template <typename T>
void log_sum_exp_rows(const T* logits, float* lse, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) lse[i] = row_log_sum_exp(logits + i * V, V);
}

template <typename T>
void cross_entropy_backward_slice(const T* logits, const int32_t* targets, const float* lse,
                                  const float* dloss, T* dlogits, int64_t N, int64_t V) {
    check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if (N * V >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i)
        softmax_grad_row(logits + i * V, dlogits + i * V, targets[i], dloss[i], lse[i], V);
}

#define ZT_CE_SLICE(T)                                                                    \
    template void log_sum_exp_rows<T>(const T*, float*, int64_t, int64_t);                \
    template void cross_entropy_backward_slice<T>(const T*, const int32_t*, const float*, \
                                                  const float*, T*, int64_t, int64_t);
ZT_CE_SLICE(float)
ZT_CE_SLICE(bf16)
ZT_CE_SLICE(f16)
#undef ZT_CE_SLICE

template void cross_entropy_forward<float>(const float*, const int32_t*, float*, float*, int64_t,
                                           int64_t);
template void cross_entropy_forward<bf16>(const bf16*, const int32_t*, float*, float*, int64_t,
                                          int64_t);
template void cross_entropy_backward<float>(const float*, const int32_t*, const float*,
                                            const float*, float*, int64_t, int64_t);
template void cross_entropy_backward<bf16>(const bf16*, const int32_t*, const float*, const float*,
                                           bf16*, int64_t, int64_t);
template void cross_entropy_forward<f16>(const f16*, const int32_t*, float*, float*, int64_t,
                                         int64_t);
template void cross_entropy_backward<f16>(const f16*, const int32_t*, const float*, const float*,
                                          f16*, int64_t, int64_t);

}  // namespace zt::kernels
