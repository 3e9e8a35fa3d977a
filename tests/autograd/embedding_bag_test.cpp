// ops::embedding_bag against a naive double-precision reference: sum and mean pooling, per-sample
// weights, empty bags, ids repeated inside a bag and across bags, odd widths (D = 1, 3, 17) and
// B = 1; the backward against the reference and finite differences, += into a parameter's f32
// gradient, untouched rows left bit for bit, the same bits on 1 and 2 threads, bf16 tables, and
// errors naming the bad value.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "autograd/dlrm_test_util.h"

namespace zt {
namespace {

using namespace dlrm_test;

struct BagCase {
    int64_t R, D;
    std::vector<int32_t> ids;
    std::vector<int64_t> offsets;
    std::vector<float> weights;
    ops::BagPooling pooling;
    int64_t B() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

// Bags: empty, {2, 5, 2}, empty, {0, 6, 6, 2}, {5}, empty (repeats inside bags and across them).
BagCase mixed_case(int64_t D, ops::BagPooling pooling, bool weighted) {
    BagCase c{7, D, {2, 5, 2, 0, 6, 6, 2, 5}, {0, 0, 3, 3, 7, 8, 8}, {}, pooling};
    if (weighted) c.weights = uniform_values(8, 5, 2.0f);
    return c;
}

// out[b] = scale_b sum_p w_p table[ids[p]] in double.
std::vector<double> bag_reference(const BagCase& c, const std::vector<float>& table) {
    std::vector<double> out(static_cast<size_t>(c.B() * c.D), 0.0);
    for (int64_t b = 0; b < c.B(); ++b) {
        const int64_t n = c.offsets[b + 1] - c.offsets[b];
        for (int64_t p = c.offsets[b]; p < c.offsets[b + 1]; ++p) {
            double w = c.weights.empty() ? 1.0 : c.weights[p];
            if (c.pooling == ops::BagPooling::kMean) w /= static_cast<double>(n);
            for (int64_t d = 0; d < c.D; ++d) out[b * c.D + d] += w * table[c.ids[p] * c.D + d];
        }
    }
    return out;
}

// dtable = grad0 + sum_p scale_b w_p dy[bag(p)] at row ids[p], in double.
std::vector<double> bag_grad_reference(const BagCase& c, const std::vector<float>& dy,
                                       const std::vector<float>& grad0) {
    std::vector<double> g(grad0.begin(), grad0.end());
    for (int64_t b = 0; b < c.B(); ++b) {
        const int64_t n = c.offsets[b + 1] - c.offsets[b];
        for (int64_t p = c.offsets[b]; p < c.offsets[b + 1]; ++p) {
            double w = c.weights.empty() ? 1.0 : c.weights[p];
            if (c.pooling == ops::BagPooling::kMean) w /= static_cast<double>(n);
            for (int64_t d = 0; d < c.D; ++d) g[c.ids[p] * c.D + d] += w * dy[b * c.D + d];
        }
    }
    return g;
}

Var run_bag(Tape& tape, const Var& table, const BagCase& c) {
    return ops::embedding_bag(tape, table, c.ids, c.offsets, c.weights, c.pooling);
}

// Forward and backward of one case in f32 against the references; the table is a parameter whose
// gradient starts nonzero, so the backward must add (+=), and rows no id names keep their bits.
void check_case(const BagCase& c) {
    MemoryPool pool;
    Tape tape(pool);
    auto table = uniform_values(c.R * c.D, 11, 1.0f), grad0 = uniform_values(c.R * c.D, 12, 1.0f);
    Var t = make_param(pool, {c.R, c.D}, table, DType::kF32, grad0);
    Var y = run_bag(tape, t, c);
    ASSERT_EQ(y->value.shape(), (Shape{c.B(), c.D}));
    // Sums of at most 4 terms of O(1) (weights up to 2) in f32.
    expect_close("y", y->value.to_vector(), bag_reference(c, table), 1e-6, 1e-6);
    auto r = uniform_values(c.B() * c.D, 13, 1.0f);
    tape.backward(weighted_sum(tape, y, r));
    EXPECT_EQ(tape.size(), 0u);
    auto got = t->grad.to_vector();
    expect_close("dtable", got, bag_grad_reference(c, r, grad0), 1e-6, 1e-6);
    for (int64_t row = 0; row < c.R; ++row) {
        if (std::find(c.ids.begin(), c.ids.end(), row) != c.ids.end()) continue;
        for (int64_t d = 0; d < c.D; ++d)
            EXPECT_EQ(got[row * c.D + d], grad0[row * c.D + d]) << "untouched row " << row;
    }
}

TEST(EmbeddingBag, SumMeanWeightedOddWidths) {
    for (int64_t D : {1, 3, 17}) {
        SCOPED_TRACE("D = " + std::to_string(D));
        check_case(mixed_case(D, ops::BagPooling::kSum, false));
        check_case(mixed_case(D, ops::BagPooling::kMean, false));
        check_case(mixed_case(D, ops::BagPooling::kSum, true));
    }
}

TEST(EmbeddingBag, SingleBagAndAllEmpty) {
    for (auto pooling : {ops::BagPooling::kSum, ops::BagPooling::kMean}) {
        check_case(BagCase{5, 3, {1, 1, 3, 0}, {0, 4}, {}, pooling});  // B = 1, a repeat
        check_case(BagCase{5, 3, {}, {0, 0}, {}, pooling});            // B = 1, empty
        check_case(BagCase{5, 17, {}, {0, 0, 0, 0}, {}, pooling});     // only empty bags
    }
    check_case(BagCase{5, 3, {4, 4}, {0, 2}, {0.5f, -1.5f}, ops::BagPooling::kSum});
}

// Ids that differ only in their second or third byte (the backward sorts ids a byte at a time).
TEST(EmbeddingBag, IdsAcrossSortDigits) {
    for (auto pooling : {ops::BagPooling::kSum, ops::BagPooling::kMean})
        check_case(BagCase{70001,
                           3,
                           {70000, 256, 65792, 256, 1, 70000, 65536, 0, 256},
                           {0, 3, 3, 6, 9},
                           {},
                           pooling});
    check_case(BagCase{70001,
                       3,
                       {70000, 256, 65792, 256, 1, 70000},
                       {0, 3, 6},
                       uniform_values(6, 9, 2.0f),
                       ops::BagPooling::kSum});
}

TEST(EmbeddingBag, EmptyBagGivesExactZeros) {
    MemoryPool pool;
    Tape tape(pool);
    BagCase c = mixed_case(3, ops::BagPooling::kMean, false);
    Var t = make_var(make_tensor(pool, {7, 3}, uniform_values(21, 1, 1.0f), DType::kF32));
    auto y = run_bag(tape, t, c)->value.to_vector();
    for (int64_t b : {0, 2, 5})
        for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(y[b * 3 + d], 0.0f) << "bag " << b;
    EXPECT_EQ(tape.size(), 0u);  // the table needs no gradient: nothing recorded
}

// Note [bag FD tolerance]: the op is linear in the table, so the central difference has no
// truncation error; the loss (O(10) terms, f32 value) rounds at about 1e-6, over 2 eps = 2e-2
// that is 5e-5. atol 2e-4 leaves a 4x margin; a wrong weight or scale is off by O(0.1).
TEST(EmbeddingBag, GradientMatchesFiniteDifferences) {
    for (auto pooling : {ops::BagPooling::kSum, ops::BagPooling::kMean}) {
        for (bool weighted : {false, true}) {
            if (weighted && pooling == ops::BagPooling::kMean) continue;
            BagCase c = mixed_case(3, pooling, weighted);
            MemoryPool pool;
            Tape tape(pool);
            Var t = make_input(pool, {c.R, c.D}, uniform_values(c.R * c.D, 21, 1.0f), DType::kF32);
            auto r = uniform_values(c.B() * c.D, 22, 1.0f);
            tape.backward(weighted_sum(tape, run_bag(tape, t, c), r));
            auto loss = [&] {
                tape.set_recording(false);
                double l = weighted_sum(tape, run_bag(tape, t, c), r)->value.to_vector()[0];
                tape.set_recording(true);
                return l;
            };
            expect_close("dtable", t->grad.to_vector(), fd_gradient(loss, t->value, 1e-2f), 2e-4,
                         1e-3);
        }
    }
}

// Many bags over few rows (every row repeated across bags), big enough that the kernels run
// their parallel loops: forward and the f32 gradient keep their bits on 1 and 2 threads.
TEST(EmbeddingBag, SameBitsOnOneAndTwoThreads) {
    BagCase c{13, 33, {}, {0}, {}, ops::BagPooling::kSum};
    Rng rng(3);
    for (int64_t b = 0; b < 700; ++b) {
        const int64_t n = static_cast<int64_t>(rng.below(5));
        for (int64_t i = 0; i < n; ++i) c.ids.push_back(static_cast<int32_t>(rng.below(13)));
        c.offsets.push_back(static_cast<int64_t>(c.ids.size()));
    }
    c.weights = uniform_values(static_cast<int64_t>(c.ids.size()), 4, 1.0f);
    auto table = uniform_values(c.R * c.D, 5, 1.0f);
    auto r = uniform_values(c.B() * c.D, 6, 1.0f);
    for (DType dt : {DType::kF32, DType::kBF16}) {
        std::vector<float> y[2], g[2];
        for (int threads : {1, 2}) {
            with_threads(threads, [&] {
                MemoryPool pool;
                Tape tape(pool);
                Var t = make_param(pool, {c.R, c.D}, table, dt, std::vector<float>(c.R * c.D));
                Var out = run_bag(tape, t, c);
                tape.backward(weighted_sum(tape, out, r));
                y[threads - 1] = out->value.to_vector();
                g[threads - 1] = t->grad.to_vector();
            });
        }
        EXPECT_TRUE(same_bits(y[0], y[1])) << dtype_name(dt) << " forward differs";
        EXPECT_TRUE(same_bits(g[0], g[1])) << dtype_name(dt) << " gradient differs";
    }
}

// bf16 table and output, f32 gradient. The forward sums in f32 and rounds once to bf16 (relative
// 2^-9); the inputs are bf16-representable, so the gradient differs from the reference only by
// the f32 sums and the bf16 rounding of dy = r (exact: r is bf16-representable).
TEST(EmbeddingBag, Bf16WithinRounding) {
    for (auto pooling : {ops::BagPooling::kSum, ops::BagPooling::kMean}) {
        BagCase c = mixed_case(17, pooling, false);
        MemoryPool pool;
        Tape tape(pool);
        auto table = uniform_values(c.R * c.D, 31, 1.0f);
        Var t = make_param(pool, {c.R, c.D}, table, DType::kBF16, std::vector<float>(c.R * c.D));
        Var y = run_bag(tape, t, c);
        ASSERT_EQ(y->value.dtype(), DType::kBF16);
        // |y| <= 4, so one bf16 rounding is within 4 * 2^-9 = 8e-3 absolute, 2^-9 relative.
        expect_close("bf16 y", y->value.to_vector(), bag_reference(c, table), 1e-6, 1.0 / 256);
        auto r = uniform_values(c.B() * c.D, 32, 1.0f);
        tape.backward(weighted_sum(tape, y, r));
        expect_close("bf16 dtable", t->grad.to_vector(),
                     bag_grad_reference(c, r, std::vector<float>(c.R * c.D)), 1e-6, 1e-6);
    }
}

TEST(EmbeddingBag, ErrorsNameTheBadValue) {
    MemoryPool pool;
    Tape tape(pool);
    Var t = make_input(pool, {7, 3}, uniform_values(21, 1, 1.0f), DType::kF32);
    using P = ops::BagPooling;
    auto bag = [&](std::vector<int32_t> ids, std::vector<int64_t> offsets,
                   std::vector<float> weights, P pooling) {
        return [&tape, &t, ids, offsets, weights, pooling] {
            ops::embedding_bag(tape, t, ids, offsets, weights, pooling);
        };
    };
    expect_error(bag({1, 7}, {0, 2}, {}, P::kSum), {"id 7", "R = 7"});
    expect_error(bag({-3}, {0, 1}, {}, P::kSum), {"id -3", "R = 7"});
    expect_error(bag({1, 2}, {1, 2}, {}, P::kSum), {"offsets[0] is 1"});
    expect_error(bag({1, 2}, {0, 2, 1, 2}, {}, P::kSum), {"offsets[2] = 1", "nondecreasing"});
    expect_error(bag({1, 2, 3}, {0, 2}, {}, P::kSum), {"offsets[1]", "is 2", "nnz = 3"});
    expect_error(bag({1}, {}, {}, P::kSum), {"offsets is empty", "B + 1"});
    expect_error(bag({1, 2}, {0, 2}, {1.0f}, P::kSum), {"1 per-sample weights", "nnz = 2"});
    expect_error(bag({1, 2}, {0, 2}, {1.0f, 2.0f}, P::kMean), {"mean pooling", "sum pooling"});
    Var flat = make_input(pool, {21}, uniform_values(21, 1, 1.0f), DType::kF32);
    std::vector<int32_t> ids{0};
    std::vector<int64_t> offsets{0, 1};
    expect_error([&] { ops::embedding_bag(tape, flat, ids, offsets, {}, P::kSum); },
                 {"(21)", "2 dimensions"});
    EXPECT_EQ(tape.size(), 0u);
}

// Rough timing, not a check (run with --gtest_also_run_disabled_tests): DLRM's 26 tables of 100k
// rows, D = 16, B = 2048, one id per bag, on the current thread count.
TEST(EmbeddingBag, DISABLED_Timing) {
    const int64_t B = 2048, R = 100000, D = 16, tables = 26;
    MemoryPool pool;
    Tape tape(pool);
    std::vector<Var> ts;
    std::vector<std::vector<int32_t>> ids(tables);
    std::vector<int64_t> offsets(B + 1);
    for (int64_t b = 0; b <= B; ++b) offsets[b] = b;
    Rng rng(1);
    for (int64_t k = 0; k < tables; ++k) {
        ts.push_back(make_param(pool, {R, D}, std::vector<float>(R * D, 0.5f), DType::kF32,
                                std::vector<float>(R * D)));
        for (int64_t b = 0; b < B; ++b) ids[k].push_back(static_cast<int32_t>(rng.below(R)));
    }
    using clock = std::chrono::steady_clock;
    double fwd = 0, bwd = 0;
    const int reps = 200;
    for (int rep = 0; rep < reps; ++rep) {
        std::vector<Var> ys;
        auto t0 = clock::now();
        for (int64_t k = 0; k < tables; ++k)
            ys.push_back(
                ops::embedding_bag(tape, ts[k], ids[k], offsets, {}, ops::BagPooling::kSum));
        auto t1 = clock::now();
        for (int64_t k = 0; k + 1 < tables; ++k)
            ys[k]->grad = make_tensor(pool, {B, D}, std::vector<float>(B * D, 1.0f), DType::kF32);
        Tensor seed = make_tensor(pool, {B, D}, std::vector<float>(B * D, 1.0f), DType::kF32);
        auto t2 = clock::now();
        tape.backward_from(ys.back(), seed);
        auto t3 = clock::now();
        fwd += std::chrono::duration<double, std::milli>(t1 - t0).count();
        bwd += std::chrono::duration<double, std::milli>(t3 - t2).count();
    }
    std::printf(
        "embedding_bag 26 x (B 2048, R 100k, D 16, 1 id/bag): forward %.3f ms, backward "
        "%.3f ms (threads %d)\n",
        fwd / reps, bwd / reps, num_threads());
}

}  // namespace
}  // namespace zt
