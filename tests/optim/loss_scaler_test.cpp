// Loss scaler against DeepSpeed's DynamicLossScaler.update_scale: planted overflow sequences,
// each expected scale, skip and hysteresis written out from its rules (one comment per step):
//   overflow: if hysteresis == 1 or cur_hysteresis == 1 -> scale = max(scale / 2, min_scale)
//             (an error when scale == min_scale already), else cur_hysteresis -= 1;
//             last_overflow = iter.
//   clean:    consecutive_hysteresis -> cur_hysteresis = hysteresis; stable = iter -
//             last_overflow - 1; stable > 0 and stable % window == 0 -> scale *= 2 (and, without
//             consecutive_hysteresis, cur_hysteresis = hysteresis).
// Also the static scale and the fused unscale + norm used by the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt {
namespace {

struct Expect {
    bool overflow;        // planted
    double scale;         // after update()
    int64_t hysteresis;   // cur_hysteresis after update()
};

void run_sequence(LossScaler& s, const std::vector<Expect>& seq) {
    for (size_t i = 0; i < seq.size(); ++i) {
        SCOPED_TRACE("iteration " + std::to_string(i));
        const bool skipped = s.update(seq[i].overflow);
        EXPECT_EQ(skipped, seq[i].overflow);  // a step is skipped exactly when it overflowed
        EXPECT_EQ(s.scale(), seq[i].scale);
        EXPECT_EQ(s.state().cur_hysteresis, seq[i].hysteresis);
    }
    EXPECT_EQ(s.state().cur_iter, static_cast<int64_t>(seq.size()));
}

LossScalerOptions dynamic(int64_t power, int64_t window, int64_t hysteresis, bool consecutive) {
    LossScalerOptions o;
    o.initial_scale_power = power;
    o.scale_window = window;
    o.hysteresis = hysteresis;
    o.consecutive_hysteresis = consecutive;
    return o;
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
    LossScaler s{LossScalerOptions{}};
    EXPECT_TRUE(s.dynamic());
    EXPECT_EQ(s.scale(), 65536.0);  // 2^initial_scale_power, power 16
    EXPECT_EQ(s.state().cur_hysteresis, 2);
    EXPECT_EQ(s.state().last_overflow_iter, -1);
}

TEST(LossScaler, HysteresisOne) {
    LossScaler s(dynamic(4, 3, 1, false));  // scale 16, window 3
    run_sequence(s, {
                        {true, 8, 1},    // it 0: overflow, hysteresis 1 -> 16 / 2; last = 0
                        {false, 8, 1},   // it 1: stable 1-0-1 = 0 -> no growth
                        {false, 8, 1},   // it 2: stable 1
                        {false, 8, 1},   // it 3: stable 2
                        {false, 16, 1},  // it 4: stable 3 % 3 == 0 -> 8 * 2
                        {true, 8, 1},    // it 5: overflow -> 16 / 2; last = 5
                        {true, 4, 1},    // it 6: overflow -> 8 / 2; last = 6
                        {false, 4, 1},   // it 7: stable 0
                        {false, 4, 1},   // it 8: stable 1
                        {false, 4, 1},   // it 9: stable 2
                        {false, 8, 1},   // it 10: stable 3 -> 4 * 2
                        {false, 8, 1},   // it 11: stable 4
                        {false, 8, 1},   // it 12: stable 5
                        {false, 16, 1},  // it 13: stable 6 % 3 == 0 -> 8 * 2
                    });
    EXPECT_EQ(s.state().last_overflow_iter, 6);
}

TEST(LossScaler, HysteresisTwoWithoutConsecutive) {
    LossScaler s(dynamic(3, 2, 2, false));  // scale 8, window 2
    run_sequence(s, {
                        {true, 8, 1},   // it 0: overflow, cur_hysteresis 2 -> 1, scale stays
                        {false, 8, 1},  // it 1: stable 0; a clean step does not refill it
                        {false, 8, 1},  // it 2: stable 1
                        {true, 4, 1},   // it 3: overflow, cur_hysteresis 1 -> 8 / 2; last = 3
                        {false, 4, 1},  // it 4: stable 0
                        {true, 2, 1},   // it 5: overflow, still 1 -> 4 / 2; last = 5
                        {false, 2, 1},  // it 6: stable 0
                        {false, 2, 1},  // it 7: stable 1
                        {false, 4, 2},  // it 8: stable 2 % 2 == 0 -> 2 * 2, hysteresis refilled
                        {true, 4, 1},   // it 9: overflow, cur_hysteresis 2 -> 1
                        {true, 2, 1},   // it 10: overflow, 1 -> 4 / 2
                    });
}

TEST(LossScaler, HysteresisTwoWithConsecutive) {
    LossScaler s(dynamic(3, 2, 2, true));  // scale 8, window 2
    run_sequence(s, {
                        {true, 8, 1},    // it 0: overflow, cur_hysteresis 2 -> 1
                        {false, 8, 2},   // it 1: clean -> refilled to 2; stable 0
                        {true, 8, 1},    // it 2: overflow, 2 -> 1 (without consecutive: halve)
                        {false, 8, 2},   // it 3: refilled; stable 0
                        {false, 8, 2},   // it 4: stable 1
                        {false, 16, 2},  // it 5: stable 2 % 2 == 0 -> 8 * 2
                        {true, 16, 1},   // it 6: overflow, 2 -> 1
                        {true, 8, 1},    // it 7: overflow, cur_hysteresis 1 -> 16 / 2
                        {true, 4, 1},    // it 8: overflow, 1 -> 8 / 2
                        {false, 4, 2},   // it 9: refilled; stable 0
                    });
}

// From the start (last_overflow -1) the first growth is at iteration window: stable = window.
TEST(LossScaler, GrowsBackAfterWindowCleanSteps) {
    LossScaler s(dynamic(16, 1000, 2, false));  // DeepSpeed's defaults
    for (int64_t it = 0; it < 1000; ++it) {
        ASSERT_FALSE(s.update(false));
        ASSERT_EQ(s.scale(), 65536.0) << "iteration " << it << ": stable " << it << " < 1000";
    }
    s.update(false);  // it 1000: stable 1000 % 1000 == 0 -> 2^17
    EXPECT_EQ(s.scale(), 131072.0);
    s.update(true);   // it 1001: overflow, cur_hysteresis 2 -> 1
    s.update(true);   // it 1002: overflow -> 2^16; last = 1002
    EXPECT_EQ(s.scale(), 65536.0);
    for (int64_t it = 1003; it < 1003 + 1000; ++it) {
        s.update(false);  // stable = it - 1002 - 1 = 0 .. 999
        ASSERT_EQ(s.scale(), 65536.0) << "iteration " << it;
    }
    s.update(false);  // it 2003: stable 1000 -> 2^17, hysteresis refilled
    EXPECT_EQ(s.scale(), 131072.0);
    EXPECT_EQ(s.state().cur_hysteresis, 2);
}

TEST(LossScaler, MinScaleIsAFloorAndOverflowThereIsFatal) {
    LossScalerOptions o = dynamic(2, 1000, 1, false);  // scale 4
    o.min_scale = 3;
    LossScaler s(o);
    EXPECT_TRUE(s.update(true));  // max(4 / 2, 3) = 3
    EXPECT_EQ(s.scale(), 3.0);
    try {  // scale == min_scale and hysteresis exhausted: DeepSpeed raises
        s.update(true);
        FAIL() << "expected an error at the minimum scale";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInternal);
        EXPECT_NE(e.message().find("minimum loss scale 3"), std::string::npos) << e.message();
    }

