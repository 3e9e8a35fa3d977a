// SGD (momentum, Nesterov, L2 decay on decay segments) against a scalar double-precision
// reference of PyTorch's update, over several steps and odd sizes; thread-count independence.
#include "optim/sgd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/threads.h"

namespace zt {
namespace {

struct RefSgd {
    std::vector<double> p, buf;
};

void ref_sgd_step(RefSgd& r, const std::vector<float>& g, const std::vector<OptimSegment>& segs,
                  const SgdOptions& o, double lr, int64_t t) {
    for (const OptimSegment& s : segs) {
        for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
            double d = g[i];
            if (s.decay) d += o.weight_decay * r.p[i];
            if (o.momentum != 0.0) {
                r.buf[i] = t == 1 ? d : o.momentum * r.buf[i] + d;
                d = o.nesterov ? d + o.momentum * r.buf[i] : r.buf[i];
            }
            r.p[i] -= lr * d;
        }
    }
}

std::vector<OptimSegment> three_segments(int64_t n) {
    return {
        {0, n / 3, true}, {n / 3, n / 3 + 1, false}, {2 * (n / 3) + 1, n - 2 * (n / 3) - 1, true}};
}

void run_against_reference(int64_t n, const SgdOptions& o) {
    SCOPED_TRACE(testing::Message()
                 << "n=" << n << " momentum=" << o.momentum << " nesterov=" << o.nesterov);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(n);
    for (float& x : p) x = normal(rng);
    RefSgd ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0)};
    const std::vector<OptimSegment> segs = three_segments(n);
    MemoryPool pool;
    Sgd opt(o);
    opt.init_state(pool, n);
    for (int64_t t = 1; t <= 5; ++t) {
        std::vector<float> g(n);
        for (float& x : g) x = normal(rng);
        const float lr = 0.05f / static_cast<float>(t);
        opt.step(p.data(), g.data(), segs, lr, t);
        ref_sgd_step(ref, g, segs, o, lr, t);
    }
    // Errors seen: below 1e-6 (|p| ~ 1, 5 steps); a wrong formula errs by ~lr*g ~ 1e-2.
    for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(p[i], ref.p[i], 3e-6 + 1e-6 * std::fabs(ref.p[i])) << "p[" << i << "]";
    if (o.momentum != 0.0) {
        auto state = opt.state();
        ASSERT_EQ(state.size(), 1u);
        EXPECT_EQ(state[0].first, "momentum_buffer");
        const float* buf = state[0].second.data<float>();
        for (int64_t i = 0; i < n; ++i)
            ASSERT_NEAR(buf[i], ref.buf[i], 3e-6 + 1e-6 * std::fabs(ref.buf[i])) << i;
    } else {
        EXPECT_TRUE(opt.state().empty());
    }
}

TEST(Sgd, PlainWithDecayMatchesReference) {
    SgdOptions o;
    o.weight_decay = 0.1;
    for (int64_t n : {37, 1031}) run_against_reference(n, o);
}

TEST(Sgd, MomentumMatchesReference) {
    SgdOptions o;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    for (int64_t n : {37, 1031}) run_against_reference(n, o);
}

TEST(Sgd, NesterovMatchesReference) {
    SgdOptions o;
    o.momentum = 0.8;
    o.weight_decay = 0.02;
    o.nesterov = true;
    for (int64_t n : {37, 1031}) run_against_reference(n, o);
}

TEST(Sgd, FirstStepCopiesGradientIntoBuffer) {
    // PyTorch: buf = g on the first step (no dampening of it), so step 1 is plain SGD.
    const int64_t n = 37;
    std::vector<float> p(n, 0.0f), g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = float(i) - 18.0f;
    SgdOptions o;
    o.momentum = 0.9;
    MemoryPool pool;
    Sgd opt(o);
    opt.init_state(pool, n);
    std::vector<OptimSegment> segs{{0, n, true}};
    opt.step(p.data(), g.data(), segs, 0.5f, 1);
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(p[i], -0.5f * g[i]) << i;
        EXPECT_EQ(opt.state()[0].second.data<float>()[i], g[i]) << i;
    }
}

TEST(Sgd, SameBitsForOneAndTwoThreads) {
    const int64_t n = 100003;
    SgdOptions o;
    o.momentum = 0.9;
    o.nesterov = true;
    o.weight_decay = 0.1;
    const std::vector<OptimSegment> segs = three_segments(n);
    std::vector<float> out[2];
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::mt19937 rng(11);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> p(n);
        for (float& x : p) x = normal(rng);
        MemoryPool pool;
        Sgd opt(o);
        opt.init_state(pool, n);
        for (int64_t t = 1; t <= 3; ++t) {
            std::vector<float> g(n);
            for (float& x : g) x = normal(rng);
            opt.step(p.data(), g.data(), segs, 0.01f, t);
        }
        out[threads - 1] = p;
    }
    set_num_threads(1);
    EXPECT_EQ(out[0], out[1]);
}

// The compute copy a step writes is convert() of the updated weights, on the segments' elements
// only (the gap between two segments keeps its bits).
TEST(Sgd, ComputeCopyIsTheConvertedUpdate) {
    const int64_t n = 40001;  // above the parallel threshold, odd
    SgdOptions o;
    o.momentum = 0.9;
    o.weight_decay = 0.1;
    const std::vector<OptimSegment> segs{{0, 20001, true}, {20004, n - 20004, false}};
    for (DType dt : {DType::kBF16, DType::kF16}) {
        std::mt19937 rng(3);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> p(n), g(n);
        for (float& x : p) x = normal(rng);
        for (float& x : g) x = normal(rng);
        std::vector<uint16_t> copy(n, 0x1234), expect(n, 0x1234);
        MemoryPool pool;
        Sgd opt(o);
        opt.init_state(pool, n);
        set_num_threads(2);
        opt.step(p.data(), g.data(), segs, 0.01f, 1, ComputeCopy{copy.data(), dt});
        set_num_threads(1);
        for (const OptimSegment& s : segs)
            convert(p.data() + s.offset, DType::kF32, expect.data() + s.offset, dt,
                    size_t(s.numel));
        EXPECT_EQ(copy, expect) << dtype_name(dt);
        EXPECT_EQ(copy[20002], 0x1234);
    }
}

TEST(Sgd, RejectsNesterovWithoutMomentum) {
    SgdOptions o;
    o.nesterov = true;
    try {
        Sgd bad(o);
        FAIL() << "nesterov without momentum accepted";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("nesterov"), std::string::npos) << e.message();
    }
}

}  // namespace
}  // namespace zt
