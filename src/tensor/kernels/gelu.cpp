// GELU with the tanh approximation (see gelu.h), elementwise over blocks run in parallel.
// Uses 0.5 (1 + tanh(u)) = sigmoid(2u), so y = x / (1 + exp(-2u)) needs one exp and stays exact in
// both tails (exp overflowing to inf gives y = -0, its gradient 0).
#include "tensor/kernels/gelu.h"

#include "tensor/kernels/vec16.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 15;  // below this, one thread is faster
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// s = sigmoid(2u) = 0.5 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); also returns u' = du/dx.
inline V16 half_one_plus_tanh(V16 x, V16* du) {
    const V16 k = splat(kSqrt2OverPi);
    V16 x2 = x * x;
    V16 u = k * fma(splat(kCubic) * x2, x, x);
    if (du) *du = k * fma(splat(3.0f * kCubic), x2, splat(1.0f));
    return splat(1.0f) / (splat(1.0f) + exp(splat(-2.0f) * u));
}

template <typename F>
void for_each_block(int64_t n, F f) {
    vec::for_each_block(n, kParallelMinElems, f);
}

}  // namespace

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n) {
    for_each_block(n, [&](int64_t i, int64_t m) {
        V16 xv = load_part(x + i, m);
        store_part(y + i, xv * half_one_plus_tanh(xv, nullptr), m);
    });
}

// dy/dx = s + x * 2 s (1 - s) * u', since d tanh(u) = (1 - tanh^2) du = 4 s (1 - s) du.
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n) {
    for_each_block(n, [&](int64_t i, int64_t m) {
        V16 xv = load_part(x + i, m), du;
        V16 s = half_one_plus_tanh(xv, &du);
        V16 ds = splat(2.0f) * s * (splat(1.0f) - s);
        store_part(dx + i, load_part(dy + i, m) * fma(xv * ds, du, s), m);
    });
}

template void gelu_forward<float>(const float*, float*, int64_t);
template void gelu_forward<bf16>(const bf16*, bf16*, int64_t);
template void gelu_backward<float>(const float*, const float*, float*, int64_t);
template void gelu_backward<bf16>(const bf16*, const bf16*, bf16*, int64_t);
template void gelu_forward<f16>(const f16*, f16*, int64_t);
template void gelu_backward<f16>(const f16*, const f16*, f16*, int64_t);

}  // namespace zt::kernels
