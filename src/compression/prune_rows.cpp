#include "compression/prune_rows.h"

#include <algorithm>
#include <numeric>

#include "nn/model.h"
#include "util/error.h"

namespace zt {

void count_rows(const ClickBatch& batch, std::span<const PruneRowTable> tables,
                std::vector<std::vector<double>>& counts) {
    ZT_ASSERT(counts.size() == tables.size(), "count_rows: one count vector per table");
    for (size_t k = 0; k < tables.size(); ++k) {
        const PruneRowTable& t = tables[k];
        ZT_ASSERT(t.feature < batch.features(), "count_rows: table ", t.name, " has no feature");
        std::vector<double>& c = counts[k];
        for (int64_t id : batch.ids[static_cast<size_t>(t.feature)]) {
            ZT_ASSERT(id >= 0 && id < t.rows, "count_rows: id ", id, " outside ", t.name);
            c[static_cast<size_t>(id)] += 1.0;
        }
    }
}

std::vector<uint8_t> row_mask(std::span<const double> counts, std::span<const uint8_t> pruned,
                              int64_t prune_total) {
    const size_t rows = counts.size();
    ZT_ASSERT(pruned.size() == rows, "row_mask: one flag per row");
    std::vector<uint8_t> out(pruned.begin(), pruned.end());
    int64_t have = std::count(out.begin(), out.end(), uint8_t{1});
    if (have >= prune_total) return out;
    std::vector<int64_t> order;
    for (size_t r = 0; r < rows; ++r)
        if (!out[r]) order.push_back(static_cast<int64_t>(r));
    const auto need = static_cast<size_t>(prune_total - have);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(need), order.end(),
                      [&](int64_t a, int64_t b) {
                          const double ca = counts[static_cast<size_t>(a)];
                          const double cb = counts[static_cast<size_t>(b)];
                          return ca != cb ? ca < cb : a < b;
                      });
    for (size_t i = 0; i < need; ++i) out[static_cast<size_t>(order[i])] = 1;
    return out;
}

void set_row_mask(const PruneRowTable& t, std::span<const uint8_t> rows,
                  std::vector<uint8_t>& pruned) {
    for (int64_t r = 0; r < t.rows; ++r) {
        const auto lo = pruned.begin() + t.offset + r * t.dim;
        std::fill(lo, lo + t.dim, rows[static_cast<size_t>(r)]);
    }
}

std::vector<uint8_t> rows_of_mask(const PruneRowTable& t, std::span<const uint8_t> pruned) {
    std::vector<uint8_t> out(static_cast<size_t>(t.rows));
    for (int64_t r = 0; r < t.rows; ++r)
        out[static_cast<size_t>(r)] = pruned[static_cast<size_t>(t.offset + r * t.dim)];
    return out;
}

}  // namespace zt
