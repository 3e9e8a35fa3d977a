#include "compression/prune_mask.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace zt {

int64_t prune_count(double sparsity, int64_t numel) {
    ZT_ASSERT(sparsity >= 0.0 && sparsity <= 1.0, "prune_count: sparsity ", sparsity);
    return static_cast<int64_t>(std::floor(sparsity * static_cast<double>(numel)));
}

namespace {

// Prunes the `extra` lowest-scored unpruned elements of the given arena ranges: the extra-th
// lowest score is the threshold; everything below it goes, then elements at it in arena order.
void prune_lowest(std::span<const float> scores, std::span<const PruneTarget> targets,
                  int64_t extra, std::vector<uint8_t>& pruned) {
    if (extra <= 0) return;
    std::vector<float> alive;
    for (const PruneTarget& t : targets)
        for (int64_t i = t.offset; i < t.offset + t.numel(); ++i)
            if (!pruned[static_cast<size_t>(i)]) alive.push_back(scores[static_cast<size_t>(i)]);
    ZT_ASSERT(extra <= static_cast<int64_t>(alive.size()), "prune_lowest: ", extra, " of ",
              alive.size());
    auto kth = alive.begin() + (extra - 1);
    std::nth_element(alive.begin(), kth, alive.end());
    const float threshold = *kth;
    int64_t at_threshold = extra;  // how many elements equal to the threshold go
    for (float s : alive)
        if (s < threshold) --at_threshold;
    for (const PruneTarget& t : targets)
        for (int64_t i = t.offset; i < t.offset + t.numel(); ++i) {
            uint8_t& p = pruned[static_cast<size_t>(i)];
            if (p) continue;
            const float s = scores[static_cast<size_t>(i)];
            if (s < threshold) {
                p = 1;
            } else if (s == threshold && at_threshold > 0) {
                p = 1;
                --at_threshold;
            }
        }
}

int64_t count_pruned(std::span<const PruneTarget> targets, const std::vector<uint8_t>& pruned) {
    int64_t n = 0;
    for (const PruneTarget& t : targets)
        for (int64_t i = t.offset; i < t.offset + t.numel(); ++i)
            n += pruned[static_cast<size_t>(i)];
    return n;
}

}  // namespace

void magnitude_mask(std::span<const float> scores, std::span<const PruneTarget> targets,
                    double sparsity, bool global, std::vector<uint8_t>& pruned) {
    ZT_ASSERT(pruned.size() == scores.size(), "magnitude_mask: mask of ", pruned.size(), " for ",
              scores.size(), " scores");
    // Scores below 0 mark weights pruned before: they stay pruned whatever the count.
    for (const PruneTarget& t : targets)
        for (int64_t i = t.offset; i < t.offset + t.numel(); ++i)
            if (scores[static_cast<size_t>(i)] < 0) pruned[static_cast<size_t>(i)] = 1;
    if (global) {
        int64_t total = 0;
        for (const PruneTarget& t : targets) total += t.numel();
        prune_lowest(scores, targets, prune_count(sparsity, total) - count_pruned(targets, pruned),
                     pruned);
        return;
    }
    for (const PruneTarget& t : targets) {
        const std::span<const PruneTarget> one(&t, 1);
        prune_lowest(scores, one, prune_count(sparsity, t.numel()) - count_pruned(one, pruned),
                     pruned);
    }
}

void nm_mask(std::span<const float> scores, std::span<const PruneTarget> targets, int n, int m,
             std::vector<uint8_t>& pruned) {
    ZT_ASSERT(n >= 0 && n <= m && m >= 1, "nm_mask: ", n, ":", m);
    std::vector<int64_t> order;
    for (const PruneTarget& t : targets)
        for (int64_t r = 0; r < t.rows; ++r)
            for (int64_t b = 0; b < t.cols; b += m) {
                const int64_t lo = t.offset + r * t.cols + b;
                const int64_t len = std::min<int64_t>(m, t.cols - b);
                order.resize(static_cast<size_t>(len));
                std::iota(order.begin(), order.end(), lo);
                // Highest score first (a pruned weight scores 0); ties: lower position first.
                auto score = [&](int64_t i) {
                    return std::max(0.0f, scores[static_cast<size_t>(i)]);
                };
                std::stable_sort(order.begin(), order.end(),
                                 [&](int64_t a, int64_t c) { return score(a) > score(c); });
                for (int64_t k = 0; k < len; ++k)
                    pruned[static_cast<size_t>(order[static_cast<size_t>(k)])] = k < n ? 0 : 1;
            }
}

}  // namespace zt
