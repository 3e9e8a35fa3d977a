// 1-bit Adam's update (optim/onebit_adam.h): the warm-up is the engine's AdamW with bias
// correction off, bit for bit; the compressed phase stores the given momentum, keeps the variance
// and follows its formula, written here as a scalar loop, bit for bit (p, exp_avg, exp_avg_sq and
// the compute copy; odd segments with gaps; thread counts 1 and 2). The local momentum follows
// DeepSpeed's op order; the composition rule names every refused layout.
#include "optim/onebit_adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "fused_test_util.h"
#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {
namespace {

using namespace fused_test;

OneBitAdamOptions options(int64_t freeze) {
    OneBitAdamOptions o;
    o.beta1 = 0.9;
    o.beta2 = 0.99;
    o.eps = 1e-6;
    o.weight_decay = 0.1;
    o.freeze_step = freeze;
    return o;
}

TEST(OneBitAdam, WarmupIsAdamWWithoutBiasCorrectionBitForBit) {
    const int64_t n = 70000;  // above the parallel threshold
    std::mt19937 rng(3);
    const std::vector<float> p0 = spread_weights(n, rng);
    const std::vector<OptimSegment> segs = odd_segments(n);
    const OneBitAdamOptions o = options(3);
    AdamWOptions a;
    a.beta1 = o.beta1;
    a.beta2 = o.beta2;
    a.eps = o.eps;
    a.weight_decay = o.weight_decay;
    a.bias_correction = false;
    OneBitAdam onebit(o);
    std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), q = p0, mq(n, 0.f), vq(n, 0.f);
    CopyBuffers c1(n), c2(n);
    for (int64_t step = 1; step <= 3; ++step) {
        ASSERT_FALSE(onebit.compressed(step));
        const std::vector<float> g = grads(n, rng);
        float* state[] = {m.data(), v.data()};
        onebit.step_on(p.data(), g.data(), state, n, segs, 1e-3f, step, c1.as(true, DType::kBF16));
        adamw_step(a, q.data(), g.data(), mq.data(), vq.data(), n, segs, 1e-3f, step,
                   c2.as(true, DType::kBF16));
    }
    EXPECT_EQ(first_diff(p, q), -1);
    EXPECT_EQ(first_diff(m, mq), -1);
    EXPECT_EQ(first_diff(v, vq), -1);
    EXPECT_EQ(first_diff(c1.c16, c2.c16), -1);
    EXPECT_TRUE(onebit.compressed(4));
}

// The compressed phase, one element at a time, no FMA.
ZT_OPTIM_KERNEL void ref_frozen(std::vector<float>& p, std::vector<float>& m,
                                const std::vector<float>& v, const std::vector<float>& mbar,
                                const std::vector<OptimSegment>& segs, const OneBitAdamOptions& o,
                                float lr, CopyBuffers& copy, DType dtype) {
    ZT_OPTIM_NO_CONTRACT
    const float decay = float(1.0 - double(lr) * o.weight_decay);
    const float neg_lr = -lr, eps = float(o.eps);
    for (const OptimSegment& s : segs)
        for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            float pi = p[i];
            if (s.decay) pi = pi * decay;
            m[i] = mbar[i];
            pi = pi + (neg_lr * mbar[i]) / (std::sqrt(v[i]) + eps);
            p[i] = pi;
            copy.write(i, pi, true, dtype);
        }
}

// Around the exchange (Notes [Unset variance], [Update exchange]): values whose frozen variance is
// below eps^2 go out and come back as zero; with `update` the rest go out divided by the step's
// own denominator sqrt(v) + eps and come back multiplied by it (within two roundings); without,
// they pass as they are.
TEST(OneBitAdam, ExchangeMasksUnsetVarianceAndCarriesUpdates) {
    const double eps = 1e-8;
    const std::vector<float> v = {0.0f, 1e-17f, 1e-16f, 4.0f, 0.25f, 1e-6f, 0.0f};
    const std::vector<float> m = {0.5f, -2.0f, 3.0f, 1.5f, -0.75f, 1e-4f, 0.0f};
    for (bool update : {false, true}) {
        std::vector<float> x = m;
        onebit_exchange_in(x.data(), v.data(), static_cast<int64_t>(x.size()), eps, update);
        for (size_t i = 0; i < x.size(); ++i) {
            const bool unset = v[i] < 1e-16f;  // eps^2 in f32
            const float d = std::sqrt(v[i]) + static_cast<float>(eps);
            EXPECT_EQ(x[i], unset ? 0.0f : update ? m[i] / d : m[i]) << i;
        }
        EXPECT_EQ(x[3], update ? 0.75f : 1.5f);  // 1.5 / (2 + 1e-8) in f32
        onebit_exchange_out(x.data(), v.data(), static_cast<int64_t>(x.size()), eps, update);
        for (size_t i = 0; i < x.size(); ++i) {
            if (v[i] < 1e-16f) {
                EXPECT_EQ(x[i], 0.0f) << i;
            } else {
                EXPECT_NEAR(x[i], m[i], 2e-7 * std::abs(m[i])) << i;
            }
        }
    }
}

