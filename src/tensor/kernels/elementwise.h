// Elementwise kernels on contiguous tensors of one dtype (f32 math inside, any storage dtype).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace zt::kernels {

// a += b (same numel; b may have another dtype).
void add_inplace(Tensor& a, const Tensor& b);
// y = a + b, all the same shape and dtype.
void add(const Tensor& a, const Tensor& b, Tensor& y);
// x *= s.
void scale_inplace(Tensor& x, float s);
// True when no element is NaN or infinite.
bool all_finite(const Tensor& x);
// acc (f32) += x (any dtype), n elements.
void accumulate_f32(float* acc, const void* x, DType dtype, int64_t n);

}  // namespace zt::kernels
