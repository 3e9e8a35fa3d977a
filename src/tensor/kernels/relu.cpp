// ReLU kernels (see relu.h): selects, not arithmetic, so outputs are copies of input bits and
// bf16 needs no rounding. Blocks of kElemBlock run in parallel.
#include "tensor/kernels/relu.h"

#include "tensor/kernels/vec16.h"

namespace zt::kernels {

namespace {

constexpr int64_t kParallelMinElems = 1 << 15;  // below this, one thread is faster

template <typename F>
void for_each_range(int64_t n, F f) {
    const int64_t blocks = (n + vec::kElemBlock - 1) / vec::kElemBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElems)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * vec::kElemBlock;
        f(begin, n - begin < vec::kElemBlock ? n : begin + vec::kElemBlock);
    }
}

}  // namespace

template <typename T>
void relu_forward(const T* x, T* y, int64_t n) {
    for_each_range(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) y[i] = to_f32(x[i]) <= 0.0f ? T{} : x[i];
    });
}

template <typename T>
void relu_backward(const T* x, const T* dy, T* dx, int64_t n) {
    for_each_range(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dx[i] = to_f32(x[i]) > 0.0f ? dy[i] : T{};
    });
}

#define ZT_INSTANTIATE(T)                                 \
    template void relu_forward<T>(const T*, T*, int64_t); \
    template void relu_backward<T>(const T*, const T*, T*, int64_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(bf16)
ZT_INSTANTIATE(f16)
#undef ZT_INSTANTIATE

}  // namespace zt::kernels
