// Click-model evaluation metrics over a whole evaluation set: ROC AUC and log loss. Labels are
// 0 or 1 (a label > 0.5 counts as a click). Both are exact and deterministic for given inputs.
#pragma once

#include <span>

namespace zt {

// ROC AUC = P(score of a random positive > score of a random negative), ties counting 1/2: the
// Mann-Whitney U statistic from ranks after one sort (tied scores get their average rank),
// O(n log n). 0.5 when either class is absent. A NaN score ranks below every number (NaNs tie
// with each other), so the result is never NaN. Sizes must match.
double roc_auc(std::span<const float> scores, std::span<const float> labels);

// Mean binary cross-entropy -(y log p + (1 - y) log(1 - p)) with p clamped to
// [1e-15, 1 - 1e-15] (a NaN p counts as 0.5). 0 for empty input. Sizes must match.
double log_loss(std::span<const float> probs, std::span<const float> labels);

}  // namespace zt
