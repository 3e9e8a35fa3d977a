// ZeRO's layout as pure functions (parallel/zero_layout.h): owned ranges, per-rank counts of a
// collective, which buffers each stage holds whole, and the gradient bucket plan.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "parallel/zero_layout.h"

namespace zt {
namespace {

// Parameter ranges laid out back to back from 0, as the arena lays them out.
std::vector<Range> layout(const std::vector<int64_t>& sizes) {
    std::vector<Range> out;
    int64_t at = 0;
    for (int64_t s : sizes) {
        out.push_back({at, at + s});
        at += s;
    }
    return out;
}

// Buckets tile [0, padded) exactly, in descending order (the first planned is the arena's tail),
// and each holds whole parameters: its range is exactly the union of its parameters' ranges,
// except that the first bucket also covers the padding after the last parameter.
void expect_valid_plan(const std::vector<Bucket>& plan, const std::vector<Range>& params,
                       int64_t padded) {
    ASSERT_FALSE(plan.empty());
    EXPECT_EQ(plan.front().range.hi, padded);
    EXPECT_EQ(plan.back().range.lo, 0);
    for (size_t b = 0; b + 1 < plan.size(); ++b)
        EXPECT_EQ(plan[b].range.lo, plan[b + 1].range.hi) << "bucket " << b;
    std::vector<int> seen;
    for (size_t b = 0; b < plan.size(); ++b) {
        const Bucket& bk = plan[b];
        ASSERT_FALSE(bk.params.empty()) << "bucket " << b;
        for (size_t k = 0; k + 1 < bk.params.size(); ++k)
            EXPECT_EQ(bk.params[k + 1], bk.params[k] - 1) << "reverse order in bucket " << b;
        const Range first = params[static_cast<size_t>(bk.params.back())];
        const Range last = params[static_cast<size_t>(bk.params.front())];
        EXPECT_EQ(bk.range.lo, first.lo) << "bucket " << b;
        EXPECT_EQ(bk.range.hi, b == 0 ? padded : last.hi) << "bucket " << b;
        seen.insert(seen.end(), bk.params.begin(), bk.params.end());
    }
    std::vector<int> want(params.size());
    std::iota(want.rbegin(), want.rend(), 0);  // n-1, ..., 0: every parameter once, in reverse
    EXPECT_EQ(seen, want);
}

TEST(ZeroLayout, PaddedLength) {
    EXPECT_EQ(padded_length(10, 1), 10);
    EXPECT_EQ(padded_length(10, 2), 10);
    EXPECT_EQ(padded_length(10, 3), 12);
    EXPECT_EQ(padded_length(10, 4), 12);
    EXPECT_EQ(padded_length(0, 4), 0);
    EXPECT_EQ(padded_length(7, 8), 8);
}

TEST(ZeroLayout, OwnedRangesTileThePaddedArena) {
    for (int64_t numel : {1, 7, 64, 1001}) {
        for (int ranks : {1, 2, 3, 4, 8}) {
            const int64_t padded = padded_length(numel, ranks);
            int64_t at = 0;
            for (int r = 0; r < ranks; ++r) {
                const Range own = owned_range(padded, ranks, r);
                EXPECT_EQ(own.lo, at) << numel << " on " << ranks << ", rank " << r;
                EXPECT_EQ(own.size(), padded / ranks);
                at = own.hi;
            }
            EXPECT_EQ(at, padded);
        }
    }
}

TEST(ZeroLayout, IntersectAndRangeBasics) {
    EXPECT_EQ(intersect({0, 10}, {5, 20}), (Range{5, 10}));
    EXPECT_TRUE(intersect({0, 5}, {7, 9}).empty());
    EXPECT_EQ(intersect({0, 5}, {7, 9}).size(), 0);
    EXPECT_EQ(intersect({3, 3}, {0, 9}).size(), 0);
}

TEST(ZeroLayout, RankCountsSumToTheRange) {
    const int64_t padded = 24;
    for (int ranks : {1, 2, 3, 4, 6}) {
        for (int64_t lo = 0; lo <= padded; lo += 5) {
            for (int64_t hi = lo; hi <= padded; hi += 7) {
                const Range r{lo, hi};
                const std::vector<int64_t> counts = rank_counts(r, padded, ranks);
                ASSERT_EQ(counts.size(), static_cast<size_t>(ranks));
                EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), r.size())
                    << "[" << lo << ", " << hi << ") on " << ranks;
                for (int q = 0; q < ranks; ++q)
                    EXPECT_EQ(counts[q], intersect(r, owned_range(padded, ranks, q)).size());
            }
        }
    }
    // A range inside one rank's part: that rank's count only.
    EXPECT_EQ(rank_counts({7, 11}, 24, 4), (std::vector<int64_t>{0, 4, 0, 0}));
    EXPECT_EQ(rank_counts({4, 14}, 24, 4), (std::vector<int64_t>{2, 6, 2, 0}));
}

