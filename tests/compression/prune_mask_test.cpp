// Pruning's pure parts: the cubic schedule against its formula, the update grid, magnitude masks
// (global and per layer, exact counts, ties by position, pruned weights kept pruned), N:M masks
// (every block of m, short last blocks), target selection, and the masked optimizer.
#include "compression/prune_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compression/masked_optimizer.h"
#include "compression/prune_schedule.h"
#include "optim/adamw.h"
#include "optim/lion.h"

namespace zt {
namespace {

PruningOptions magnitude(double initial, double final_s, int64_t start, int64_t end, int64_t f) {
    PruningOptions o;
    o.type = "magnitude";
    o.initial_sparsity = initial;
    o.final_sparsity = final_s;
    o.start_step = start;
    o.end_step = end;
    o.frequency = f;
    return o;
}

TEST(PruneSchedule, CubicFromInitialToFinal) {
    const PruningOptions o = magnitude(0.1, 0.5, 3, 11, 2);
    EXPECT_EQ(prune_sparsity_at(o, 2), 0.0);  // before start
    for (int64_t t = 3; t <= 11; ++t) {
        const double x = 1.0 - static_cast<double>(t - 3) / 8.0;
        EXPECT_NEAR(prune_sparsity_at(o, t), 0.5 + (0.1 - 0.5) * x * x * x, 1e-15) << t;
    }
    EXPECT_EQ(prune_sparsity_at(o, 12), 0.5);
    EXPECT_EQ(prune_sparsity_at(o, 1000), 0.5);
    // Non-decreasing: masks only grow.
    for (int64_t t = 1; t < 20; ++t)
        EXPECT_LE(prune_sparsity_at(o, t), prune_sparsity_at(o, t + 1));
}

TEST(PruneSchedule, UpdatesOnTheGridAndAtTheEnd) {
    const PruningOptions o = magnitude(0.0, 0.3, 3, 10, 3);
    std::vector<int64_t> at;
    for (int64_t t = 1; t <= 20; ++t)
        if (prune_updates_at(o, t)) at.push_back(t);
    EXPECT_EQ(at, (std::vector<int64_t>{3, 6, 9, 10}));
    PruningOptions one = magnitude(0.0, 0.3, 5, 5, 1);  // one shot
    EXPECT_TRUE(prune_updates_at(one, 5));
    EXPECT_EQ(prune_sparsity_at(one, 5), 0.3);
    EXPECT_FALSE(prune_updates_at(one, 6));
    PruningOptions nm;
    nm.type = "nm";
    nm.n = 2;
    nm.m = 4;
    nm.start_step = nm.end_step = 2;
    EXPECT_EQ(prune_sparsity_at(nm, 1), 0.0);
    EXPECT_EQ(prune_sparsity_at(nm, 2), 0.5);
    EXPECT_EQ(prune_sparsity_at(PruningOptions{}, 7), 0.0);  // off
}

std::vector<float> random_scores(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> s(n);
    for (float& x : s) x = std::fabs(d(rng));
    return s;
}

int64_t count(const std::vector<uint8_t>& p, const PruneTarget& t) {
    int64_t c = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel(); ++i) c += p[static_cast<size_t>(i)];
    return c;
}

// Two targets with a gap (a bias) between them and padding after: 7x5 and 3x9.
const std::vector<PruneTarget> kTargets = {{"a", 2, 7, 5}, {"b", 40, 3, 9}};
constexpr size_t kArena = 70;

TEST(MagnitudeMask, GlobalPrunesTheSmallestExactCount) {
    const std::vector<float> s = random_scores(kArena, 1);
    std::vector<uint8_t> p(kArena, 0);
    magnitude_mask(s, kTargets, 0.3, true, p);
    const int64_t total = 35 + 27;
    EXPECT_EQ(count(p, kTargets[0]) + count(p, kTargets[1]), prune_count(0.3, total));
    // Every pruned score is at most every kept one; nothing outside the targets.
    float max_pruned = 0, min_kept = 1e30f;
    for (const PruneTarget& t : kTargets)
        for (int64_t i = t.offset; i < t.offset + t.numel(); ++i)
            (p[i] ? max_pruned : min_kept) =
                p[i] ? std::max(max_pruned, s[i]) : std::min(min_kept, s[i]);
    EXPECT_LE(max_pruned, min_kept);
    for (size_t i : {0, 1, 37, 39, 67, 69}) EXPECT_EQ(p[i], 0) << i;
}

TEST(MagnitudeMask, PerLayerPrunesEachTargetToTheSparsity) {
    const std::vector<float> s = random_scores(kArena, 2);
    std::vector<uint8_t> p(kArena, 0);
    magnitude_mask(s, kTargets, 0.5, false, p);
    EXPECT_EQ(count(p, kTargets[0]), prune_count(0.5, 35));  // 17
    EXPECT_EQ(count(p, kTargets[1]), prune_count(0.5, 27));  // 13
}

TEST(MagnitudeMask, TiesGoByPositionAndPrunedStayPruned) {
    std::vector<float> s(kArena, 1.0f);  // all equal: the lowest positions go first
    std::vector<uint8_t> p(kArena, 0);
    const std::vector<PruneTarget> one = {kTargets[0]};
    magnitude_mask(s, one, 0.2, true, p);
    for (int64_t i = 2; i < 37; ++i) EXPECT_EQ(p[i], i < 2 + 7 ? 1 : 0) << i;
    // A weight pruned before (score -1) stays pruned even where it is the largest weight.
    std::vector<float> s2 = random_scores(kArena, 3);
    s2[30] = -1.0f;
    std::vector<uint8_t> p2(kArena, 0);
    magnitude_mask(s2, one, 0.2, true, p2);
    EXPECT_EQ(p2[30], 1);
    EXPECT_EQ(count(p2, kTargets[0]), prune_count(0.2, 35));
    // More already pruned than the count asks: all of them stay, none added.
    std::vector<float> s3 = random_scores(kArena, 4);
    for (int i = 2; i < 20; ++i) s3[i] = -1.0f;
    std::vector<uint8_t> p3(kArena, 0);
    magnitude_mask(s3, one, 0.2, true, p3);
    EXPECT_EQ(count(p3, kTargets[0]), 18);
}

TEST(NmMask, EveryBlockOfMKeepsN) {
    const std::vector<float> s = random_scores(kArena, 5);
    std::vector<uint8_t> p(kArena, 0);
    nm_mask(s, kTargets, 2, 4, p);
    for (const PruneTarget& t : kTargets)
        for (int64_t r = 0; r < t.rows; ++r)
            for (int64_t b = 0; b < t.cols; b += 4) {
                const int64_t len = std::min<int64_t>(4, t.cols - b);
                const int64_t lo = t.offset + r * t.cols + b;
                int64_t kept = 0;
                float min_kept = 1e30f, max_pruned = 0;
                for (int64_t i = lo; i < lo + len; ++i) {
                    kept += p[i] ? 0 : 1;
                    if (p[i])
                        max_pruned = std::max(max_pruned, s[i]);
                    else
                        min_kept = std::min(min_kept, s[i]);
                }
                EXPECT_EQ(kept, std::min<int64_t>(2, len)) << t.name << " row " << r << " at " << b;
                EXPECT_LE(max_pruned, min_kept);
            }
    for (size_t i : {0, 1, 37, 39, 67}) EXPECT_EQ(p[i], 0) << i;
}

TEST(MaskedOptimizer, PrunedWeightsStayZeroInMasterAndCopy) {
    for (int which = 0; which < 2; ++which) {
        std::unique_ptr<Optimizer> inner;
        if (which == 0)
            inner = std::make_unique<AdamW>(AdamWOptions{});
        else
            inner = std::make_unique<Lion>(LionOptions{});
        MaskedOptimizer opt(std::move(inner));
        const std::vector<std::string> names = opt.state_names();
        ASSERT_EQ(names.back(), kPrunedStateName);
        ASSERT_EQ(opt.mask_index(), static_cast<int>(names.size()) - 1);
        const int64_t n = 37;
        std::vector<float> w = random_scores(n, 6), g = random_scores(n, 7);
        std::vector<std::vector<float>> st(names.size(), std::vector<float>(n, 0.0f));
        for (int64_t i = 0; i < n; i += 3) st.back()[i] = 1.0f;  // pruned
        std::vector<float*> sp;
        for (auto& v : st) sp.push_back(v.data());
        std::vector<uint16_t> copy(n, 0xffff);
        const OptimSegment seg{0, n, true};
        opt.step_on(w.data(), g.data(), sp.data(), n, {&seg, 1}, 1e-2f, 1,
                    {copy.data(), DType::kBF16});
        for (int64_t i = 0; i < n; ++i) {
            if (i % 3 == 0) {
                EXPECT_EQ(w[i], 0.0f) << i;
                EXPECT_EQ(copy[i], 0) << i;
            } else {
                EXPECT_NE(w[i], 0.0f) << i;
                EXPECT_NE(copy[i], 0xffff) << i;
            }
        }
    }
}

}  // namespace
}  // namespace zt
