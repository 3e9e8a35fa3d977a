// AdamW and Adam (L2) against a scalar double-precision reference of the textbook update, over
// several steps, odd sizes and segments with and without decay; thread-count independence.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/threads.h"

namespace zt {
namespace {

struct RefAdam {
    std::vector<double> p, m, v;
};

// One step of the math (not PyTorch's op order), in double.
void ref_adam_step(RefAdam& r, const std::vector<float>& g, const std::vector<OptimSegment>& segs,
                   const AdamWOptions& o, double lr, int64_t t) {
    const double bc1 = o.bias_correction ? 1.0 - std::pow(o.beta1, double(t)) : 1.0;
    const double bc2 = o.bias_correction ? 1.0 - std::pow(o.beta2, double(t)) : 1.0;
    for (const OptimSegment& s : segs) {
        for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            double gi = g[i];
            if (s.decay && o.adam_w_mode) r.p[i] *= 1.0 - lr * o.weight_decay;
            if (s.decay && !o.adam_w_mode) gi += o.weight_decay * r.p[i];
            r.m[i] = o.beta1 * r.m[i] + (1.0 - o.beta1) * gi;
            r.v[i] = o.beta2 * r.v[i] + (1.0 - o.beta2) * gi * gi;
            const double denom = std::sqrt(r.v[i]) / std::sqrt(bc2) + o.eps;
            r.p[i] -= lr / bc1 * r.m[i] / denom;
        }
    }
}

// Gradients of mixed scale: some elements near eps, so a wrong eps placement shows.
float grad_scale(int64_t i) { return i % 7 == 3 ? 1e-8f : 1.0f; }

std::vector<float> random_grads(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = normal(rng) * grad_scale(i);
    return g;
}

// Segments over n elements: decay, no decay, decay, ..., sizes that do not divide 16.
std::vector<OptimSegment> make_segments(int64_t n) {
    std::vector<OptimSegment> segs;
    const int64_t sizes[] = {13, 5, 101, 1, 29};
    int64_t off = 0;
    for (int k = 0; off < n; ++k) {
        const int64_t len = std::min<int64_t>(sizes[k % 5] * (1 + n / 200), n - off);
        segs.push_back({off, len, k % 2 == 0});
        off += len;
    }
    return segs;
}

void run_against_reference(int64_t n, const AdamWOptions& o) {
    SCOPED_TRACE(testing::Message() << "n=" << n << " adam_w_mode=" << o.adam_w_mode
                                    << " bias_correction=" << o.bias_correction);
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(n);
    for (float& x : p) x = normal(rng);
    RefAdam ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0),
                std::vector<double>(n, 0.0)};
    const std::vector<OptimSegment> segs = make_segments(n);

    MemoryPool pool;
    AdamW opt(o);
    opt.init_state(pool, n);
    for (int64_t t = 1; t <= 6; ++t) {
        const std::vector<float> g = random_grads(n, rng);
        const float lr = 1e-2f * static_cast<float>(t);  // changes per step, like a schedule
        opt.step(p.data(), g.data(), segs, lr, t);
        ref_adam_step(ref, g, segs, o, lr, t);
    }
    auto state = opt.state();
    ASSERT_EQ(state.size(), 2u);
    EXPECT_EQ(state[0].first, "exp_avg");
    EXPECT_EQ(state[1].first, "exp_avg_sq");
    const float* m = state[0].second.data<float>();
    const float* v = state[1].second.data<float>();
    // f32 against double after 6 steps. Errors seen: p below 3e-7 (absolute, |p| ~ 1); m, a sum
    // of gradients (and of wd*p for Adam) of either sign, about 1e-8 times the gradient scale;
    // v a few 1e-7 relative.
    // A wrong formula errs by ~lr = 1e-2 in p.
    for (int64_t i = 0; i < n; ++i) {
        const double g_scale = grad_scale(i);
        ASSERT_NEAR(p[i], ref.p[i], 2e-6 + 1e-6 * std::fabs(ref.p[i])) << "p[" << i << "]";
        ASSERT_NEAR(m[i], ref.m[i], 1e-6 * g_scale + 1e-5 * std::fabs(ref.m[i]))
            << "m[" << i << "]";
        ASSERT_NEAR(v[i], ref.v[i], 1e-5 * std::fabs(ref.v[i])) << "v[" << i << "]";
    }
}

