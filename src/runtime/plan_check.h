// Validation in every run (docs/planner.md): the cost model's prediction for the run's own
// layout, made once at the start, and each step's metrics.jsonl "plan" field comparing it with
// what the step measured: step time, peak memory and the model-state categories, each as
// predicted, measured and their ratio (measured / predicted). Time is predicted only when a
// calibration profile of this machine is saved (`zerotrain bench calibrate`); memory always.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "planner/cost_model.h"
#include "runtime/config.h"

namespace zt {

class PlanCheck {
  public:
    // cfg as the run parsed it for `world` ranks; threads: the intra-op threads of a rank.
    PlanCheck(const TrainConfig& cfg, int world, const std::string& backend, int threads);

    // The "plan" field of a step's line: step_s and mem (the line's "mem": per category the
    // largest current bytes over ranks, and "peak").
    nlohmann::json line(double step_s, const nlohmann::json& mem) const;
    // What the run directory's plan.json holds: the layout, the prediction, the profile used.
    nlohmann::json plan_json() const;
    // One line for the run's start ("plan check: predicted 0.41 s/step, 1.2 GiB peak").
    std::string describe() const;

  private:
    PlanCost cost_;
    std::string profile_note_;
    std::string busy_note_;  // the run's shapes timed on a busy host (not kept), else empty
};

// A PlanCheck for rank 0 of a run; nullptr (with a warning) when the layout cannot be costed, so
// that the check never stops a run.
std::unique_ptr<PlanCheck> start_plan_check(const TrainConfig& cfg, int world,
                                            const std::string& backend, int threads);

// For the out-of-memory report before a run's first step: the planner's fastest layout of the
// run's world that fits `budget` per rank ("the planner's choice for 2 ranks under 1.00 GiB: dp 1
// x tp 2 ..., 0.95 GiB per rank: --set ..."), ranked by the saved profile's step time (by memory
// without one); "" when none fits or the search fails.
std::string plan_suggestion(const TrainConfig& cfg, int64_t budget);

// `zerotrain plan --check RUN_DIR`: the prediction error of a run from its metrics.jsonl
// (steps after the first, which warms up): median and worst ratios of step time and peak memory,
// and the state categories' agreement.
nlohmann::json summarize_plan_check(const std::string& run_dir);
std::string plan_check_text(const nlohmann::json& summary);

}  // namespace zt
