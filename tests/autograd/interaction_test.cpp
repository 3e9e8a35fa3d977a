// ops::dot_interaction against a naive double-precision reference: with and without self
// interaction, the reference's i-major pair order at chosen indices, odd widths (D = 1, 3, 17),
// B = 1, K = 0; gradients against the reference and finite differences for x and every emb (one
// emb passed twice too), bf16 within rounding, the same bits on 1 and 2 threads, shape errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "autograd/dlrm_test_util.h"

namespace zt {
namespace {

using namespace dlrm_test;

int64_t pairs(int64_t K, bool self) { return self ? (K + 1) * (K + 2) / 2 : K * (K + 1) / 2; }

struct Inputs {
    int64_t B, K, D;
    std::vector<float> x;
    std::vector<std::vector<float>> embs;
    // Row i of sample b's T = [x, embs...].
    const float* row(int64_t b, int64_t i) const {
        return (i == 0 ? x.data() : embs[i - 1].data()) + b * D;
    }
};

Inputs random_inputs(int64_t B, int64_t K, int64_t D, uint64_t seed) {
    Inputs in{B, K, D, uniform_values(B * D, seed, 1.0f), {}};
    for (int64_t k = 0; k < K; ++k) in.embs.push_back(uniform_values(B * D, seed + 1 + k, 1.0f));
    return in;
}

double dot(const Inputs& in, int64_t b, int64_t i, int64_t j) {
    double s = 0;
    for (int64_t d = 0; d < in.D; ++d) s += static_cast<double>(in.row(b, i)[d]) * in.row(b, j)[d];
    return s;
}

// [x, Z[i][j] for i in 0..K, j < i (j <= i with self)] per sample, in double.
std::vector<double> reference(const Inputs& in, bool self) {
    std::vector<double> out;
    for (int64_t b = 0; b < in.B; ++b) {
        for (int64_t d = 0; d < in.D; ++d) out.push_back(in.x[b * in.D + d]);
        for (int64_t i = 0; i <= in.K; ++i)
            for (int64_t j = 0; j < i + (self ? 1 : 0); ++j) out.push_back(dot(in, b, i, j));
    }
    return out;
}

// dT[i] = sum over output pairs (i, j) of g (T[j] into dT[i], T[i] into dT[j]); dx adds dy[:, :D].
// Returns dT as (K + 1) arrays of (B, D): dx first, then each demb.
std::vector<std::vector<double>> grad_reference(const Inputs& in, bool self,
                                                const std::vector<float>& dy) {
    const int64_t n = in.K + 1, width = in.D + pairs(in.K, self);
    std::vector<std::vector<double>> g(n, std::vector<double>(in.B * in.D, 0.0));
    for (int64_t b = 0; b < in.B; ++b) {
        int64_t p = in.D;
        for (int64_t d = 0; d < in.D; ++d) g[0][b * in.D + d] += dy[b * width + d];
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < i + (self ? 1 : 0); ++j, ++p)
                for (int64_t d = 0; d < in.D; ++d) {
                    g[i][b * in.D + d] += dy[b * width + p] * in.row(b, j)[d];
                    g[j][b * in.D + d] += dy[b * width + p] * in.row(b, i)[d];
                }
    }
    return g;
}

struct InteractionRun {
    MemoryPool pool;
    Tape tape{pool};
    Var x;
    std::vector<Var> embs;
    InteractionRun(const Inputs& in, DType dt) {
        x = make_input(pool, {in.B, in.D}, in.x, dt);
        for (const auto& e : in.embs) embs.push_back(make_input(pool, {in.B, in.D}, e, dt));
    }
    Var forward(bool self) { return ops::dot_interaction(tape, x, embs, self); }
};

TEST(DotInteraction, ForwardAndBackwardMatchReference) {
    for (bool self : {false, true})
        for (int64_t D : {1, 3, 17})
            for (auto [B, K] : {std::pair<int64_t, int64_t>{1, 3}, {5, 4}, {3, 0}, {2, 17}}) {
                SCOPED_TRACE(str_cat("self ", self, " B ", B, " K ", K, " D ", D));
                Inputs in = random_inputs(B, K, D, 7);
                InteractionRun run(in, DType::kF32);
                Var y = run.forward(self);
                ASSERT_EQ(y->value.shape(), (Shape{B, D + pairs(K, self)}));
                // f32 dot products of at most 17 terms of O(1).
                expect_close("y", y->value.to_vector(), reference(in, self), 1e-5, 1e-5);
                auto r = uniform_values(y->value.numel(), 8, 1.0f);
                run.tape.backward(weighted_sum(run.tape, y, r));
                EXPECT_EQ(run.tape.size(), 0u);
                auto want = grad_reference(in, self, r);
                expect_close("dx", run.x->grad.to_vector(), want[0], 1e-5, 1e-5);
                for (int64_t k = 0; k < K; ++k)
                    expect_close("demb" + std::to_string(k), run.embs[k]->grad.to_vector(),
                                 want[k + 1], 1e-5, 1e-5);
            }
}

// Integer-valued rows make every product exact, so chosen output indices can be compared with
// ==: with K = 3, D = 2, strict order is (1,0) (2,0) (2,1) (3,0) (3,1) (3,2), self order is
// (0,0) (1,0) (1,1) (2,0) (2,1) (2,2) (3,0) ...
TEST(DotInteraction, PairOrderIsIMajor) {
    Inputs in{1, 3, 2, {1, 2}, {{3, 5}, {7, 11}, {13, 17}}};
    auto z = [&](int64_t i, int64_t j) { return static_cast<float>(dot(in, 0, i, j)); };
    {
        InteractionRun run(in, DType::kF32);
        auto y = run.forward(false)->value.to_vector();
        ASSERT_EQ(y.size(), 2u + 6u);
        EXPECT_EQ(y[0], 1.0f);
        EXPECT_EQ(y[1], 2.0f);
        EXPECT_EQ(y[2 + 0], z(1, 0));
        EXPECT_EQ(y[2 + 2], z(2, 1));
        EXPECT_EQ(y[2 + 4], z(3, 1));  // i(i-1)/2 + j = 3 + 1
        EXPECT_EQ(y[2 + 5], z(3, 2));
    }
    {
        InteractionRun run(in, DType::kF32);
        auto y = run.forward(true)->value.to_vector();
        ASSERT_EQ(y.size(), 2u + 10u);
        EXPECT_EQ(y[2 + 0], z(0, 0));
        EXPECT_EQ(y[2 + 2], z(1, 1));
        EXPECT_EQ(y[2 + 4], z(2, 1));  // i(i+1)/2 + j = 3 + 1
        EXPECT_EQ(y[2 + 7], z(3, 1));
        EXPECT_EQ(y[2 + 9], z(3, 3));
    }
}

// Note [interaction FD tolerance]: the loss is quadratic in each input, so the central difference
// has no truncation error; the f32 loss (O(30) terms of O(1)) rounds at about 4e-6, over 2 eps =
// 2e-2 that is 2e-4. atol 1e-3 leaves a 5x margin; a wrong pair or a missing factor 2 on the
// diagonal is off by O(0.1).
TEST(DotInteraction, GradientsMatchFiniteDifferences) {
    for (bool self : {false, true})
        for (bool repeat : {false, true}) {
            SCOPED_TRACE(str_cat("self ", self, " repeated emb ", repeat));
            Inputs in = random_inputs(2, 3, 3, 17);
            InteractionRun run(in, DType::kF32);
            if (repeat) run.embs[2] = run.embs[0];  // one Var twice: its gradients add
            auto r = uniform_values(2 * (3 + pairs(3, self)), 18, 1.0f);
            run.tape.backward(weighted_sum(run.tape, run.forward(self), r));
            auto loss = [&] {
                run.tape.set_recording(false);
                double l = weighted_sum(run.tape, run.forward(self), r)->value.to_vector()[0];
                run.tape.set_recording(true);
                return l;
            };
            expect_close("dx", run.x->grad.to_vector(), fd_gradient(loss, run.x->value, 1e-2f),
                         1e-3, 1e-3);
            for (size_t k = 0; k < run.embs.size(); ++k)
                expect_close("demb" + std::to_string(k), run.embs[k]->grad.to_vector(),
                             fd_gradient(loss, run.embs[k]->value, 1e-2f), 1e-3, 1e-3);
        }
}

// bf16 inputs and outputs: the forward computes in f32 from bf16-representable inputs and rounds
// once (relative 2^-9); the gradient goes through bf16 dy, bf16 dT: allow 1% of the largest
// gradient (seen: below 0.3%), a kernel mishandling bf16 is off by O(100%).
TEST(DotInteraction, Bf16WithinRounding) {
    for (bool self : {false, true}) {
        Inputs in = random_inputs(3, 5, 17, 27);
        InteractionRun ref(in, DType::kF32), run(in, DType::kBF16);
        Var y = run.forward(self), yr = ref.forward(self);
        ASSERT_EQ(y->value.dtype(), DType::kBF16);
        expect_close("bf16 y", y->value.to_vector(), reference(in, self), 1e-6, 1.0 / 256);
        auto r = uniform_values(y->value.numel(), 28, 1.0f);
        run.tape.backward(weighted_sum(run.tape, y, r));
        ref.tape.backward(weighted_sum(ref.tape, yr, r));
        for (size_t k = 0; k <= run.embs.size(); ++k) {
            const Var& v = k == 0 ? run.x : run.embs[k - 1];
            const Var& w = k == 0 ? ref.x : ref.embs[k - 1];
            ASSERT_EQ(v->grad.dtype(), DType::kBF16);
            auto want = w->grad.to_vector();
            double mx = 0;
            for (float g : want) mx = std::max(mx, static_cast<double>(std::abs(g)));
            expect_close("bf16 grad " + std::to_string(k), v->grad.to_vector(),
                         std::vector<double>(want.begin(), want.end()), 1e-2 * mx, 0.0);
        }
    }
}

TEST(DotInteraction, SameBitsOnOneAndTwoThreads) {
    Inputs in = random_inputs(301, 26, 16, 37);
    for (DType dt : {DType::kF32, DType::kBF16}) {
        std::vector<float> out[2], grads[2];
        for (int threads : {1, 2}) {
            with_threads(threads, [&] {
                InteractionRun run(in, dt);
                Var y = run.forward(true);
                run.tape.backward(
                    weighted_sum(run.tape, y, uniform_values(y->value.numel(), 38, 1.0f)));
                out[threads - 1] = y->value.to_vector();
                grads[threads - 1] = run.x->grad.to_vector();
                for (const Var& e : run.embs) {
                    auto g = e->grad.to_vector();
                    grads[threads - 1].insert(grads[threads - 1].end(), g.begin(), g.end());
                }
            });
        }
        EXPECT_TRUE(same_bits(out[0], out[1])) << dtype_name(dt) << " forward differs";
        EXPECT_TRUE(same_bits(grads[0], grads[1])) << dtype_name(dt) << " gradients differ";
    }
}

TEST(DotInteraction, ErrorsNameTheBadInput) {
    MemoryPool pool;
    Tape tape(pool);
    Var x = make_input(pool, {4, 6}, uniform_values(24, 1, 1.0f), DType::kF32);
    Var good = make_input(pool, {4, 6}, uniform_values(24, 2, 1.0f), DType::kF32);
    Var narrow = make_input(pool, {4, 5}, uniform_values(20, 3, 1.0f), DType::kF32);
    Var flat = make_input(pool, {24}, uniform_values(24, 4, 1.0f), DType::kF32);
    Var half = make_input(pool, {4, 6}, uniform_values(24, 5, 1.0f), DType::kBF16);
    std::vector<Var> e1{good, narrow}, e2{good}, e3{good, good, half};
    expect_error([&] { ops::dot_interaction(tape, x, e1, false); },
                 {"embs[1]", "(4, 5)", "(4, 6)"});
    expect_error([&] { ops::dot_interaction(tape, flat, e2, false); }, {"x", "(24)", "2 dim"});
    expect_error([&] { ops::dot_interaction(tape, x, e3, true); }, {"embs[2]", "bf16", "f32"});
    EXPECT_EQ(tape.size(), 0u);
}

// Rough timing, not a check (run with --gtest_also_run_disabled_tests): B = 2048, K = 26, D = 16
// and D = 128, strict, f32, on the current thread count.
TEST(DotInteraction, DISABLED_Timing) {
    for (int64_t D : {16, 128}) {
        Inputs in = random_inputs(2048, 26, D, 47);
        InteractionRun run(in, DType::kF32);
        using clock = std::chrono::steady_clock;
        double fwd = 0, bwd = 0;
        const int reps = 20;
        for (int rep = 0; rep < reps; ++rep) {
            auto t0 = clock::now();
            Var y = run.forward(false);
            auto t1 = clock::now();
            Tensor seed = make_tensor(run.pool, y->value.shape(),
                                      std::vector<float>(y->value.numel(), 1.0f), DType::kF32);
            auto t2 = clock::now();
            run.tape.backward_from(std::move(y), seed);
            auto t3 = clock::now();
            fwd += std::chrono::duration<double, std::milli>(t1 - t0).count();
            bwd += std::chrono::duration<double, std::milli>(t3 - t2).count();
            run.x->grad = Tensor();
            for (const Var& e : run.embs) e->grad = Tensor();
        }
        std::printf(
            "dot_interaction (B 2048, K 26, D %ld): forward %.3f ms, backward %.3f ms "
            "(threads %d)\n",
            static_cast<long>(D), fwd / reps, bwd / reps, num_threads());
    }
}

}  // namespace
}  // namespace zt
