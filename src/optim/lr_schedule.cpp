#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.h"

namespace zt {

// Note [DeepSpeed scheduler timeline]
// DeepSpeed builds its scheduler with last_batch_iteration = -1 and sets the optimizer's lr to
// get_lr() right then; its engine calls scheduler.step() (last_batch_iteration += 1) after each
// optimizer step that was not skipped for overflow. So the optimizer step taken after k applied
// steps runs at get_lr() with last_batch_iteration = k - 1:
//   step 0: iteration -1: WarmupLR/WarmupDecayLR give warmup_min_lr, WarmupCosineLR gives 0;
//   step 1: iteration 0:  log(1)/log(W) = 0 or 0/W = 0, warmup_min_lr again (ratio r0 for cosine);
//   step k: iteration k-1.
// lr(step) follows that timeline; at_iteration(i) is the formula at DeepSpeed's iteration i
// (what reads as "log(step + 1) / log(W)" in DeepSpeed's source, with step = iteration).
// Arithmetic is in double, in DeepSpeed's order, so values match Python's bit for bit where libm
// does. Formulas: deepspeed/runtime/lr_schedules.py (WarmupCosineLR with the clamp of its cosine
// progress to 1, added upstream so the lr stays at cos_min_ratio past total_num_steps).

namespace {

double warmup_fraction(WarmupType type, int64_t i, int64_t w, double inverse_log_w) {
    if (type == WarmupType::kLog) return inverse_log_w * std::log(static_cast<double>(i + 1));
    return static_cast<double>(i) / static_cast<double>(w);
}

}  // namespace

WarmupLR::WarmupLR(double warmup_min_lr, double warmup_max_lr, int64_t warmup_num_steps,
                   WarmupType warmup_type)
    : min_lr_(warmup_min_lr),
      delta_lr_(warmup_max_lr - warmup_min_lr),
      warmup_num_steps_(std::max<int64_t>(2, warmup_num_steps)),
      warmup_type_(warmup_type),
      inverse_log_warmup_(1.0 / std::log(static_cast<double>(warmup_num_steps_))) {}

double WarmupLR::warmup_gamma(int64_t i) const {
    return warmup_fraction(warmup_type_, i, warmup_num_steps_, inverse_log_warmup_);
}

double WarmupLR::gamma(int64_t i) const { return i < warmup_num_steps_ ? warmup_gamma(i) : 1.0; }

double WarmupLR::at_iteration(int64_t last_batch_iteration) const {
    ZT_ASSERT(last_batch_iteration >= -1, "negative step ", last_batch_iteration + 1);
    if (last_batch_iteration < 0) return min_lr_;
    return min_lr_ + delta_lr_ * gamma(last_batch_iteration);
}

WarmupDecayLR::WarmupDecayLR(int64_t total_num_steps, double warmup_min_lr, double warmup_max_lr,
                             int64_t warmup_num_steps, WarmupType warmup_type)
    : WarmupLR(warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type),
      total_num_steps_(total_num_steps) {}

double WarmupDecayLR::gamma(int64_t i) const {
    if (i < warmup_num_steps_) return warmup_gamma(i);
    const double span = std::max(1.0, static_cast<double>(total_num_steps_ - warmup_num_steps_));
    return std::max(0.0, static_cast<double>(total_num_steps_ - i) / span);
}

WarmupCosineLR::WarmupCosineLR(const Options& options, double base_lr)
    : options_(options), base_lr_(base_lr) {
    options_.warmup_num_steps = std::max<int64_t>(2, options_.warmup_num_steps);
    inverse_log_warmup_ = 1.0 / std::log(static_cast<double>(options_.warmup_num_steps));
}

double WarmupCosineLR::ratio_at_iteration(int64_t i) const {
    ZT_ASSERT(i >= -1, "negative step ", i + 1);
    if (i < 0) return 0.0;
    const Options& o = options_;
    const int64_t w = o.warmup_num_steps;
    if (i < w) {
        const double r = warmup_fraction(o.warmup_type, i, w, inverse_log_warmup_);
        return o.warmup_min_ratio + r * (1.0 - o.warmup_min_ratio);
    }
    const int64_t real_last_step = i - w + 1;
    const int64_t real_total_steps = std::max<int64_t>(1, o.total_num_steps - w);
    const double progress =
        std::min(1.0, static_cast<double>(real_last_step) / static_cast<double>(real_total_steps));
    const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
    return std::max(0.0, o.cos_min_ratio + (1.0 - o.cos_min_ratio) * cosine);
}

double WarmupCosineLR::at_iteration(int64_t last_batch_iteration) const {
    return base_lr_ * ratio_at_iteration(last_batch_iteration);
}

namespace {

WarmupType parse_warmup_type(const std::string& s) {
    if (s == "log") return WarmupType::kLog;
    if (s == "linear") return WarmupType::kLinear;
    ZT_FAIL("scheduler.params.warmup_type: expected \"log\" or \"linear\", got \"", s, "\"");
}

void check_finite_nonneg(double v, const char* key) {
    ZT_CHECK(std::isfinite(v) && v >= 0.0, "scheduler.params.", key,
             ": expected a finite value >= 0, got ", v);
}

void check_warmup_steps(const LrScheduleOptions& o) {
    ZT_CHECK(o.warmup_num_steps > 0,
             "scheduler.params.warmup_num_steps: expected a positive integer, got ",
             o.warmup_num_steps);
}

void check_total_steps(const LrScheduleOptions& o) {
    ZT_CHECK(o.total_num_steps >= o.warmup_num_steps, "scheduler.params.total_num_steps (", o.type,
             "): expected at least warmup_num_steps (", o.warmup_num_steps, "), got ",
             o.total_num_steps, "; set total_num_steps to the number of training steps");
}

}  // namespace

std::unique_ptr<LrSchedule> make_lr_schedule(const LrScheduleOptions& o, double base_lr) {
    ZT_CHECK(std::isfinite(base_lr) && base_lr >= 0.0,
             "optimizer.params.lr: expected a finite value >= 0, got ", base_lr);
    if (o.type.empty()) return std::make_unique<ConstantLR>(base_lr);
    const bool warmup = o.type == "WarmupLR";
    const bool decay = o.type == "WarmupDecayLR";
    const bool cosine = o.type == "WarmupCosineLR";
    ZT_CHECK(warmup || decay || cosine,
             "scheduler.type: expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\" (or "
             "no scheduler section for a constant lr), got \"",
             o.type, "\"");
    check_warmup_steps(o);
    const WarmupType type = parse_warmup_type(o.warmup_type);
    if (cosine) {
        check_total_steps(o);
        check_finite_nonneg(o.warmup_min_ratio, "warmup_min_ratio");
        check_finite_nonneg(o.cos_min_ratio, "cos_min_ratio");
        WarmupCosineLR::Options c;
        c.total_num_steps = o.total_num_steps;
        c.warmup_min_ratio = o.warmup_min_ratio;
        c.warmup_num_steps = o.warmup_num_steps;
        c.cos_min_ratio = o.cos_min_ratio;
        c.warmup_type = type;
        return std::make_unique<WarmupCosineLR>(c, base_lr);
    }
    check_finite_nonneg(o.warmup_min_lr, "warmup_min_lr");
    check_finite_nonneg(o.warmup_max_lr, "warmup_max_lr");
    if (decay) {
        check_total_steps(o);
        return std::make_unique<WarmupDecayLR>(o.total_num_steps, o.warmup_min_lr, o.warmup_max_lr,
                                               o.warmup_num_steps, type);
    }
    return std::make_unique<WarmupLR>(o.warmup_min_lr, o.warmup_max_lr, o.warmup_num_steps, type);
}

}  // namespace zt