TEST(ZeroLayout, ArenaOptionsPerStageAndDtype) {
    struct Want {
        bool master, grads, compute;
    };
    // The table in zero_layout.h: (stage, mixed) -> whole master, grads, compute copy.
    const Want mixed[4] = {{true, true, true}, {false, true, true}, {false, false, true},
                           {false, false, false}};
    const Want f32[4] = {{true, true, true}, {true, true, true}, {true, false, true},
                         {false, false, false}};
    for (int stage = 0; stage <= 3; ++stage) {
        for (DType compute : {DType::kF32, DType::kBF16, DType::kF16}) {
            const DType grad = compute == DType::kBF16 ? DType::kBF16 : DType::kF32;
            const Want w = compute == DType::kF32 ? f32[stage] : mixed[stage];
            const ArenaOptions o = zero_arena_options(stage, compute, grad, 10, 4, 2);
            const std::string at = "stage " + std::to_string(stage) + ", " +
                                   (compute == DType::kF32 ? "f32" : "half");
            EXPECT_EQ(o.full_master, w.master) << at;
            EXPECT_EQ(o.full_grads, w.grads) << at;
            EXPECT_EQ(o.full_compute, w.compute) << at;
            EXPECT_EQ(o.compute_dtype, compute) << at;
            EXPECT_EQ(o.grad_dtype, grad) << at;
            EXPECT_EQ(o.pad_to, 4) << at;
            // 10 elements on 4 ranks: padded to 12, rank 2 owns [6, 9).
            EXPECT_EQ(o.owned_lo, 6) << at;
            EXPECT_EQ(o.owned_hi, 9) << at;
        }
    }
    const ArenaOptions one = zero_arena_options(3, DType::kBF16, DType::kF32, 5, 1, 0);
    EXPECT_EQ(one.owned_lo, 0);
    EXPECT_EQ(one.owned_hi, 5);
}

TEST(ZeroLayout, BucketsTileTheArenaWithWholeParametersInReverse) {
    const std::vector<Range> params = layout({3, 5, 2, 8, 1, 4});  // 23 elements
    for (int ranks : {1, 2, 4, 5}) {
        const int64_t padded = padded_length(23, ranks);
        for (int64_t bucket : {1, 2, 4, 6, 9, 13, 23, 100}) {
            SCOPED_TRACE("bucket " + std::to_string(bucket) + ", " + std::to_string(ranks) +
                         " ranks");
            expect_valid_plan(plan_buckets(params, padded, bucket), params, padded);
        }
    }
}

