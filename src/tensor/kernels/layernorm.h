// LayerNorm over the last dimension. T is float or bf16 (storage); math is f32.
// forward  x: (N, C), gamma, beta: (C) -> y: (N, C); saves mean, rstd: (N) f32.
// backward dy: (N, C) -> dx: (N, C) written (=); dgamma, dbeta: (C) f32 accumulated (+=).
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                       int64_t N, int64_t C, float eps);
template <typename T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const float* mean,
                        const float* rstd, T* dx, float* dgamma, float* dbeta, int64_t N, int64_t C);

}  // namespace zt::kernels
