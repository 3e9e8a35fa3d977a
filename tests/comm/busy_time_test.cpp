// CommStats::busy_s (Note [Busy time]): the union of the ops' [issue, done] intervals, against a
// brute-force union on a fine grid, for intervals that complete in any order.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "comm/detail.h"
#include "util/random.h"

namespace zt {

namespace {

// Length of the union of integer-ended intervals, by marking unit cells.
double grid_union(const std::vector<std::pair<int, int>>& ivs) {
    std::vector<bool> cell(2000, false);
    for (auto [a, b] : ivs)
        for (int t = a; t < b; ++t) cell[static_cast<size_t>(t)] = true;
    return static_cast<double>(std::count(cell.begin(), cell.end(), true));
}

}  // namespace

TEST(CommBusyTime, OverlappingOpsCountOnceInAnyCompletionOrder) {
    comm_detail::StatsRecorder r;
    // A long op completing after two short ones inside it, then one overlapping its end, and one
    // apart: union [0, 12) + [20, 25) = 17 s, although the per-op seconds sum to 10+1+1+4+5 = 21.
    r.record(CollectiveKind::kAllGather, 2, 3);
    r.record(CollectiveKind::kAllGather, 5, 6);
    r.record(CollectiveKind::kReduceScatter, 0, 10);
    r.record(CollectiveKind::kAllReduce, 8, 12);
    r.record(CollectiveKind::kAllReduce, 20, 25);
    CommStats s = r.get();
    EXPECT_DOUBLE_EQ(s.busy_s, 17.0);
    double per_op = 0;
    for (double x : s.seconds) per_op += x;
    EXPECT_DOUBLE_EQ(per_op, 21.0);
    r.reset();
    EXPECT_EQ(r.get().busy_s, 0.0);
}

TEST(CommBusyTime, MatchesABruteForceUnion) {
    // Completions within the horizon of each other (800 s + 60 s < kBusyHorizonS), in random order.
    for (uint64_t trial = 0; trial < 50; ++trial) {
        comm_detail::StatsRecorder r;
        std::vector<std::pair<int, int>> ivs;
        for (uint64_t i = 0; i < 40; ++i) {
            const int a = static_cast<int>(uniform01(7, trial, 2 * i) * 800);
            const int len = static_cast<int>(uniform01(7, trial, 2 * i + 1) * 60);
            ivs.push_back({a, a + len});
        }
        for (auto [a, b] : ivs) r.record(CollectiveKind::kAllReduce, a, b);
        EXPECT_DOUBLE_EQ(r.get().busy_s, grid_union(ivs)) << "trial " << trial;
    }
}

TEST(CommBusyTime, FoldsWhatEndedLongAgoWithoutLosingIt) {
    comm_detail::StatsRecorder r;
    const double h = comm_detail::StatsRecorder::kBusyHorizonS;
    for (int i = 0; i < 1000; ++i) r.record(CollectiveKind::kAllReduce, i * h, i * h + 1);
    EXPECT_DOUBLE_EQ(r.get().busy_s, 1000.0);
}

}  // namespace zt