TEST(ZeroLayout, BucketsCloseAtTheBucketSize) {
    // From the end: 4 -> 4 + 1 = 5 >= 5 closes; 8 closes alone; 2 + 5 = 7 closes; 3 is the rest.
    const std::vector<Range> params = layout({3, 5, 2, 8, 1, 4});
    const std::vector<Bucket> plan = plan_buckets(params, 23, 5);
    ASSERT_EQ(plan.size(), 4u);
    EXPECT_EQ(plan[0].range, (Range{18, 23}));
    EXPECT_EQ(plan[0].params, (std::vector<int>{5, 4}));
    EXPECT_EQ(plan[1].range, (Range{10, 18}));
    EXPECT_EQ(plan[1].params, (std::vector<int>{3}));
    EXPECT_EQ(plan[2].range, (Range{3, 10}));
    EXPECT_EQ(plan[2].params, (std::vector<int>{2, 1}));
    EXPECT_EQ(plan[3].range, (Range{0, 3}));  // the remainder, below the bucket size
    EXPECT_EQ(plan[3].params, (std::vector<int>{0}));
    // Every bucket but the last planned holds at least bucket_elems, and would hold fewer
    // without its last-added (lowest) parameter.
    for (int64_t bucket : {2, 3, 5, 7, 10}) {
        const std::vector<Bucket> p = plan_buckets(params, 23, bucket);
        for (size_t b = 0; b + 1 < p.size(); ++b) {
            EXPECT_GE(p[b].range.size(), bucket) << "bucket size " << bucket << ", bucket " << b;
            const Range lowest = params[static_cast<size_t>(p[b].params.back())];
            EXPECT_LT(p[b].range.size() - lowest.size(), bucket)
                << "bucket size " << bucket << ", bucket " << b << " closed late";
        }
    }
}

TEST(ZeroLayout, AParameterLargerThanTheBucketGetsItsOwn) {
    // After a bucket closes, a parameter of bucket_elems or more fills the next one alone.
    const std::vector<Range> params = layout({2, 50, 12});
    const std::vector<Bucket> plan = plan_buckets(params, 64, 10);
    ASSERT_EQ(plan.size(), 3u);
    EXPECT_EQ(plan[0].params, (std::vector<int>{2}));
    EXPECT_EQ(plan[1].params, (std::vector<int>{1}));
    EXPECT_EQ(plan[1].range, (Range{2, 52}));
    EXPECT_EQ(plan[2].params, (std::vector<int>{0}));
    // Joining an open bucket, it closes that bucket: nothing below it shares its bucket.
    const std::vector<Range> small_tail = layout({2, 50, 2});
    const std::vector<Bucket> p = plan_buckets(small_tail, 54, 10);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].params, (std::vector<int>{2, 1}));
    EXPECT_EQ(p[1].params, (std::vector<int>{0}));
}

TEST(ZeroLayout, BucketSizeOneGivesOneBucketPerParameter) {
    const std::vector<Range> params = layout({3, 5, 2, 8, 1, 4});
    const std::vector<Bucket> plan = plan_buckets(params, 24, 1);
    ASSERT_EQ(plan.size(), params.size());
    for (size_t b = 0; b < plan.size(); ++b) {
        const int i = static_cast<int>(params.size() - 1 - b);
        EXPECT_EQ(plan[b].params, (std::vector<int>{i}));
        EXPECT_EQ(plan[b].range.lo, params[static_cast<size_t>(i)].lo);
    }
    EXPECT_EQ(plan[0].range, (Range{19, 24}));  // the last parameter and the padding
}

TEST(ZeroLayout, PaddingTailIsInTheFirstBucket) {
    const std::vector<Range> params = layout({3, 5, 2});  // 10 elements
    const int64_t padded = padded_length(10, 4);          // 12
    for (int64_t bucket : {1, 4, 100}) {
        const std::vector<Bucket> plan = plan_buckets(params, padded, bucket);
        EXPECT_EQ(plan.front().range.hi, padded) << "bucket " << bucket;
        EXPECT_EQ(plan.front().params.front(), 2) << "bucket " << bucket;
    }
    const std::vector<Bucket> one = plan_buckets(params, padded, 100);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].range, (Range{0, 12}));
    EXPECT_EQ(one[0].params, (std::vector<int>{2, 1, 0}));
}

}  // namespace
}  // namespace zt
