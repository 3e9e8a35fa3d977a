// Global L2 norm against a double reference and bitwise independent of the thread count; the
// clip coefficient (DeepSpeed/PyTorch: max_norm / (norm + 1e-6), only below 1); scale.
#include "optim/clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tensor/threads.h"

namespace zt {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Magnitudes spread over 12 decades, so the order of additions changes the low bits.
    float decade[13];
    for (int k = 0; k < 13; ++k) decade[k] = std::pow(10.0f, float(k) - 6.0f);
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = normal(rng) * decade[i % 13];
    return g;
}

double ref_norm(const std::vector<float>& g) {
    long double s = 0.0L;
    for (float x : g) s += static_cast<long double>(x) * x;
    return static_cast<double>(std::sqrt(s));
}

TEST(GradNorm, MatchesDoubleReference) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(37), int64_t(1031), 3 * kGradNormChunk + 5}) {
        const std::vector<float> g = random_values(n, 5);
        const double ref = ref_norm(g);
        // Double sums of f32 squares: relative error seen below 1e-15.
        EXPECT_NEAR(grad_norm_l2(g.data(), n), ref, 1e-13 * ref) << "n=" << n;
        EXPECT_NEAR(grad_sq_sum_l2(g.data(), n), ref * ref, 1e-13 * ref * ref) << "n=" << n;
    }
}

TEST(GradNorm, SameBitsForOneAndTwoThreads) {
    // Spans several chunks and more than one chunk batch, with a ragged last chunk.
    const int64_t n = 1100 * kGradNormChunk + 777;
    const std::vector<float> g = random_values(n, 9);
    set_num_threads(1);
    const double one = grad_norm_l2(g.data(), n);
    set_num_threads(2);
    const double two = grad_norm_l2(g.data(), n);
    set_num_threads(1);
    EXPECT_EQ(one, two);  // bitwise, not near
    EXPECT_NEAR(one, ref_norm(g), 1e-12 * one);
}

TEST(GradNorm, NonFiniteValuesPropagate) {
    std::vector<float> g(1031, 1.0f);
    g[500] = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(std::isinf(grad_norm_l2(g.data(), 1031)));
    g[500] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(grad_norm_l2(g.data(), 1031)));
}

TEST(ClipCoefficient, DeepSpeedFormula) {
    EXPECT_EQ(clip_coefficient(10.0, 1.0), static_cast<float>(1.0 / (10.0 + 1e-6)));
    EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
    EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0f);
    // norm == max_norm: the coefficient is just below 1 and is applied, as in DeepSpeed.
    EXPECT_EQ(clip_coefficient(2.0, 2.0), static_cast<float>(2.0 / (2.0 + 1e-6)));
    EXPECT_LT(clip_coefficient(2.0, 2.0), 1.0f);
    // Off, or a norm that is not finite (the step is skipped instead): no scaling.
    EXPECT_EQ(clip_coefficient(10.0, 0.0), 1.0f);
    EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 1.0f);
    EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::quiet_NaN(), 1.0), 1.0f);
}

TEST(ClipScale, ScalesEveryElement) {
    for (int64_t n : {int64_t(37), int64_t(1031), int64_t(70001)}) {
        std::vector<float> g = random_values(n, 2);
        const std::vector<float> before = g;
        const float s = clip_coefficient(grad_norm_l2(g.data(), n), 0.25);
        ASSERT_LT(s, 1.0f);
        scale(g.data(), n, s);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[i], before[i] * s) << i;
        // The clipped norm is max_norm, up to the 1e-6 in the denominator and f32 rounding.
        EXPECT_NEAR(grad_norm_l2(g.data(), n), 0.25, 1e-6);
    }
}

}  // namespace
}  // namespace zt
