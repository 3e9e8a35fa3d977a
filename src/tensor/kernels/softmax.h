// Row softmax over the last dimension. T is float or bf16; math is f32.
// forward x: (N, C) -> y: (N, C); backward (y, dy) -> dx: (N, C) written (=).
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void softmax_forward(const T* x, T* y, int64_t N, int64_t C);
template <typename T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C);

}  // namespace zt::kernels
