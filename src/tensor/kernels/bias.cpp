// Bias over rows (see bias.h). bias_add runs rows in parallel; bias_backward runs blocks of
// kBlockCols columns in parallel, each summing its columns over all rows in row order, so db does
// not depend on the thread count.
#include "tensor/kernels/bias.h"

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"

namespace zt::kernels {

using namespace vec;

namespace {
constexpr int64_t kParallelMinElems = 1 << 15;  // below this, one thread is faster
constexpr int64_t kBlockCols = 4 * kLanes;      // four independent accumulators per row
}  // namespace

template <typename T>
void bias_add(T* y, const T* b, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) {
        T* yr = y + i * C;
        for_each_vec(C, [&](int64_t j, int64_t n) {
            store_part(yr + j, load_part(yr + j, n) + load_part(b + j, n), n);
        });
    }
}

template <typename T>
void bias_backward(const T* dy, float* db, int64_t N, int64_t C) {
    const int64_t blocks = (C + kBlockCols - 1) / kBlockCols;
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t cb = 0; cb < blocks; ++cb) {
        const int64_t c0 = cb * kBlockCols, n = C - c0;  // n: columns left from c0
        V16 a0 = zero(), a1 = zero(), a2 = zero(), a3 = zero();
        for (int64_t i = 0; i < N; ++i) {
            const T* r = dy + i * C + c0;
            a0 = a0 + load_part(r, n);
            a1 = a1 + load_part(r + kLanes, n - kLanes);
            a2 = a2 + load_part(r + 2 * kLanes, n - 2 * kLanes);
            a3 = a3 + load_part(r + 3 * kLanes, n - 3 * kLanes);
        }
        float* d = db + c0;
        store_part(d, load_part(d, n) + a0, n);
        store_part(d + kLanes, load_part(d + kLanes, n - kLanes) + a1, n - kLanes);
        store_part(d + 2 * kLanes, load_part(d + 2 * kLanes, n - 2 * kLanes) + a2, n - 2 * kLanes);
        store_part(d + 3 * kLanes, load_part(d + 3 * kLanes, n - 3 * kLanes) + a3, n - 3 * kLanes);
    }
}

template void bias_add<float>(float*, const float*, int64_t, int64_t);
template void bias_add<bf16>(bf16*, const bf16*, int64_t, int64_t);
template void bias_backward<float>(const float*, float*, int64_t, int64_t);
template void bias_backward<bf16>(const bf16*, float*, int64_t, int64_t);
template void bias_add<f16>(f16*, const f16*, int64_t, int64_t);
template void bias_backward<f16>(const f16*, float*, int64_t, int64_t);

}  // namespace zt::kernels
