// Internal to the attention kernels: causal attention on bf16 tensors with bf16 dot products
// (AVX512_BF16's vdpbf16ps) instead of f32 FMAs on widened operands (Note [bf16 dot products in
// attention] in attention_dot.cpp). attention.cpp decides which runs.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/kernels/attention_common.h"

namespace zt::kernels::attn {

// Whether this build has the dot-product kernels (compiled for AVX512_BF16).
bool dot_available();
// Floats of one thread's scratch (a multiple of 16).
int64_t dot_slab_floats(const Dims& d);
void dot_forward(const bf16* qkv, bf16* out, float* lse, const Dims& d, void* workspace);
void dot_backward(const bf16* qkv, const bf16* out, const bf16* dout, const float* lse, bf16* dqkv,
                  const Dims& d, void* workspace);

}  // namespace zt::kernels::attn
