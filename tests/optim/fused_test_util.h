// Inputs and bit comparisons shared by the fused-kernel tests (adagrad_test, lion_test): weights
// over many magnitudes, gradients with tiny entries, odd segments with gaps, the first differing
// element of two buffers.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "optim/optimizer.h"

namespace zt::fused_test {

// Weights over many magnitudes (1e-9 .. 1e5), so the copies meet f16 subnormals and overflow and
// bf16 ties; a few f32 denormals and zeros.
inline std::vector<float> spread_weights(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> expo(-9.0f, 5.0f);
    std::vector<float> p(n);
    for (int64_t i = 0; i < n; ++i) p[i] = normal(rng) * std::pow(10.0f, expo(rng));
    for (int64_t i = 5; i < n; i += 97) p[i] = 3e-40f * float(i % 5 - 2);  // denormal or zero
    return p;
}

// Normal gradients, every seventh tiny, every 101st exactly zero.
inline std::vector<float> grads(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = normal(rng) * (i % 7 == 3 ? 1e-8f : 1.0f);
    for (int64_t i = 2; i < n; i += 101) g[i] = 0.0f;
    return g;
}

// Segments of odd lengths, decay on and off, with gaps between some (elements no segment covers
// must stay untouched, the copy included).
inline std::vector<OptimSegment> odd_segments(int64_t n) {
    std::vector<OptimSegment> segs;
    const int64_t sizes[] = {13, 5, 101, 1, 29, 3};
    int64_t off = 0;
    for (int k = 0; off < n; ++k) {
        const int64_t len = std::min<int64_t>(sizes[k % 6] * (1 + n / 300), n - off);
        segs.push_back({off, len, k % 2 == 0});
        off += len + (k % 4 == 3 ? 2 : 0);  // a gap of 2 after every fourth segment
    }
    return segs;
}

template <typename T>
int64_t first_diff(const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) return -2;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return int64_t(i);
    return -1;
}

// The OpenMP team a parallel region gets now.
inline int team_size() {
    int team = 0;
#pragma omp parallel
#pragma omp single
    team = omp_get_num_threads();
    return team;
}

constexpr uint16_t kUntouched16 = 0x1234;
constexpr float kUntouched32 = -12345.0f;

// The compute copy of a test: both buffers, one of them used.
struct CopyBuffers {
    std::vector<uint16_t> c16;
    std::vector<float> c32;
    explicit CopyBuffers(int64_t n) : c16(n, kUntouched16), c32(n, kUntouched32) {}
    ComputeCopy as(bool copy, DType dtype) {
        if (!copy) return {};
        return {
            dtype == DType::kF32 ? static_cast<void*>(c32.data()) : static_cast<void*>(c16.data()),
            dtype};
    }
    // Element i of p written as the copy's dtype would be.
    void write(int64_t i, float p, bool copy, DType dtype) {
        if (!copy) return;
        if (dtype == DType::kBF16) c16[i] = f32_to_bf16(p).bits;
        if (dtype == DType::kF16) c16[i] = f32_to_f16(p).bits;
        if (dtype == DType::kF32) c32[i] = p;
    }
};

}  // namespace zt::fused_test
