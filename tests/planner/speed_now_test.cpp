// Kernel times at the host's speed now (Note [Kernel times at the host's speed now],
// src/planner/speed_now.cpp): which entries a reference scales, by how much, what a busy host
// leaves alone, and that the references travel with the profile.
#include "planner/speed_now.h"

#include <gtest/gtest.h>

#include "models/family.h"
#include "planner/profile.h"
#include "planner_test_util.h"
#include "util/error.h"

namespace zt {
namespace {

// A profile whose one-thread products were timed when the reference took 1 ms, its two-thread
// one at 2 ms, a lookup (never scaled) and rates at 1 and 4 threads with their references.
MachineProfile timed_profile() {
    MachineProfile p = testing::round_profile();
    p.shape_s["gemm f32 t1 NT 512x512x512 after 4MiB"] = 0.010;
    p.shape_ref_s["gemm f32 t1 NT 512x512x512 after 4MiB"] = 1e-3;
    p.shape_s["gemm bf16 t1 NN 256x64x16"] = 0.002;
    p.shape_ref_s["gemm bf16 t1 NN 256x64x16"] = 1e-3;
    p.shape_s["gemm f32 t2 TN 64x64x64"] = 0.004;
    p.shape_ref_s["gemm f32 t2 TN 64x64x64"] = 2e-3;
    p.shape_s["gemm f32 t1 NT 8x8x8"] = 0.001;  // timed before references were kept
    p.shape_s["bag f32 t1 256x1 r10 d16"] = 3e-6;
    p.rates[0].speed_ref_s = 1e-3;    // 1 thread
    p.rates[1].speed_ref_s = 0.5e-3;  // 4 threads
    return p;
}

TEST(SpeedNow, ProductKeysNameTheirThreadCountAndNothingElseIsScaled) {
    EXPECT_EQ(speed_ref_threads_of_shape("gemm f32 t1 NT 512x512x512 after 4MiB"), 1);
    EXPECT_EQ(speed_ref_threads_of_shape("gemm bf16 t16 TN 8x8x8"), 16);
    EXPECT_EQ(speed_ref_threads_of_shape("bag f32 t1 256x1 r10 d16"), 0);
    EXPECT_EQ(speed_ref_threads_of_shape("dot f32 t2 256 k6 d16"), 0);
    EXPECT_EQ(speed_ref_threads_of_shape("gemm"), 0);
}

TEST(SpeedNow, ATeamsReferenceCountsOnlyWhenItRanFasterThanOneThread) {
    EXPECT_TRUE(team_had_its_cores(1.5e-3, 0.8e-3));    // two vCPUs at work
    EXPECT_TRUE(team_had_its_cores(1.5e-3, 1.125e-3));  // the bound: 1 / 0.75 as fast
    EXPECT_FALSE(team_had_its_cores(1.5e-3, 1.4e-3));   // the second one taken away
    EXPECT_FALSE(team_had_its_cores(1.5e-3, 0));
}

TEST(SpeedNow, ProductsAndRatesScaleByNowOverThenAndReadAsMeasuredNow) {
    MachineProfile p = timed_profile();
    const MachineProfile before = p;
    // One thread now 1.25x as slow as when timed; two threads not asked for.
    const std::map<int, double> f = rescale_to_speed(p, {{1, 1.25e-3}});
    ASSERT_EQ(f.size(), 1u);
    EXPECT_DOUBLE_EQ(f.at(1), 1.25);
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t1 NT 512x512x512 after 4MiB"], 0.0125);
    EXPECT_DOUBLE_EQ(p.shape_s["gemm bf16 t1 NN 256x64x16"], 0.0025);  // f32's reference serves
    EXPECT_DOUBLE_EQ(p.shape_ref_s["gemm bf16 t1 NN 256x64x16"], 1.25e-3);
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t2 TN 64x64x64"], 0.004);  // another thread count
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t1 NT 8x8x8"], 0.001);     // no reference: as timed
    EXPECT_DOUBLE_EQ(p.shape_s["bag f32 t1 256x1 r10 d16"], 3e-6);  // not a product
    EXPECT_DOUBLE_EQ(p.rates[0].gemm_flops[0][1], before.rates[0].gemm_flops[0][1] / 1.25);
    EXPECT_DOUBLE_EQ(p.rates[0].gemm_flops[1][0], before.rates[0].gemm_flops[1][0] / 1.25);
    EXPECT_DOUBLE_EQ(p.rates[0].attention_flops, before.rates[0].attention_flops / 1.25);
    EXPECT_DOUBLE_EQ(p.rates[0].elementwise_bytes_per_s, before.rates[0].elementwise_bytes_per_s);
    EXPECT_DOUBLE_EQ(p.rates[0].speed_ref_s, 1.25e-3);
    EXPECT_DOUBLE_EQ(p.rates[1].gemm_flops[0][1], before.rates[1].gemm_flops[0][1]);
    // Rebased: the same speed again changes nothing (no compounding).
    const MachineProfile once = p;
    EXPECT_DOUBLE_EQ(rescale_to_speed(p, {{1, 1.25e-3}}).at(1), 1.0);
    EXPECT_EQ(p.shape_s, once.shape_s);
    // A faster host: times shrink; 4 threads' rates grow.
    const std::map<int, double> g = rescale_to_speed(p, {{1, 1e-3}, {2, 1e-3}, {4, 0.25e-3}});
    EXPECT_DOUBLE_EQ(g.at(2), 0.5);
    EXPECT_DOUBLE_EQ(g.at(4), 0.5);
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t2 TN 64x64x64"], 0.002);
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t1 NT 512x512x512 after 4MiB"], 0.010);
    EXPECT_DOUBLE_EQ(p.rates[1].gemm_flops[0][1], before.rates[1].gemm_flops[0][1] * 2);
}

TEST(SpeedNow, TimesOnlyTheAskedThreadCountsAndLeavesABusyHostsProfileAlone) {
    const LoadProbe quiet = [](const std::function<void()>& fn) {
        fn();
        return 0.0;
    };
    const LoadProbe busy = [](const std::function<void()>& fn) {
        fn();
        return 1.0;
    };
    MachineProfile p = timed_profile();
    p.speed_now[1] = 2e-3;  // this process's reference at 1 thread: twice as slow
    MachineProfile b = p;
    EXPECT_NE(at_current_speed(b, {1}, busy).find("busy"), std::string::npos);
    EXPECT_EQ(b.shape_s, p.shape_s);
    const std::string note = at_current_speed(p, {1}, quiet);
    EXPECT_NE(note.find("2.00x at 1 thread"), std::string::npos) << note;
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t1 NT 512x512x512 after 4MiB"], 0.020);
    EXPECT_DOUBLE_EQ(p.shape_s["gemm f32 t2 TN 64x64x64"], 0.004);  // 2 threads not asked for
    EXPECT_EQ(p.speed_now.count(2), 0u);                            // nor timed
    // A team that ran without its cores gave no reference (0): its products stay as timed.
    MachineProfile t2 = timed_profile();
    t2.speed_now[2] = 0;
    EXPECT_EQ(at_current_speed(t2, {2}, quiet), "");
    EXPECT_DOUBLE_EQ(t2.shape_s["gemm f32 t2 TN 64x64x64"], 0.004);
    // Thread counts the profile holds no reference at are not timed either.
    MachineProfile none = testing::round_profile();
    EXPECT_EQ(at_current_speed(none, {1, 2}, quiet), "");
    EXPECT_TRUE(none.speed_now.empty());
}

TEST(SpeedNow, MeasuredProductsKeepTheReferenceAndTheProfileKeepsBoth) {
    MachineProfile p = testing::round_profile();
    const std::vector<GemmShape> g = {{64, 32, 16, 1}};
    const std::vector<LookupShape> l = {{64, 1, 100, 8}};
    EXPECT_EQ(measure_shapes(p, DType::kF32, 1, g, l, {}, 1e-4), 4);
    ASSERT_EQ(p.shape_ref_s.size(), 3u);  // the three lanes; the lookup has none
    const double ref = p.speed_now.at(1);
    EXPECT_GT(ref, 0);
    for (const auto& [key, then] : p.shape_ref_s) {
        EXPECT_EQ(speed_ref_threads_of_shape(key), 1) << key;
        EXPECT_DOUBLE_EQ(then, ref);
    }
    p.rates[0].speed_ref_s = 7e-4;
    const MachineProfile q = profile_from_json(profile_json(p), "p.json");
    EXPECT_EQ(q.shape_ref_s, p.shape_ref_s);
    EXPECT_DOUBLE_EQ(q.rates[0].speed_ref_s, 7e-4);
    EXPECT_DOUBLE_EQ(q.rates[1].speed_ref_s, 0);
    EXPECT_TRUE(q.speed_now.empty());  // this process's, not saved
    // Older profiles have neither.
    nlohmann::json old = profile_json(p);
    old.erase("shape_ref_s");
    for (auto& r : old["rates"]) r.erase("speed_ref_s");
    const MachineProfile o = profile_from_json(old, "old.json");
    EXPECT_TRUE(o.shape_ref_s.empty());
    EXPECT_DOUBLE_EQ(o.rates[0].speed_ref_s, 0);
    nlohmann::json bad = profile_json(p);
    bad["shape_ref_s"]["gemm f32 t1 NT 1x1x1"] = -1;
    EXPECT_THROW(profile_from_json(bad, "bad.json"), Error);
}

}  // namespace
}  // namespace zt
