// GELU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// forward x: (n) -> y: (n); backward (x, dy) -> dx written (=). T is float or bf16.
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n);
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n);

}  // namespace zt::kernels
