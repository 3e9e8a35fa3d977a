// The measured parallel grain (Note [Measured parallel grain] in src/tensor/threads.cpp).
#include "tensor/threads.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/gemm.h"

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

// Note [Small products on one thread]: the products' break-even is the same formula over one
// thread's seconds per FLOP, the kernel floor again a lower bound.
TEST(ParallelGrain, ProductsRunOnTheTeamPastTheirOwnBreakEven) {
    ThreadsAndFloors restore;
    const ParallelGrain g = parallel_grain(2);
    ASSERT_GT(g.per_flop_s, 0.0);
    EXPECT_DOUBLE_EQ(g.min_flops, g.region_s * 2 / g.per_flop_s);
    set_num_threads(2);
    EXPECT_DOUBLE_EQ(parallel_min_flops(1), std::max(1.0, g.min_flops));
    EXPECT_DOUBLE_EQ(parallel_min_flops(1e18), 1e18);
    set_parallel_floors_only(true);
    EXPECT_DOUBLE_EQ(parallel_min_flops(4e6), 4e6);
    set_parallel_floors_only(false);
    set_num_threads(1);
    EXPECT_DOUBLE_EQ(parallel_min_flops(4e6), 4e6);
}

// A product below the break-even runs on one thread, a larger one on the team: both give the
// bits of one thread, through either library.
TEST(ParallelGrain, ProductsEitherSideOfTheBreakEvenGiveOneThreadsBits) {
    ThreadsAndFloors restore;
    const int64_t n = 96, k = 80;
    // Twice the break-even's rows (and the OpenBLAS floor's), a multiple of 64; and 64 rows.
    const double team_flops = 2 * std::max(4e6, parallel_grain(2).min_flops);
    const int64_t big = (static_cast<int64_t>(team_flops / (2.0 * n * k)) / 64 + 1) * 64;
    for (GemmLibrary lib : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas}) {
        if (!gemm_supported(lib, DType::kF32)) continue;
        for (int64_t m : {int64_t{64}, big}) {
            std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
            for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * static_cast<double>(i));
            for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.11 * static_cast<double>(i));
            std::vector<float> c[2];
            for (int t : {1, 2}) {
                set_num_threads(t);
                c[t - 1].assign(static_cast<size_t>(m * n), 0.0f);
                gemm_with(lib, m, n, k, 1.0f, {a.data(), k, false}, {b.data(), n, false},
                          DType::kF32, 0.0f, c[t - 1].data(), n, DType::kF32);
            }
            EXPECT_EQ(c[0], c[1]) << gemm_library_name(lib) << " m " << m;
        }
    }
}

}  // namespace
}  // namespace zt