    o.raise_error_at_min_scale = false;  // then the floor holds
    LossScaler quiet(o);
    quiet.update(true);
    EXPECT_TRUE(quiet.update(true));
    EXPECT_EQ(quiet.scale(), 3.0);

    LossScalerOptions h = dynamic(0, 1000, 2, false);  // scale 1 == min_scale 1 from the start
    LossScaler at_min(h);
    EXPECT_TRUE(at_min.update(true));  // hysteresis 2 -> 1 first: no error yet
    EXPECT_EQ(at_min.scale(), 1.0);
    EXPECT_THROW(at_min.update(true), Error);
}

TEST(LossScaler, StaticScaleNeverChangesButOverflowStillSkips) {
    LossScalerOptions o;
    o.static_scale = 128;
    LossScaler s(o);
    EXPECT_FALSE(s.dynamic());
    EXPECT_EQ(s.scale(), 128.0);
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 128.0);
    for (int i = 0; i < 2500; ++i) EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScaler, RejectsBadOptions) {
    EXPECT_THROW(LossScaler(dynamic(16, 0, 2, false)), Error);
    EXPECT_THROW(LossScaler(dynamic(16, 10, 0, false)), Error);
    LossScalerOptions o;
    o.min_scale = 0;
    EXPECT_THROW(LossScaler{o}, Error);
}

// 100003 elements: several chunks of kGradNormChunk and a partial one, not a multiple of 16.
TEST(UnscaleGradSqSum, UnscalesAndMatchesTheNormAtAnyThreadCount) {
    const int64_t n = 6 * kGradNormChunk + 1003;
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = 1024.0f * std::sin(0.37f * static_cast<float>(i));
    struct Restore {
        ~Restore() { set_num_threads(1); }
    } restore;
    std::vector<double> sums;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::vector<float> u = g;
        sums.push_back(unscale_grad_sq_sum(u.data(), n, 1.0f / 1024.0f));
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(u[i], g[i] / 1024.0f) << i;  // power of 2: exact
        // The same bits as the norm of the unscaled values (the engine reports it as grad_norm).
        EXPECT_EQ(sums.back(), grad_sq_sum_l2(u.data(), n));
    }
    EXPECT_EQ(sums[0], sums[1]);

    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
        std::vector<float> u = g;
        u[n - 5] = bad;
        EXPECT_FALSE(std::isfinite(unscale_grad_sq_sum(u.data(), n, 1.0f / 1024.0f)));
    }
}

}  // namespace
}  // namespace zt
