// BCE with logits (see bce.h). N is a batch of click labels (thousands), so plain loops: the exp
// and log1p are the cost, and the compiler vectorizes what it can.
#include "tensor/kernels/bce.h"

#include <cmath>

#include "tensor/dtype.h"
#include "tensor/threads.h"

namespace zt::kernels {

namespace {

constexpr int64_t kParallelMinElems = 1 << 15;  // below this, one thread is faster

// 1 / (1 + e^-z) with the exponent never positive: e^-z for z >= 0, e^z / (1 + e^z) below.
inline float sigmoid(float z) {
    if (z >= 0.0f) return 1.0f / (1.0f + std::exp(-z));
    const float e = std::exp(z);
    return e / (1.0f + e);
}

}  // namespace

template <typename T>
void bce_with_logits_forward(const T* logits, const float* labels, float* losses, int64_t N) {
#pragma omp parallel for schedule(static) if (N >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i) {
        const float z = to_f32(logits[i]);
        losses[i] = std::fmax(z, 0.0f) - z * labels[i] + std::log1p(std::exp(-std::fabs(z)));
    }
}

template <typename T>
void bce_with_logits_backward(const T* logits, const float* labels, float scale, T* dlogits,
                              int64_t N) {
#pragma omp parallel for schedule(static) if (N >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i)
        dlogits[i] = from_f32<T>(scale * (sigmoid(to_f32(logits[i])) - labels[i]));
}

#define ZT_INSTANTIATE(T)                                                              \
    template void bce_with_logits_forward<T>(const T*, const float*, float*, int64_t); \
    template void bce_with_logits_backward<T>(const T*, const float*, float, T*, int64_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(bf16)
ZT_INSTANTIATE(f16)
#undef ZT_INSTANTIATE

}  // namespace zt::kernels
