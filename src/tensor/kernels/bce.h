// Binary cross-entropy with logits, PyTorch's stable form, per element.
// forward  logits: (N), labels: (N) f32 in [0, 1] -> losses: (N) f32,
//          loss = max(z, 0) - z y + log1p(exp(-|z|)) (finite for any finite z).
// backward dlogits: (N) written (=): scale * (sigmoid(z) - y), sigmoid evaluated without overflow.
// T is float, bf16 or f16; math in f32.
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void bce_with_logits_forward(const T* logits, const float* labels, float* losses, int64_t N);
template <typename T>
void bce_with_logits_backward(const T* logits, const float* labels, float scale, T* dlogits,
                              int64_t N);

}  // namespace zt::kernels
