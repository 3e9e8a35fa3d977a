// The measured parallel grain (Note [Measured parallel grain] in src/tensor/threads.cpp).
#include "tensor/threads.h"

#include <gtest/gtest.h>

#include <cmath>

namespace zt {
namespace {

struct ThreadsAndFloors {
    ThreadsAndFloors() { set_parallel_floors_only(false); }
    ~ThreadsAndFloors() {
        set_num_threads(1);
        set_parallel_floors_only(true);  // the suite's setting (tests/test_main.cpp)
    }
};

TEST(ParallelGrain, OneThreadHasNothingToMeasure) {
    const ParallelGrain g = parallel_grain(1);
    EXPECT_EQ(g.region_s, 0.0);
    EXPECT_EQ(g.min_elems, 0);
    ThreadsAndFloors restore;
    set_num_threads(1);
    EXPECT_EQ(parallel_min_elems(12345), 12345);
}

// The break-even is the formula over what was measured: a loop of n elements takes n e alone and
// n e / t + r on t threads.
TEST(ParallelGrain, BreakEvenIsWhereTheTeamPaysForItsStart) {
    for (int t : {2, 3}) {
        const ParallelGrain g = parallel_grain(t);
        ASSERT_GT(g.region_s, 0.0) << t;
        ASSERT_GT(g.per_elem_s, 0.0) << t;
        const double even = g.region_s * t / ((t - 1) * g.per_elem_s);
        EXPECT_EQ(g.min_elems, static_cast<int64_t>(std::ceil(even))) << t;
        // At the break-even the two sides are equal to rounding; past it the team is faster.
        const double n = static_cast<double>(g.min_elems);
        EXPECT_NEAR(n * g.per_elem_s, n * g.per_elem_s / t + g.region_s,
                    g.per_elem_s * (1 + 1e-9 * n))
            << t;
        // Measured once per count: the same figures again.
        const ParallelGrain again = parallel_grain(t);
        EXPECT_EQ(again.region_s, g.region_s);
        EXPECT_EQ(again.min_elems, g.min_elems);
    }
}

TEST(ParallelGrain, KernelFloorIsALowerBoundAndTestsCanKeepIt) {
    ThreadsAndFloors restore;
    set_num_threads(2);
    const int64_t measured = parallel_grain(2).min_elems;
    EXPECT_EQ(parallel_min_elems(1), std::max<int64_t>(1, measured));
    EXPECT_EQ(parallel_min_elems(int64_t{1} << 40), int64_t{1} << 40);
    set_parallel_floors_only(true);
    EXPECT_EQ(parallel_min_elems(1000), 1000);
    set_parallel_floors_only(false);
    // The per-thread cache follows a change of thread count.
    set_num_threads(3);
    EXPECT_EQ(parallel_min_elems(1), std::max<int64_t>(1, parallel_grain(3).min_elems));
    set_num_threads(2);
    EXPECT_EQ(parallel_min_elems(1), std::max<int64_t>(1, measured));
}

}  // namespace
}  // namespace zt
