// Structured pruning's pure parts (compression/prune_groups.h, docs/pruning.md): a unit's
// elements (rows in parts, columns), the count per group from the schedule's formula, the lowest
// L2 norms pruned as whole units, ties to the lower unit, masks that only grow, and the counts
// of whole units a mask holds.
#include "compression/prune_groups.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "compression/prune_mask.h"
#include "compression/prune_schedule.h"

namespace zt {
namespace {

// A head-like group: a (3 x units x w, cols) matrix in 3 parts at offset 5, then a (rows2,
// units x w) matrix whose columns belong to the units.
PruneUnitGroup head_group(int64_t units, int64_t w, int64_t cols, int64_t rows2) {
    PruneUnitGroup g{"layer", "heads", units, {}};
    g.slices.push_back({5, 3 * units * w, cols, true, w, 3});
    g.slices.push_back({5 + 3 * units * w * cols, rows2, units * w, false, w, 1});
    return g;
}

int64_t group_end(const PruneUnitGroup& g) {
    const PruneSlice& s = g.slices.back();
    return s.offset + s.rows * s.cols;
}

TEST(PruneGroups, UnitElementsAreItsRowsInEveryPartAndItsColumns) {
    const PruneUnitGroup g = head_group(3, 2, 4, 5);  // 3 units of 2 rows / 2 columns
    std::vector<int> owner(static_cast<size_t>(group_end(g)), -1);
    for (int64_t u = 0; u < 3; ++u)
        for_each_unit_element(g, u, [&](int64_t i) {
            EXPECT_EQ(owner[static_cast<size_t>(i)], -1) << i;  // each element once
            owner[static_cast<size_t>(i)] = static_cast<int>(u);
        });
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(owner[static_cast<size_t>(i)], -1);  // before
    for (int64_t r = 0; r < 18; ++r)  // row r of the first matrix: unit (r mod 6) / 2
        for (int64_t c = 0; c < 4; ++c)
            EXPECT_EQ(owner[static_cast<size_t>(5 + r * 4 + c)], (r % 6) / 2) << r;
    const int64_t second = 5 + 18 * 4;
    for (int64_t r = 0; r < 5; ++r)
        for (int64_t c = 0; c < 6; ++c)
            EXPECT_EQ(owner[static_cast<size_t>(second + r * 6 + c)], c / 2) << r << "," << c;
}

TEST(PruneGroups, LowestNormUnitsArePrunedWhole) {
    const PruneUnitGroup g = head_group(4, 2, 3, 2);
    std::vector<float> scores(static_cast<size_t>(group_end(g)), 1.0f);
    // Unit norms: unit u's elements score (u + 1) except unit 2, the smallest at 0.5, and unit 0
    // at 0.75; counts 2 prunes units 2 and 0.
    const float level[4] = {0.75f, 2.0f, 0.5f, 3.0f};
    for (int64_t u = 0; u < 4; ++u)
        for_each_unit_element(g, u, [&](int64_t i) { scores[static_cast<size_t>(i)] = level[u]; });
    std::vector<uint8_t> pruned(scores.size(), 0);
    const std::vector<PruneUnitGroup> gs = {g};
    const std::vector<int64_t> two = {2};
    structured_mask(scores, gs, two, pruned);
    for (int64_t u = 0; u < 4; ++u)
        for_each_unit_element(g, u, [&](int64_t i) {
            EXPECT_EQ(pruned[static_cast<size_t>(i)], u == 0 || u == 2 ? 1 : 0) << u;
        });
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(pruned[static_cast<size_t>(i)], 0);
    EXPECT_EQ(pruned_units(gs, pruned), std::vector<int64_t>{2});
}

TEST(PruneGroups, NormIsL2OverTheUnitAndTiesGoToTheLowerUnit) {
    PruneUnitGroup g{"mlp", "channels", 3, {}};
    g.slices.push_back({0, 3, 4, true, 1, 1});  // rows of a (3, 4)
    std::vector<float> scores = {3, 4, 0, 0,    // unit 0: L2 5
                                 1, 1, 1, 1,    // unit 1: L2 2 (sum 4: less than unit 2's 5)
                                 5, 0, 0, 0};   // unit 2: L2 5
    std::vector<uint8_t> pruned(scores.size(), 0);
    const std::vector<PruneUnitGroup> gs = {g};
    const std::vector<int64_t> two = {2};
    structured_mask(scores, gs, two, pruned);
    // Unit 1 (norm 2), then the tie at 5 goes to unit 0.
    EXPECT_EQ(pruned, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));
}

TEST(PruneGroups, PrunedUnitsStayPrunedAndMasksOnlyGrow) {
    PruneUnitGroup g{"mlp", "channels", 4, {}};
    g.slices.push_back({0, 4, 2, true, 1, 1});
    // Unit 3 was pruned (scores -1); unit 0 is the smallest of the others.
    std::vector<float> scores = {0.1f, 0.1f, 2, 2, 3, 3, -1, -1};
    std::vector<uint8_t> pruned(scores.size(), 0);
    const std::vector<PruneUnitGroup> gs = {g};
    const std::vector<int64_t> one = {1}, two = {2};
    structured_mask(scores, gs, one, pruned);  // a count below what is pruned keeps it pruned
    EXPECT_EQ(pruned, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 1}));
    structured_mask(scores, gs, two, pruned);
    EXPECT_EQ(pruned, (std::vector<uint8_t>{1, 1, 0, 0, 0, 0, 1, 1}));
}

TEST(PruneGroups, ScheduleCountsAreTheCubicFormulaPerLayer) {
    PruningOptions o;
    o.type = "structured";
    o.heads = 0.5;
    o.channels = 0.3;
    o.start_step = 3;
    o.end_step = 11;
    o.frequency = 4;
    for (int64_t t = 0; t <= 14; ++t) {
        double hf = 0, cf = 0;
        if (t >= 3) {
            const double left = 1.0 - std::min(1.0, (t - 3) / 8.0);
            hf = 0.5 * (1 - left * left * left);
            cf = 0.3 * (1 - left * left * left);
        }
        EXPECT_DOUBLE_EQ(prune_heads_at(o, t), hf) << t;
        EXPECT_DOUBLE_EQ(prune_channels_at(o, t), cf) << t;
        EXPECT_EQ(prune_count(prune_heads_at(o, t), 12), static_cast<int64_t>(std::floor(hf * 12)))
            << t;
        EXPECT_EQ(prune_sparsity_at(o, t), 0.0);  // no weight-level target
        EXPECT_EQ(prune_updates_at(o, t), t == 3 || t == 7 || t == 11) << t;
    }
    // A fraction below 1 leaves a unit: floor(f H) < H.
    EXPECT_EQ(prune_count(0.99, 4), 3);
}

}  // namespace
}  // namespace zt
