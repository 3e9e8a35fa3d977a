#include "data/click/click_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "util/error.h"

namespace zt {

double roc_auc(std::span<const float> scores, std::span<const float> labels) {
    ZT_CHECK(scores.size() == labels.size(), "roc_auc: ", scores.size(), " scores for ",
             labels.size(), " labels");
    const size_t n = scores.size();
    ZT_CHECK(n < (size_t{1} << 32), "roc_auc: ", n, " samples; at most 2^32 - 1 are supported");
    // NaN maps to -inf plus one rank below: sort keys (is_number, value).
    auto key_less = [&](uint32_t a, uint32_t b) {
        const float x = scores[a], y = scores[b];
        const bool nx = std::isnan(x), ny = std::isnan(y);
        if (nx || ny) return nx && !ny;
        return x < y;
    };
    auto key_equal = [&](uint32_t a, uint32_t b) { return !key_less(a, b) && !key_less(b, a); };
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), key_less);
    double rank_sum = 0;  // sum of the positives' 1-based ranks, ties averaged
    int64_t positives = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && key_equal(order[i], order[j])) ++j;
        const double avg_rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of i+1 .. j
        for (size_t t = i; t < j; ++t)
            if (labels[order[t]] > 0.5f) {
                rank_sum += avg_rank;
                ++positives;
            }
        i = j;
    }
    const int64_t negatives = static_cast<int64_t>(n) - positives;
    if (positives == 0 || negatives == 0) return 0.5;
    const double P = static_cast<double>(positives), N = static_cast<double>(negatives);
    return (rank_sum - P * (P + 1) / 2) / (P * N);
}

double log_loss(std::span<const float> probs, std::span<const float> labels) {
    ZT_CHECK(probs.size() == labels.size(), "log_loss: ", probs.size(), " probabilities for ",
             labels.size(), " labels");
    if (probs.empty()) return 0;
    constexpr double kEps = 1e-15;
    double sum = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        double p = std::isnan(probs[i]) ? 0.5 : std::clamp<double>(probs[i], kEps, 1 - kEps);
        const double y = labels[i];
        sum -= y * std::log(p) + (1 - y) * std::log1p(-p);
    }
    return sum / static_cast<double>(probs.size());
}

}  // namespace zt
