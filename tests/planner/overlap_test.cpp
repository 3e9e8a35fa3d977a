// Overlap of communication with compute in the step-time model (Note [Overlapped communication]
// in planner/cost_model.cpp): each expected exposed time is computed here from the note's
// formula and the synthetic profile's round rates, never pasted in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "planner/calibrate.h"
#include "planner/cost_model.h"
#include "planner_test_util.h"

namespace zt {
namespace {

using testing::round_profile;
using testing::tiny_gpt_base;

// The note's formula, written out again: k pieces of c/k behind w seconds of compute.
double finish_after(double c, double w, double k) {
    const double finish = std::max(w + c / k, w / k + c);
    return finish - w;
}

TEST(Overlap, ExposedBehindIsTheLastPieceOrTheExcess) {
    for (double c : {0.5, 1.0, 10.0})
        for (double w : {0.0, 1.0, 4.0, 40.0})
            for (double k : {2.0, 4.0, 16.0})
                EXPECT_NEAR(exposed_behind(c, w, k), finish_after(c, w, k), 1e-12)
                    << c << " " << w << " " << k;
    EXPECT_EQ(exposed_behind(3.0, 100.0, 1), 3.0);  // one bucket: ready when backward ends
    EXPECT_EQ(exposed_behind(0.0, 1.0, 4), 0.0);
    // Plenty of compute: only the last piece shows; none: all of it.
    EXPECT_NEAR(exposed_behind(1.0, 1e6, 8), 1.0 / 8, 1e-15);
    EXPECT_NEAR(exposed_behind(1.0, 0.0, 8), 1.0, 1e-15);
}

// Stage 0 with overlap_comm and 4 buckets: the all-reduce hides behind the last micro-step's
// backward; without overlap_comm, or with one bucket, nothing hides.
TEST(Overlap, BucketReductionsHideBehindBackward) {
    PlanBase base = tiny_gpt_base();
    const MachineProfile prof = round_profile();
    Strategy s;
    s.dp = 2;
    s.micro_batch = 2;
    s.grad_accum = 2;
    const double P = static_cast<double>(plan_memory(base, s).state.padded_numel);
    base.spec.state.reduce_bucket_numel = static_cast<int64_t>(std::ceil(P / 4));
    const double k = std::ceil(P / static_cast<double>(base.spec.state.reduce_bucket_numel));
    ASSERT_EQ(k, 4);
    const double lat = 1e-5, bw = 1e9, g = 4;
    const double ar = k * lat + 2.0 * 1 / 2 * P * g / bw;  // all-reduce bus factor 2(n-1)/n = 1
    for (int overlap : {0, 1}) {
        base.overlap_comm = overlap;
        const PlanCost c = plan_cost(base, s, &prof);
        const StepTime& t = c.time;
        EXPECT_NEAR(t.dp_comm, ar, 1e-12);
        const double bwd = t.compute / 2 * 2 / 3;  // one micro-step's backward
        const double want = overlap ? finish_after(ar, bwd, k) : ar;
        EXPECT_NEAR(t.dp_comm - t.dp_overlapped, want, 1e-12) << overlap;
        EXPECT_NEAR(t.total(),
                    t.compute + t.recompute + t.optimizer + want + t.bubble + t.offload_io, 1e-12);
        const nlohmann::json j = step_time_json(t);
        EXPECT_NEAR(j["dp_comm_exposed_s"].get<double>(), want, 1e-12);
        EXPECT_NEAR(j["comm_overlapped_s"].get<double>(), ar - want, 1e-12);
    }
    // Checkpointing lengthens the backward (its recompute runs there): a larger window.
    base.overlap_comm = 1;
    s.checkpoint = "every";
    const StepTime t = plan_cost(base, s, &prof).time;
    const double bwd = t.compute / 2 * 2 / 3 + t.recompute / 2;
    EXPECT_NEAR(t.dp_comm - t.dp_overlapped, finish_after(ar, bwd, k), 1e-12);
    // One bucket (the default size for a small model) hides nothing, even with overlap_comm.
    base.spec.state.reduce_bucket_numel = kDefaultReduceBucketNumel;
    s.checkpoint = "none";
    EXPECT_EQ(plan_cost(base, s, &prof).time.dp_overlapped, 0);
}

// The engine's default: overlap_comm on at stage 3 only.
TEST(Overlap, DefaultOverlapsAtStageThreeOnly) {
    const PlanBase base = tiny_gpt_base();
    Strategy s;
    for (int stage : {0, 1, 2, 3}) {
        s.zero_stage = stage;
        EXPECT_EQ(overlaps_comm(base, s), stage == 3);
    }
    PlanBase off = base;
    off.overlap_comm = 0;
    EXPECT_FALSE(overlaps_comm(off, s));
}

// Stage 3: one gather per block before its forward and its backward, prefetched behind the
// blocks before; the one-bucket reduction after the backward stays exposed.
TEST(Overlap, StageThreeGathersHideWhenPrefetched) {
    PlanBase base = tiny_gpt_base();  // 4 blocks
    const MachineProfile prof = round_profile();
    Strategy s;
    s.dp = 2;
    s.zero_stage = 3;
    s.micro_batch = 2;
    s.grad_accum = 2;
    const double P = static_cast<double>(plan_memory(base, s).state.padded_numel);
    const double lat = 1e-5, bw = 1e9, L = 4;
    const double rs = lat + 0.5 * P * 4 / bw, ag = L * lat + 0.5 * P * 4 / bw;
    const StepTime t = plan_cost(base, s, &prof).time;
    EXPECT_NEAR(t.dp_comm, 2 * (rs + 2 * ag), 1e-12);
    const double fwd = t.compute / 2 / 3, bwd = t.compute / 2 * 2 / 3;
    const double eb = finish_after(ag, bwd, L);
    const double want = 2 * (finish_after(ag, fwd, L) + eb + rs);
    EXPECT_NEAR(t.dp_comm - t.dp_overlapped, want, 1e-12);
    EXPECT_GT(t.dp_overlapped, 0);
    base.spec.state.prefetch_bucket_numel = 0;  // no prefetch: every gather waits
    EXPECT_NEAR(plan_cost(base, s, &prof).time.dp_overlapped, 0, 1e-15);
}

// Pipeline sends are nonblocking: only the fill's and the drain's hops are exposed.
TEST(Overlap, PipelineSendsOffTheCriticalPathHide) {
    const PlanBase base = tiny_gpt_base(16);
    const MachineProfile prof = round_profile();
    Strategy s;
    s.pp = 2;
    s.micro_batch = 2;
    s.grad_accum = 8;
    const double T = 16, C = 32, b = 2;
    const double one = 2e-6 + b * T * C * 4 / 2e9;  // send_recv: latency + bytes / bandwidth
    const StepTime t = plan_cost(base, s, &prof).time;
    EXPECT_NEAR(t.pp_comm, 8 * 2 * one, 1e-15);
    EXPECT_NEAR(t.pp_comm - t.pp_overlapped, 2 * (2 - 1) * one, 1e-15);
    s.schedule = PipeSchedule::kInterleaved;
    s.virtual_stages = 2;
    const StepTime v = plan_cost(base, s, &prof).time;
    EXPECT_NEAR(v.pp_comm, 8 * 2 * 2 * one, 1e-15);
    EXPECT_NEAR(v.pp_comm - v.pp_overlapped, 2 * (2 * 2 - 1) * one, 1e-15);
}

}  // namespace
}  // namespace zt
