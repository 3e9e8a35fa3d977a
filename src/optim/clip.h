// Gradient clipping by global L2 norm, DeepSpeed/PyTorch style: coef = max_norm / (norm + 1e-6),
// applied only when below 1. The norm is deterministic: it gives the same bits for any thread
// count (Note [Deterministic norm] in clip.cpp). Across ranks, callers add the squared norms of
// their shards in rank order; grad_sq_sum_l2 is the per-shard piece for that.
#pragma once

#include <cstdint>

namespace zt {

constexpr int64_t kGradNormChunk = 1 << 14;  // elements summed per chunk, in double

// Sum of g[i]^2 in double over (n,) f32; grad_norm_l2 is its square root. Non-finite values
// propagate (inf or nan), so callers can detect overflow from the norm.
double grad_sq_sum_l2(const float* g, int64_t n);
double grad_norm_l2(const float* g, int64_t n);

// Scale to apply to the gradients: max_norm / (norm + 1e-6) when that is below 1, else 1.
// Returns 1 when clipping is off (max_norm <= 0) or the norm is not finite (the step is skipped
// for overflow instead of scaling by 0 or nan).
float clip_coefficient(double norm, double max_norm);

// g *= s over (n,) f32.
void scale(float* g, int64_t n, float s);

}  // namespace zt
