// ops::bce_with_logits against PyTorch's stable formula in double, including |z| = 50 (finite,
// no overflow) and soft labels, its gradient (sigmoid(z) - y) / B against the formula and finite
// differences, (B) and (B, 1) logits, bf16 logits; ops::relu forward and backward including exact
// zeros, negative zero and NaN, bf16 bit for bit; errors naming the bad value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "autograd/dlrm_test_util.h"

namespace zt {
namespace {

using namespace dlrm_test;

double bce_ref(double z, double y) {
    return std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
}
double sigmoid_ref(double z) { return 1.0 / (1.0 + std::exp(-z)); }

TEST(BceWithLogits, MatchesFormulaIncludingLargeLogits) {
    const std::vector<float> z = {-50.0f, -20.0f, -3.5f, -0.25f, 0.0f,
                                  0.5f,   2.0f,   17.0f, 50.0f,  50.0f};
    const std::vector<float> y = {1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.25f, 0.0f, 1.0f, 0.0f, 1.0f};
    for (bool column : {false, true}) {
        MemoryPool pool;
        Tape tape(pool);
        const int64_t B = static_cast<int64_t>(z.size());
        Var logits = make_input(pool, column ? Shape{B, 1} : Shape{B}, z, DType::kF32);
        Var loss = ops::bce_with_logits(tape, logits, y);
        ASSERT_EQ(loss->value.dtype(), DType::kF32);
        ASSERT_EQ(loss->value.numel(), 1);
        double want = 0;
        for (int64_t i = 0; i < B; ++i) want += bce_ref(z[i], y[i]);
        want /= static_cast<double>(B);
        const float got = loss->value.to_vector()[0];
        EXPECT_TRUE(std::isfinite(got));
        EXPECT_NEAR(got, want, 1e-5 * want);  // terms up to 50 summed in f32 per element
        tape.backward(loss, 2.0f);
        std::vector<double> dz(static_cast<size_t>(B));
        for (int64_t i = 0; i < B; ++i) dz[i] = 2.0 * (sigmoid_ref(z[i]) - y[i]) / B;
        auto g = logits->grad.to_vector();
        for (float v : g) EXPECT_TRUE(std::isfinite(v));
        expect_close("dlogits", g, dz, 1e-7, 1e-5);
        EXPECT_EQ(logits->grad.shape(), logits->value.shape());
    }
}

TEST(BceWithLogits, PerElementLossAtLargeLogits) {
    // Single samples: z = +-50 with the wrong label costs exactly |z| in f32, the right one ~0.
    for (auto [zv, yv, want] : {std::tuple{50.0f, 0.0f, 50.0},
                                {-50.0f, 1.0f, 50.0},
                                {50.0f, 1.0f, bce_ref(50, 1)},
                                {-50.0f, 0.0f, bce_ref(-50, 0)}}) {
        MemoryPool pool;
        Tape tape(pool);
        Var logits = make_input(pool, {1}, {zv}, DType::kF32);
        std::vector<float> label{yv};
        Var loss = ops::bce_with_logits(tape, logits, label);
        EXPECT_NEAR(loss->value.to_vector()[0], want, 1e-6 * std::max(1.0, want));
        tape.backward(loss);
        EXPECT_NEAR(logits->grad.to_vector()[0], sigmoid_ref(zv) - yv, 1e-7);
    }
}

// Note [bce FD tolerance]: f32 loss of O(1), rounding ~1e-7 over 2 eps = 2e-3: 5e-5; truncation
// eps^2/6 |f'''| <= 1e-7. atol 2e-4 leaves a 4x margin.
TEST(BceWithLogits, GradientMatchesFiniteDifferences) {
    const int64_t B = 9;
    MemoryPool pool;
    Tape tape(pool);
    Var logits = make_input(pool, {B}, uniform_values(B, 3, 4.0f), DType::kF32);
    std::vector<float> y = {0, 1, 1, 0, 0.5f, 1, 0, 0.75f, 1};
    tape.backward(ops::bce_with_logits(tape, logits, y));
    auto loss = [&] {
        tape.set_recording(false);
        double l = ops::bce_with_logits(tape, logits, y)->value.to_vector()[0];
        tape.set_recording(true);
        return l;
    };
    expect_close("dlogits", logits->grad.to_vector(), fd_gradient(loss, logits->value, 1e-3f), 2e-4,
                 1e-3);
}

TEST(BceWithLogits, Bf16Logits) {
    const int64_t B = 17;
    auto z = uniform_values(B, 4, 8.0f);  // bf16-representable
    std::vector<float> y(B);
    for (int64_t i = 0; i < B; ++i) y[i] = static_cast<float>(i % 2);
    MemoryPool pool;
    Tape tape(pool);
    Var logits = make_input(pool, {B, 1}, z, DType::kBF16);
    Var loss = ops::bce_with_logits(tape, logits, y);
    double want = 0;
    for (int64_t i = 0; i < B; ++i) want += bce_ref(z[i], y[i]);
    EXPECT_NEAR(loss->value.to_vector()[0], want / B, 1e-5 * want / B);  // f32 math on exact inputs
    tape.backward(loss);
    ASSERT_EQ(logits->grad.dtype(), DType::kBF16);
    std::vector<double> dz(B);
    for (int64_t i = 0; i < B; ++i) dz[i] = (sigmoid_ref(z[i]) - y[i]) / B;
    expect_close("bf16 dlogits", logits->grad.to_vector(), dz, 1e-7, 1.0 / 256);  // one rounding
}

TEST(BceWithLogits, ErrorsNameTheBadValue) {
    MemoryPool pool;
    Tape tape(pool);
    Var logits = make_input(pool, {3}, {0.0f, 1.0f, 2.0f}, DType::kF32);
    Var wide = make_input(pool, {3, 2}, std::vector<float>(6), DType::kF32);
    std::vector<float> two{0.0f, 1.0f}, bad{0.0f, 1.5f, 1.0f}, nan{0.0f, NAN, 1.0f}, ok{0, 1, 0};
    expect_error([&] { ops::bce_with_logits(tape, logits, two); }, {"2 labels", "B = 3"});
    expect_error([&] { ops::bce_with_logits(tape, logits, bad); }, {"label 1.5", "position 1"});
    expect_error([&] { ops::bce_with_logits(tape, logits, nan); }, {"label nan", "[0, 1]"});
    expect_error([&] { ops::bce_with_logits(tape, wide, ok); }, {"(3, 2)", "(B, 1)"});
    EXPECT_EQ(tape.size(), 0u);
}

TEST(Relu, ForwardBackwardWithExactZeros) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x = {-2.0f, -0.0f, 0.0f, 1e-30f, 3.5f, -1e-30f, nan, 7.0f, -7.0f};
    for (DType dt : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(dtype_name(dt));
        MemoryPool pool;
        Tape tape(pool);
        Var xv = make_input(pool, {3, 3}, x, dt);
        Var y = ops::relu(tape, xv);
        ASSERT_EQ(y->value.shape(), (Shape{3, 3}));
        ASSERT_EQ(y->value.dtype(), dt);
        auto yv = y->value.to_vector(), xr = xv->value.to_vector();
        for (size_t i = 0; i < x.size(); ++i) {
            if (std::isnan(x[i])) {
                EXPECT_TRUE(std::isnan(yv[i]));
                continue;
            }
            const float want = xr[i] > 0 ? xr[i] : 0.0f;
            EXPECT_EQ(yv[i], want) << i;
            EXPECT_FALSE(std::signbit(yv[i])) << "relu(" << x[i] << ") should be +0";
        }
        auto r = uniform_values(9, 5, 1.0f);
        tape.backward(weighted_sum(tape, y, r));
        auto g = xv->grad.to_vector();
        for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(g[i], xr[i] > 0 ? r[i] : 0.0f) << i;
    }
}

// Past the kernel's parallel threshold, odd length: exact selects on 1 and 2 threads.
TEST(Relu, LargeOddLengthOnTwoThreads) {
    const int64_t n = (1 << 16) + 3;
    auto x = uniform_values(n, 6, 1.0f);
    with_threads(2, [&] {
        MemoryPool pool;
        Tape tape(pool);
        Var xv = make_input(pool, {n}, x, DType::kF32);
        Var y = ops::relu(tape, xv);
        auto r = uniform_values(n, 7, 1.0f);
        tape.backward(weighted_sum(tape, y, r));
        auto yv = y->value.to_vector(), g = xv->grad.to_vector();
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i)
            bad += yv[i] != (x[i] > 0 ? x[i] : 0.0f) || g[i] != (x[i] > 0 ? r[i] : 0.0f);
        EXPECT_EQ(bad, 0);
    });
}

}  // namespace
}  // namespace zt
