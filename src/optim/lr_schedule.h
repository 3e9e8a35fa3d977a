// Learning-rate schedules: constant, and DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR
// with DeepSpeed's formulas and its stepping (Note [DeepSpeed scheduler timeline] in
// lr_schedule.cpp). Pure functions of the step, so resuming needs only the step count.
// Left out: DeepSpeed's OneCycle and LRRangeTest, per-parameter-group lists of lrs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zt {

class LrSchedule {
public:
    virtual ~LrSchedule() = default;
    // Learning rate of the next optimizer step, `step` = optimizer steps already applied (0 for
    // the first). Steps skipped for fp16 overflow do not count: DeepSpeed does not advance its
    // scheduler on them.
    virtual double lr(int64_t step) const = 0;
};

class ConstantLR final : public LrSchedule {
public:
    explicit ConstantLR(double lr) : lr_(lr) {}
    double lr(int64_t) const override { return lr_; }

private:
    double lr_;
};

enum class WarmupType { kLog, kLinear };

// A DeepSpeed scheduler object: at_iteration(i) is its get_lr() once last_batch_iteration == i
// (-1 right after construction). lr(step) = at_iteration(step - 1).
class DeepSpeedLrSchedule : public LrSchedule {
public:
    double lr(int64_t step) const final { return at_iteration(step - 1); }
    virtual double at_iteration(int64_t last_batch_iteration) const = 0;
};

// lr = min + (max - min) * gamma; gamma = log(i + 1) / log(W) or i / W for i < W, else 1,
// with W = max(2, warmup_num_steps). Absolute lrs: the optimizer's base lr is not used.
class WarmupLR : public DeepSpeedLrSchedule {
public:
    WarmupLR(double warmup_min_lr, double warmup_max_lr, int64_t warmup_num_steps,
             WarmupType warmup_type);
    double at_iteration(int64_t last_batch_iteration) const override;

protected:
    // Warmup gamma for i < W (in [0, 1)).
    double warmup_gamma(int64_t i) const;
    virtual double gamma(int64_t i) const;

    double min_lr_;
    double delta_lr_;
    int64_t warmup_num_steps_;  // W, at least 2
    WarmupType warmup_type_;
    double inverse_log_warmup_;  // 1 / log(W)
};

// WarmupLR, then gamma = max(0, (T - i) / max(1, T - W)) for i >= W: linear decay to 0 at T.
class WarmupDecayLR final : public WarmupLR {
public:
    WarmupDecayLR(int64_t total_num_steps, double warmup_min_lr, double warmup_max_lr,
                  int64_t warmup_num_steps, WarmupType warmup_type);

protected:
    double gamma(int64_t i) const override;

private:
    int64_t total_num_steps_;
};

// lr = base_lr * ratio. Warmup (i < W): ratio = r0 + (1 - r0) * gamma, r0 = warmup_min_ratio.
// Then progress = min(1, (i - W + 1) / max(1, T - W)) and
// ratio = max(0, c + (1 - c) * (1 + cos(pi * progress)) / 2), c = cos_min_ratio.
// Before the first scheduler step (i = -1) DeepSpeed returns 0.
class WarmupCosineLR final : public DeepSpeedLrSchedule {
public:
    struct Options {
        int64_t total_num_steps = 0;
        double warmup_min_ratio = 0.0;
        int64_t warmup_num_steps = 1000;
        double cos_min_ratio = 1e-4;
        WarmupType warmup_type = WarmupType::kLog;
    };
    WarmupCosineLR(const Options& options, double base_lr);
    double at_iteration(int64_t last_batch_iteration) const override;
    double ratio_at_iteration(int64_t last_batch_iteration) const;

private:
    Options options_;  // warmup_num_steps already raised to at least 2
    double base_lr_;
    double inverse_log_warmup_;
};

// The "scheduler" section of a DeepSpeed config (runtime's SchedulerConfig is this type).
struct LrScheduleOptions {
    std::string type;  // "" (constant lr), "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"
    double warmup_min_lr = 0.0;
    double warmup_max_lr = 1e-3;
    int64_t warmup_num_steps = 1000;
    std::string warmup_type = "log";  // "log" or "linear"
    int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR
    double warmup_min_ratio = 0.0;    // WarmupCosineLR
    double cos_min_ratio = 1e-4;      // WarmupCosineLR
};

// Validates the options (zt::Error naming the scheduler key, expected and got) and builds the
// schedule. base_lr is the optimizer's lr: the constant lr, and WarmupCosineLR's scale.
std::unique_ptr<LrSchedule> make_lr_schedule(const LrScheduleOptions& options, double base_lr);

}  // namespace zt