TEST(AdamW, MatchesDoubleReference) {
    AdamWOptions o;
    o.beta1 = 0.9;
    o.beta2 = 0.95;
    o.eps = 1e-8;
    o.weight_decay = 0.1;
    for (int64_t n : {37, 1031}) run_against_reference(n, o);
}

TEST(AdamW, ClassicAdamL2MatchesDoubleReference) {
    AdamWOptions o;
    o.weight_decay = 0.05;
    o.adam_w_mode = false;
    for (int64_t n : {37, 1031}) run_against_reference(n, o);
}

TEST(AdamW, NoBiasCorrectionAndLargeLerpWeight) {
    AdamWOptions o;
    o.beta1 = 0.3;  // lerp weight 0.7 >= 0.5: PyTorch's other lerp branch
    o.beta2 = 0.99;
    o.eps = 1e-6;
    o.weight_decay = 0.01;
    o.bias_correction = false;
    run_against_reference(1031, o);
}

TEST(AdamW, FirstStepIsSignTimesLr) {
    // With zero state and bias correction, step 1 moves each element by lr * g/(|g| + eps').
    const int64_t n = 37;
    std::vector<float> p(n, 1.0f), g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = (i % 2 ? 1.0f : -1.0f) * float(i + 1);
    MemoryPool pool;
    AdamW opt(AdamWOptions{});
    opt.init_state(pool, n);
    std::vector<OptimSegment> segs{{0, n, true}};
    opt.step(p.data(), g.data(), segs, 1e-3f, 1);
    for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(p[i], 1.0 - 1e-3 * (g[i] > 0 ? 1.0 : -1.0), 2e-7) << i;
}

TEST(AdamW, SameBitsForOneAndTwoThreads) {
    const int64_t n = 100003;  // above the parallel threshold, odd
    AdamWOptions o;
    o.weight_decay = 0.1;
    const std::vector<OptimSegment> segs = make_segments(n);
    std::vector<float> p_out[2], m_out[2], v_out[2];
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::mt19937 rng(7);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> p(n);
        for (float& x : p) x = normal(rng);
        MemoryPool pool;
        AdamW opt(o);
        opt.init_state(pool, n);
        for (int64_t t = 1; t <= 3; ++t) {
            const std::vector<float> g = random_grads(n, rng);
            opt.step(p.data(), g.data(), segs, 3e-3f, t);
        }
        p_out[threads - 1] = p;
        m_out[threads - 1] = opt.state()[0].second.to_vector();
        v_out[threads - 1] = opt.state()[1].second.to_vector();
    }
    set_num_threads(1);
    EXPECT_EQ(p_out[0], p_out[1]);
    EXPECT_EQ(m_out[0], m_out[1]);
    EXPECT_EQ(v_out[0], v_out[1]);
}

TEST(AdamW, StateIsTrackedAsOptimizerMemory) {
    MemoryPool pool;
    AdamW opt(AdamWOptions{});
    opt.init_state(pool, 1031);
    const int64_t cat = static_cast<int>(MemCategory::kOptimizer);
    const int64_t bytes = 1031 * int64_t(sizeof(float));
    EXPECT_GE(pool.stats().current[cat], 2 * bytes);
    EXPECT_LE(pool.stats().current[cat], 2 * (bytes + int64_t(MemoryPool::kAlignment)));
    for (auto& [name, t] : opt.state()) {
        EXPECT_EQ(t.numel(), 1031) << name;
        EXPECT_EQ(t.category(), MemCategory::kOptimizer) << name;
    }
    EXPECT_EQ(opt.name(), "AdamW");
    AdamWOptions l2;
    l2.adam_w_mode = false;
    EXPECT_EQ(AdamW(l2).name(), "Adam");
}

TEST(AdamW, RejectsBadOptions) {
    AdamWOptions o;
    o.beta2 = 1.0;
    try {
        AdamW bad(o);
        FAIL() << "beta2 = 1 accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        EXPECT_NE(e.message().find("betas[1]"), std::string::npos) << e.message();
    }
    o = AdamWOptions{};
    o.weight_decay = -1.0;
    EXPECT_THROW(AdamW{o}, Error);
}

}  // namespace
}  // namespace zt
