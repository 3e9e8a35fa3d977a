// Gradient accumulation: G micro-batches of b against one micro-batch of G x b (the equivalence
// rule's core). Compared on gradients, grad_norm and the weights after an SGD step with clipping,
// where a missing 1/G would show as a factor G.
#include <gtest/gtest.h>

#include <cmath>

#include "models/gpt/gpt.h"
#include "optim/sgd.h"
#include "runtime/engine.h"
#include "util/random.h"

namespace zt {

namespace {

constexpr int64_t kB = 2, kG = 3, kT = 11, kV = 37;

std::unique_ptr<Engine> make_engine(MemoryPool& pool, int64_t grad_accum, double clip) {
    EngineOptions eo;
    eo.grad_accum = grad_accum;
    eo.gradient_clipping = clip;
    eo.lr = 0.5;
    eo.seed = 7;
    SgdOptions so;
    so.momentum = 0.9f;
    eo.optimizer = std::make_unique<Sgd>(so);
    return std::make_unique<Engine>(pool, std::make_unique<Gpt>(GptOptions{kV, kT, 16, 2, 2}),
                                    std::move(eo));
}

std::vector<int32_t> tokens(int64_t n, uint64_t stream) {
    std::vector<int32_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(uniform01(5, stream, i) * kV);
    return v;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
    auto x = a.to_vector(), y = b.to_vector();
    double scale = 0, diff = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
        diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    }
    return diff / scale;
}

}  // namespace

TEST(Accumulation, MicroBatchesMatchOneLargeBatch) {
    const auto in = tokens(kG * kB * kT, 1), tg = tokens(kG * kB * kT, 2);
    MemoryPool pool;
    for (double clip : {0.0, 0.05}) {  // 0.05 is far below the norm seen (~1.5): clipping active
        auto acc = make_engine(pool, kG, clip);
        auto big = make_engine(pool, 1, clip);
        double acc_loss = 0;
        for (int64_t m = 0; m < kG; ++m) {
            std::span<const int32_t> i(in.data() + m * kB * kT, kB * kT);
            std::span<const int32_t> t(tg.data() + m * kB * kT, kB * kT);
            acc_loss += acc->forward_backward(Batch{i, t, kB, kT}) / kG;
        }
        float big_loss = big->forward_backward(Batch{in, tg, kG * kB, kT});
        EXPECT_NEAR(acc_loss, big_loss, 1e-6 * std::fabs(big_loss));
        // fp32 sums of G partial gradients against one sum over G x b rows: rounding ~1e-7 relative
        // per element; seen 3e-7.
        EXPECT_LT(max_rel_diff(acc->arena().grads(), big->arena().grads()), 1e-5);
        StepStats sa = acc->step(), sb = big->step();
        EXPECT_NEAR(sa.grad_norm, sb.grad_norm, 1e-5 * sb.grad_norm);
        EXPECT_NEAR(sa.loss, sb.loss, 1e-6 * sb.loss);
        EXPECT_LT(max_rel_diff(acc->arena().master(), big->arena().master()), 1e-5);
    }
}

TEST(Accumulation, StepBeforeAllMicroBatchesIsAnError) {
    MemoryPool pool;
    auto e = make_engine(pool, 2, 0);
    const auto in = tokens(kB * kT, 1), tg = tokens(kB * kT, 2);
    e->forward_backward(Batch{in, tg, kB, kT});
    EXPECT_THROW(e->step(), Error);
}

TEST(Accumulation, RepeatedRunsGiveTheSameBits) {
    const auto in = tokens(kB * kT, 3), tg = tokens(kB * kT, 4);
    MemoryPool pool;
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
        auto e = make_engine(pool, 1, 0);
        for (int s = 0; s < 3; ++s) {
            e->forward_backward(Batch{in, tg, kB, kT});
            e->step();
        }
        auto w = e->arena().master().to_vector();
        if (run == 0) first = w;
        else EXPECT_TRUE(w == first);
    }
}

}  // namespace zt
