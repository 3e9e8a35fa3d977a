// ReLU, elementwise over n values.
// forward  x -> y = x where x > 0, else +0 (NaN passes through, as in PyTorch).
// backward dx = dy where x > 0, else +0 (written, =); the gradient at exactly 0 is 0.
// T is float, bf16 or f16; values pass through bit for bit, nothing is rounded.
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void relu_forward(const T* x, T* y, int64_t n);
template <typename T>
void relu_backward(const T* x, const T* dy, T* dx, int64_t n);

}  // namespace zt::kernels
