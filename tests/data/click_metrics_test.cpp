// ROC AUC and log loss (data/click/click_metrics.h) against their definitions.
#include "data/click/click_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "util/random.h"

namespace zt {
namespace {

// The definition: over all (positive, negative) pairs, 1 when the positive scores higher, 1/2 on a
// tie.
double brute_auc(const std::vector<float>& s, const std::vector<float>& y) {
    double wins = 0, pairs = 0;
    for (size_t i = 0; i < s.size(); ++i)
        for (size_t j = 0; j < s.size(); ++j)
            if (y[i] == 1 && y[j] == 0) {
                pairs += 1;
                wins += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
            }
    return wins / pairs;
}

TEST(ClickMetrics, AucMatchesPairCountWithTies) {
    Rng rng(3);
    for (int trial = 0; trial < 20; ++trial) {
        const size_t n = 1 + rng.below(300);
        std::vector<float> s(n), y(n);
        for (size_t i = 0; i < n; ++i) {
            s[i] = static_cast<float>(rng.below(trial % 2 ? 5 : 1000)) / 7;  // many ties
            y[i] = static_cast<float>(rng.below(2));
        }
        y[0] = 1;
        if (n > 1) y[1] = 0;
        if (n == 1) continue;
        EXPECT_NEAR(roc_auc(s, y), brute_auc(s, y), 1e-12) << "trial " << trial;
    }
}

TEST(ClickMetrics, AucEdgeCases) {
    EXPECT_EQ(roc_auc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 1}), 1.0);
    EXPECT_EQ(roc_auc(std::vector<float>{0.9f, 0.1f}, std::vector<float>{0, 1}), 0.0);
    EXPECT_EQ(roc_auc(std::vector<float>{0.5f, 0.5f}, std::vector<float>{0, 1}), 0.5);
    EXPECT_EQ(roc_auc(std::vector<float>{0.2f, 0.3f}, std::vector<float>{1, 1}), 0.5);  // one class
    EXPECT_EQ(roc_auc(std::vector<float>{}, std::vector<float>{}), 0.5);
    // A NaN score ranks below every number: the positive's 0.1 beats the negatives' NaN.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(roc_auc(std::vector<float>{nan, 0.1f, nan}, std::vector<float>{0, 1, 0}), 1.0);
    EXPECT_EQ(roc_auc(std::vector<float>{nan, nan}, std::vector<float>{0, 1}), 0.5);
    EXPECT_ANY_THROW(roc_auc(std::vector<float>{1}, std::vector<float>{}));
}

TEST(ClickMetrics, LogLossFormulaAndClamp) {
    const std::vector<float> p = {0.9f, 0.2f, 0.5f, 0.0f, 1.0f};
    const std::vector<float> y = {1, 0, 1, 1, 1};
    const double eps = 1e-15;
    const double expect = -(std::log(double(0.9f)) + std::log(1 - double(0.2f)) + std::log(0.5) +
                            std::log(eps) + std::log(1 - eps)) /
                          5;
    EXPECT_NEAR(log_loss(p, y), expect, 1e-9);
    EXPECT_EQ(log_loss(std::vector<float>{}, std::vector<float>{}), 0.0);
}

}  // namespace
}  // namespace zt
