// Rows pruning's pure parts (compression/prune_rows.h): counts against a naive count of the ids,
// the lowest counts pruned with ties to the lower row, rows pruned before kept pruned, and the
// whole-arena mask covering every element of a pruned row and nothing else.
#include "compression/prune_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "nn/model.h"

namespace zt {
namespace {

TEST(PruneRows, CountsEveryLookupOfItsFeature) {
    // Two tables on features 2 and 0 of a 3-feature batch with bags of 0-3 ids.
    std::mt19937 gen(3);
    const std::vector<int64_t> rows = {7, 5, 11};
    std::vector<std::vector<int64_t>> ids(3);
    std::vector<std::vector<int64_t>> offsets(3, std::vector<int64_t>{0});
    const int64_t B = 9;
    for (size_t f = 0; f < 3; ++f)
        for (int64_t b = 0; b < B; ++b) {
            const int n = static_cast<int>(gen() % 4);
            for (int i = 0; i < n; ++i)
                ids[f].push_back(static_cast<int64_t>(gen() % static_cast<uint32_t>(rows[f])));
            offsets[f].push_back(static_cast<int64_t>(ids[f].size()));
        }
    ClickBatch batch;
    batch.B = B;
    for (size_t f = 0; f < 3; ++f) {
        batch.ids.emplace_back(ids[f]);
        batch.offsets.emplace_back(offsets[f]);
        batch.weights.emplace_back();
    }
    const std::vector<PruneRowTable> tables = {{"emb_l.2.weight", 2, 0, 11, 4},
                                               {"emb_l.0.weight", 0, 44, 7, 4}};
    std::vector<std::vector<double>> counts = {std::vector<double>(11, 0.0),
                                               std::vector<double>(7, 0.0)};
    count_rows(batch, tables, counts);
    count_rows(batch, tables, counts);  // twice: counts add up
    for (size_t k = 0; k < tables.size(); ++k) {
        std::vector<double> want(static_cast<size_t>(tables[k].rows), 0.0);
        for (int64_t id : ids[static_cast<size_t>(tables[k].feature)])
            want[static_cast<size_t>(id)] += 2.0;
        EXPECT_EQ(counts[k], want) << tables[k].name;
    }
}

TEST(PruneRows, LowestCountsFirstTiesToTheLowerRow) {
    const std::vector<double> counts = {5, 1, 3, 1, 0, 3, 9};
    const std::vector<uint8_t> none(7, 0);
    EXPECT_EQ(row_mask(counts, none, 0), none);
    EXPECT_EQ(row_mask(counts, none, 1), (std::vector<uint8_t>{0, 0, 0, 0, 1, 0, 0}));
    EXPECT_EQ(row_mask(counts, none, 2), (std::vector<uint8_t>{0, 1, 0, 0, 1, 0, 0}));
    EXPECT_EQ(row_mask(counts, none, 4), (std::vector<uint8_t>{0, 1, 1, 1, 1, 0, 0}));
    // A row pruned before stays pruned, whatever its count, and counts toward the total.
    const std::vector<uint8_t> before = {0, 0, 0, 0, 0, 0, 1};
    EXPECT_EQ(row_mask(counts, before, 1), before);
    EXPECT_EQ(row_mask(counts, before, 3), (std::vector<uint8_t>{0, 1, 0, 0, 1, 0, 1}));
    EXPECT_EQ(row_mask(counts, before, 4), (std::vector<uint8_t>{0, 1, 0, 1, 1, 0, 1}));
}

TEST(PruneRows, MatchesASortedReferenceOnRandomCounts) {
    // Many ties (counts 0-4): the reference sorts (count, row) pairs and takes the first ones.
    std::mt19937 gen(11);
    for (int64_t rows : {1, 13, 64, 101}) {
        std::vector<double> counts(static_cast<size_t>(rows));
        for (double& c : counts) c = static_cast<double>(gen() % 5);
        for (int64_t total = 0; total <= rows; total += std::max<int64_t>(1, rows / 7)) {
            std::vector<std::pair<double, int64_t>> order;
            for (int64_t r = 0; r < rows; ++r) order.push_back({counts[static_cast<size_t>(r)], r});
            std::sort(order.begin(), order.end());
            std::vector<uint8_t> want(static_cast<size_t>(rows), 0);
            for (int64_t i = 0; i < total; ++i) want[static_cast<size_t>(order[i].second)] = 1;
            EXPECT_EQ(row_mask(counts, std::vector<uint8_t>(static_cast<size_t>(rows), 0), total),
                      want)
                << rows << " rows, " << total << " pruned";
        }
    }
}

TEST(PruneRows, ArenaMaskCoversWholeRows) {
    const PruneRowTable t{"emb_l.1.weight", 1, 3, 4, 3};  // 4 rows of 3 at element 3
    std::vector<uint8_t> arena(17, 7);                    // 7: outside the table, untouched
    set_row_mask(t, std::vector<uint8_t>{0, 1, 0, 1}, arena);
    const std::vector<uint8_t> want = {7, 7, 7, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 7, 7};
    EXPECT_EQ(arena, want);
    EXPECT_EQ(rows_of_mask(t, arena), (std::vector<uint8_t>{0, 1, 0, 1}));
}

}  // namespace
}  // namespace zt
