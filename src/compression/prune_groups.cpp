#include "compression/prune_groups.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace zt {

void structured_mask(std::span<const float> scores, std::span<const PruneUnitGroup> groups,
                     std::span<const int64_t> counts, std::vector<uint8_t>& pruned) {
    ZT_ASSERT(counts.size() == groups.size(), "structured_mask: ", counts.size(), " counts for ",
              groups.size(), " groups");
    ZT_ASSERT(pruned.size() == scores.size(), "structured_mask: mask of ", pruned.size(), " for ",
              scores.size(), " scores");
    for (size_t gi = 0; gi < groups.size(); ++gi) {
        const PruneUnitGroup& g = groups[gi];
        ZT_ASSERT(counts[gi] >= 0 && counts[gi] <= g.units, "structured_mask: ", counts[gi], " of ",
                  g.units, " units of ", g.name);
        std::vector<double> norm(static_cast<size_t>(g.units), 0.0);
        std::vector<uint8_t> was(static_cast<size_t>(g.units), 1);
        for (int64_t u = 0; u < g.units; ++u) {
            double sq = 0.0;
            bool all_pruned = true;
            for_each_unit_element(g, u, [&](int64_t i) {
                const float s = scores[static_cast<size_t>(i)];
                if (s < 0) return;
                all_pruned = false;
                sq += static_cast<double>(s) * static_cast<double>(s);
            });
            norm[static_cast<size_t>(u)] = std::sqrt(sq);
            was[static_cast<size_t>(u)] = all_pruned ? 1 : 0;
        }
        // Pruned units first, then the others by norm, ties by unit index.
        std::vector<int64_t> order(static_cast<size_t>(g.units));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            const auto ia = static_cast<size_t>(a), ib = static_cast<size_t>(b);
            if (was[ia] != was[ib]) return was[ia] > was[ib];
            return norm[ia] < norm[ib];
        });
        int64_t already = 0;
        for (uint8_t w : was) already += w;
        const int64_t take = std::max(counts[gi], already);  // masks only grow
        for (int64_t k = 0; k < g.units; ++k) {
            const uint8_t v = k < take ? 1 : 0;
            for_each_unit_element(g, order[static_cast<size_t>(k)],
                                  [&](int64_t i) { pruned[static_cast<size_t>(i)] = v; });
        }
    }
}

std::vector<int64_t> pruned_units(std::span<const PruneUnitGroup> groups,
                                  const std::vector<uint8_t>& pruned) {
    std::vector<int64_t> out;
    for (const PruneUnitGroup& g : groups) {
        int64_t n = 0;
        for (int64_t u = 0; u < g.units; ++u) {
            bool whole = true;
            for_each_unit_element(
                g, u, [&](int64_t i) { whole = whole && pruned[static_cast<size_t>(i)]; });
            n += whole ? 1 : 0;
        }
        out.push_back(n);
    }
    return out;
}

}  // namespace zt
