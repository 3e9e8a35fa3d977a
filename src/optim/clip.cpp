#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "tensor/threads.h"
#include "util/error.h"

namespace zt {

// Note [Deterministic norm]
// The range is cut into fixed chunks of kGradNormChunk elements, independent of the thread count.
// Each chunk's sum of squares is taken in double by one thread with a fixed lane pattern (16
// accumulators, combined in a fixed tree); the chunk sums are then added in chunk order by one
// thread. Threads only decide who computes a chunk, never how it is added, so 1 and N threads
// give the same bits. Chunks go in batches of kChunkBatch so the partial sums fit on the stack.

namespace {

constexpr int kLanes = 16;  // two AVX-512 registers of doubles

// g: (n,) with n <= kGradNormChunk.
double chunk_sq_sum(const float* __restrict g, int64_t n) {
    double acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
        for (int k = 0; k < kLanes; ++k) {
            const double x = g[i + k];
            acc[k] += x * x;
        }
    }
    for (int k = 0; i < n; ++i, ++k) {
        const double x = g[i];
        acc[k] += x * x;
    }
    for (int width = kLanes / 2; width >= 1; width /= 2)  // fixed pairwise tree
        for (int k = 0; k < width; ++k) acc[k] = acc[k] + acc[k + width];
    return acc[0];
}

}  // namespace

double grad_sq_sum_l2(const float* g, int64_t n) {
    ZT_ASSERT(n >= 0);
    return sum_over_chunks(
        n, [g](int64_t begin, int64_t len) { return chunk_sq_sum(g + begin, len); });
}

double grad_norm_l2(const float* g, int64_t n) { return std::sqrt(grad_sq_sum_l2(g, n)); }

float clip_coefficient(double norm, double max_norm) {
    if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0f;
    const double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

void scale(float* g, int64_t n, float s) {
    ZT_ASSERT(n >= 0);
    constexpr int64_t kParallelMinNumel = 2 * kGradNormChunk;  // below this, one thread
#pragma omp parallel for simd schedule(static) if (n >= parallel_min_elems(kParallelMinNumel))
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] * s;
}

}  // namespace zt
