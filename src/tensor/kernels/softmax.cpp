// Row softmax (see softmax.h), rows in parallel. Forward: max, then exp(x - max) into a per-thread
// f32 row with its sum, then the scaled write (one exp per element, and bf16 rounds only once).
// Backward: dx = y (dy - sum(y dy)). x and y, dy and dx may alias.
#include "tensor/kernels/softmax.h"

#include <limits>
#include <vector>

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"

namespace zt::kernels {

using namespace vec;

namespace {
constexpr int64_t kParallelMinElems = 1 << 14;  // below this, one thread is faster
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

template <typename T>
void softmax_forward(const T* x, T* y, int64_t N, int64_t C) {
#pragma omp parallel if (N * C >= parallel_min_elems(kParallelMinElems))
    {
        std::vector<float> e(static_cast<size_t>(C));  // this thread's exp(x - max) of one row
#pragma omp for schedule(static)
        for (int64_t i = 0; i < N; ++i) {
            const T* xr = x + i * C;
            T* yr = y + i * C;
            const V16 mv = splat(hmax(reduce_row(
                C, neg_inf(),
                [&](V16 a, int64_t j, int64_t n) { return max(a, load_part(xr + j, n, kNegInf)); },
                [](V16 a, V16 b) { return max(a, b); })));
            const float s = sum_row(C, [&](V16 a, int64_t j, int64_t n) {
                V16 ev = exp(load_part(xr + j, n, kNegInf) - mv);  // padded lanes: exp(-inf) = 0
                store_part(e.data() + j, ev, n);
                return a + ev;
            });
            const V16 inv = splat(1.0f / s);
            for_each_vec(C, [&](int64_t j, int64_t n) {
                store_part(yr + j, load_part(e.data() + j, n) * inv, n);
            });
        }
    }
}

template <typename T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) {
        const T* yr = y + i * C;
        const T* dyr = dy + i * C;
        T* dxr = dx + i * C;
        const V16 dot = splat(sum_row(C, [&](V16 a, int64_t j, int64_t n) {
            return fma(load_part(yr + j, n), load_part(dyr + j, n), a);
        }));
        for_each_vec(C, [&](int64_t j, int64_t n) {
            store_part(dxr + j, load_part(yr + j, n) * (load_part(dyr + j, n) - dot), n);
        });
    }
}

template void softmax_forward<float>(const float*, float*, int64_t, int64_t);
template void softmax_forward<bf16>(const bf16*, bf16*, int64_t, int64_t);
template void softmax_backward<float>(const float*, const float*, float*, int64_t, int64_t);
template void softmax_backward<bf16>(const bf16*, const bf16*, bf16*, int64_t, int64_t);
template void softmax_forward<f16>(const f16*, f16*, int64_t, int64_t);
template void softmax_backward<f16>(const f16*, const f16*, f16*, int64_t, int64_t);

}  // namespace zt::kernels
