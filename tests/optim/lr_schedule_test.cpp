// LR schedules against DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py) written out here,
// on DeepSpeed's timeline: the optimizer step after k applied steps runs at get_lr() with
// last_batch_iteration = k - 1 (-1 right after construction). Both warmup types.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.h"

namespace zt {
namespace {

// DeepSpeed's warmup gamma at iteration i < W (W already max(2, warmup_num_steps)).
double ds_warmup_gamma(bool log_type, int64_t i, int64_t w) {
    if (log_type) return (1.0 / std::log(double(w))) * std::log(double(i + 1));
    return double(i) / double(w);
}

// WarmupLR / WarmupDecayLR get_lr() at iteration i; total < 0 means WarmupLR.
double ds_warmup_lr(double mn, double mx, int64_t warmup, bool log_type, int64_t total, int64_t i) {
    const int64_t w = std::max<int64_t>(2, warmup);
    if (i < 0) return mn;
    double gamma;
    if (i < w)
        gamma = ds_warmup_gamma(log_type, i, w);
    else if (total < 0)
        gamma = 1.0;
    else
        gamma = std::max(0.0, double(total - i) / std::max(1.0, double(total - w)));
    return mn + (mx - mn) * gamma;
}

// WarmupCosineLR get_lr() at iteration i.
double ds_cosine_lr(double base, int64_t total, double r0, int64_t warmup, double cmin,
                    bool log_type, int64_t i) {
    const int64_t w = std::max<int64_t>(2, warmup);
    if (i < 0) return 0.0;
    if (i < w) return base * (r0 + ds_warmup_gamma(log_type, i, w) * (1.0 - r0));
    const double progress =
        std::min(1.0, double(i - w + 1) / double(std::max<int64_t>(1, total - w)));
    const double ratio = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    return base * std::max(0.0, cmin + (1.0 - cmin) * ratio);
}

LrScheduleOptions options(const char* type, const char* warmup_type) {
    LrScheduleOptions o;
    o.type = type;
    o.warmup_type = warmup_type;
    o.warmup_min_lr = 1e-5;
    o.warmup_max_lr = 3e-3;
    o.warmup_num_steps = 10;
    o.total_num_steps = 30;
    o.warmup_min_ratio = 0.1;
    o.cos_min_ratio = 0.01;
    return o;
}

// Steps: first, second, mid-warmup, last warmup, first after warmup, mid-decay, end, past end.
const int64_t kSteps[] = {0, 1, 2, 5, 10, 11, 12, 21, 30, 31, 32, 100};

TEST(LrSchedule, Constant) {
    auto s = make_lr_schedule(LrScheduleOptions{}, 2e-4);
    for (int64_t k : kSteps) EXPECT_EQ(s->lr(k), 2e-4);
}

TEST(LrSchedule, WarmupLRMatchesDeepSpeed) {
    for (const char* wt : {"log", "linear"}) {
        const LrScheduleOptions o = options("WarmupLR", wt);
        auto s = make_lr_schedule(o, 1.0);
        for (int64_t k : kSteps)
            EXPECT_DOUBLE_EQ(s->lr(k), ds_warmup_lr(1e-5, 3e-3, 10, wt[1] == 'o', -1, k - 1))
                << wt << " step " << k;
        // Hand-derived points: steps 0 and 1 both run at the min lr; max from iteration W on.
        EXPECT_EQ(s->lr(0), 1e-5);
        EXPECT_EQ(s->lr(1), 1e-5);
        EXPECT_DOUBLE_EQ(s->lr(11), 3e-3);
        EXPECT_DOUBLE_EQ(s->lr(1000), 3e-3);
    }
    auto lin = make_lr_schedule(options("WarmupLR", "linear"), 1.0);
    EXPECT_DOUBLE_EQ(lin->lr(6), 1e-5 + (3e-3 - 1e-5) * 0.5);  // iteration 5 of 10
    EXPECT_DOUBLE_EQ(lin->lr(10), 1e-5 + (3e-3 - 1e-5) * 0.9);
    auto lg = make_lr_schedule(options("WarmupLR", "log"), 1.0);
    EXPECT_DOUBLE_EQ(lg->lr(10), 3e-3);  // log(10) / log(10) at iteration 9
    EXPECT_DOUBLE_EQ(lg->lr(4), 1e-5 + (3e-3 - 1e-5) * std::log(4.0) / std::log(10.0));  // it. 3
}

TEST(LrSchedule, WarmupDecayLRMatchesDeepSpeed) {
    for (const char* wt : {"log", "linear"}) {
        const LrScheduleOptions o = options("WarmupDecayLR", wt);
        auto s = make_lr_schedule(o, 1.0);
        for (int64_t k : kSteps)
            EXPECT_DOUBLE_EQ(s->lr(k), ds_warmup_lr(1e-5, 3e-3, 10, wt[1] == 'o', 30, k - 1))
                << wt << " step " << k;
        EXPECT_DOUBLE_EQ(s->lr(11), 3e-3);                        // iteration 10: (30-10)/20
        EXPECT_DOUBLE_EQ(s->lr(21), 1e-5 + (3e-3 - 1e-5) * 0.5);  // iteration 20: 10/20
        EXPECT_EQ(s->lr(31), 1e-5);                               // iteration 30: 0
        EXPECT_EQ(s->lr(100), 1e-5);                              // clamped at 0
    }
}

TEST(LrSchedule, WarmupCosineLRMatchesDeepSpeed) {
    const double base = 0.1;
    for (const char* wt : {"log", "linear"}) {
        const LrScheduleOptions o = options("WarmupCosineLR", wt);
        auto s = make_lr_schedule(o, base);
        for (int64_t k : kSteps)
            EXPECT_DOUBLE_EQ(s->lr(k), ds_cosine_lr(base, 30, 0.1, 10, 0.01, wt[1] == 'o', k - 1))
                << wt << " step " << k;
        EXPECT_EQ(s->lr(0), 0.0);                // DeepSpeed's get_lr() before any step
        EXPECT_DOUBLE_EQ(s->lr(1), base * 0.1);  // warmup_min_ratio
        // Iteration 19: progress (19 - 10 + 1) / 20 = 0.5, cos = 0.
        EXPECT_NEAR(s->lr(20), base * (0.01 + 0.99 * 0.5), 1e-15);
        EXPECT_DOUBLE_EQ(s->lr(30), base * 0.01);   // iteration 29: progress 1
        EXPECT_DOUBLE_EQ(s->lr(100), base * 0.01);  // progress clamped to 1
    }
}

TEST(LrSchedule, WarmupOfOneStepIsTwoAsInDeepSpeed) {
    LrScheduleOptions o = options("WarmupLR", "linear");
    o.warmup_num_steps = 1;  // DeepSpeed uses max(2, warmup_num_steps)
    auto s = make_lr_schedule(o, 1.0);
    EXPECT_EQ(s->lr(1), 1e-5);
    EXPECT_DOUBLE_EQ(s->lr(2), 1e-5 + (3e-3 - 1e-5) * 0.5);
    EXPECT_DOUBLE_EQ(s->lr(3), 3e-3);
}

void expect_error(const LrScheduleOptions& o, const char* key, const char* got) {
    try {
        make_lr_schedule(o, 1e-3);
        ADD_FAILURE() << "accepted: " << key << " = " << got;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        EXPECT_NE(e.message().find(key), std::string::npos) << e.message();
        EXPECT_NE(e.message().find("expected"), std::string::npos) << e.message();
        EXPECT_NE(e.message().find(got), std::string::npos) << e.message();
    }
}

TEST(LrSchedule, InvalidOptionsNameTheKey) {
    LrScheduleOptions o = options("WarmupLR", "log");
    o.warmup_num_steps = -5;
    expect_error(o, "scheduler.params.warmup_num_steps", "-5");
    o.warmup_num_steps = 0;
    expect_error(o, "scheduler.params.warmup_num_steps", "0");
    for (const char* type : {"WarmupDecayLR", "WarmupCosineLR"}) {
        o = options(type, "log");
        o.total_num_steps = 7;
        expect_error(o, "scheduler.params.total_num_steps", "7");
    }
    o = options("OneCycle", "log");
    expect_error(o, "scheduler.type", "OneCycle");
    o = options("WarmupLR", "cubic");
    expect_error(o, "scheduler.params.warmup_type", "cubic");
    o = options("WarmupLR", "log");
    o.warmup_max_lr = -1.0;
    expect_error(o, "scheduler.params.warmup_max_lr", "-1");
}

}  // namespace
}  // namespace zt
