// Gradient clipping by global L2 norm, DeepSpeed/PyTorch style: coef = max_norm / (norm + 1e-6),
// applied only when below 1. The norm is deterministic: it gives the same bits for any thread
// count (Note [Deterministic norm] in clip.cpp). Across ranks, callers add the squared norms of
// their shards in rank order; grad_sq_sum_l2 is the per-shard piece for that.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor/threads.h"

namespace zt {

constexpr int64_t kGradNormChunk = 1 << 14;  // elements summed per chunk, in double

// Sums chunk(begin, length) over fixed chunks of kGradNormChunk elements of a range of n, chunks in
// parallel and their sums added in order, so the result does not depend on the thread count
// (Note [Deterministic norm] in clip.cpp). chunk returns a double.
template <typename ChunkFn>
double sum_over_chunks(int64_t n, ChunkFn chunk) {
    constexpr int64_t kChunkBatch = 1024;                      // chunks per parallel batch
    constexpr int64_t kParallelMinNumel = 2 * kGradNormChunk;  // below this, one thread
    const int64_t chunks = (n + kGradNormChunk - 1) / kGradNormChunk;
    double total = 0.0;
    double part[kChunkBatch];
    for (int64_t c0 = 0; c0 < chunks; c0 += kChunkBatch) {
        const int64_t nc = std::min(kChunkBatch, chunks - c0);
        const int64_t batch_numel = std::min(n - c0 * kGradNormChunk, nc * kGradNormChunk);
#pragma omp parallel for schedule(static) if (batch_numel >= parallel_min_elems(kParallelMinNumel))
        for (int64_t c = 0; c < nc; ++c) {
            const int64_t begin = (c0 + c) * kGradNormChunk;
            part[c] = chunk(begin, std::min(kGradNormChunk, n - begin));
        }
        for (int64_t c = 0; c < nc; ++c) total += part[c];
    }
    return total;
}

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
