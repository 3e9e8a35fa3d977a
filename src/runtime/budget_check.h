// The memory budget check before a run's first step (memory.budget_per_rank): the estimator's
// certain bytes against the budget, with the levers that would fit.
#pragma once

#include "runtime/config.h"

namespace zt {

// Refuses a run whose budget the estimator already knows is too small (model state plus saved
// activations; on a pipeline the most loaded stage with its micro-batches in flight), before
// anything is allocated or written: zt::Error naming what would fit.
void check_budget_before_start(const TrainConfig& cfg);

}  // namespace zt
