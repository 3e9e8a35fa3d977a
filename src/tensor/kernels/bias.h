// Bias over rows: y: (N, C) += b: (C); backward db: (C) f32 += sum over rows of dy.
// T is float or bf16. The row sum is done per column in a fixed order (deterministic).
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void bias_add(T* y, const T* b, int64_t N, int64_t C);
template <typename T>
void bias_backward(const T* dy, float* db, int64_t N, int64_t C);

}  // namespace zt::kernels