TEST(OneBitAdam, CompressedPhaseStoresTheMomentumAndKeepsTheVariance) {
    for (const int threads : {1, 2}) {
        for (const int64_t n : {int64_t{37}, int64_t{70001}}) {
            set_num_threads(threads);
            std::mt19937 rng(11 + n);
            std::vector<float> p = spread_weights(n, rng), m = grads(n, rng), v(n);
            for (int64_t i = 0; i < n; ++i) v[i] = std::fabs(m[i]) * 0.5f + float(i % 3) * 1e-9f;
            const std::vector<float> mbar = grads(n, rng);
            const std::vector<OptimSegment> segs = odd_segments(n);
            std::vector<float> rp = p, rm = m;
            const std::vector<float> v0 = v;
            CopyBuffers got(n), want(n);
            OneBitAdam onebit(options(5));
            float* state[] = {m.data(), v.data()};
            onebit.step_on(p.data(), mbar.data(), state, n, segs, 2e-3f, 6,
                           got.as(true, DType::kF16));
            ref_frozen(rp, rm, v0, mbar, segs, options(5), 2e-3f, want, DType::kF16);
            EXPECT_EQ(first_diff(p, rp), -1) << n << " threads " << threads;
            EXPECT_EQ(first_diff(m, rm), -1) << n;
            EXPECT_EQ(first_diff(v, v0), -1) << n;  // frozen
            EXPECT_EQ(first_diff(got.c16, want.c16), -1) << n;
        }
    }
    set_num_threads(1);
}

ZT_OPTIM_KERNEL float ref_local(float m, float g, float b1, float w, float s) {
    ZT_OPTIM_NO_CONTRACT
    return m * b1 + w * (g * s);
}

TEST(OneBitAdam, LocalMomentumFollowsDeepSpeedsOpOrder) {
    const int64_t n = 100003;
    std::mt19937 rng(5);
    std::vector<float> g = grads(n, rng);
    const std::vector<float> m = grads(n, rng), g0 = g;
    onebit_local_momentum(g.data(), m.data(), n, 0.9, 3.0);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(g[i], ref_local(m[i], g0[i], 0.9f, float(1.0 - 0.9), 3.0f)) << i;
}

TEST(OneBitAdam, RefusesWhatItDoesNotComposeWith) {
    EXPECT_EQ(onebit_adam_refusal({}), "");
    struct Case {
        OneBitAdamLayout l;
        const char* says;
    };
    std::vector<Case> cases(7);
    cases[0].l.zero_stage = 2, cases[0].says = "zero_optimization.stage 0";
    cases[1].l.tensor_or_pipeline = true, cases[1].says = "pipeline parallelism";
    cases[2].l.gradient_clipping = 1.0, cases[2].says = "gradient_clipping";
    cases[3].l.fp16 = true, cases[3].says = "fp16";
    cases[4].l.offload_optimizer = true, cases[4].says = "offload_optimizer";
    cases[5].l.pruning = true, cases[5].says = "compression.pruning";
    cases[6].l.grad_compression = true, cases[6].says = "compression.gradients";
    for (const Case& c : cases) {
        const std::string why = onebit_adam_refusal(c.l);
        EXPECT_NE(why.find("OneBitAdam"), std::string::npos) << why;
        EXPECT_NE(why.find(c.says), std::string::npos) << why;
    }
    EXPECT_THROW(OneBitAdam(options(-1)), Error);
}

}  // namespace
}  // namespace zt
