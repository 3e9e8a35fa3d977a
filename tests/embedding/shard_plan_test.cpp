// Embedding sharding plans (embedding/shard_plan.h): row and column ranges tile each table exactly
// (sizes that do not divide the rank count), the greedy table-wise placement against a small
// independent implementation, auto at its thresholds, per-rank and all-to-all bytes against the
// formulas of Note [Shard bytes] and Note [All-to-all bytes], the budget error and bad inputs.
#include "embedding/shard_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/units.h"

namespace zt {
namespace {

EmbeddingTableSpec table(const std::string& name, int64_t rows, int64_t dim, double ids = 1) {
    return {name, rows, dim, ids};
}

EmbeddingPlanOptions options(int ranks, ShardKind kind) {
    EmbeddingPlanOptions o;
    o.ranks = ranks;
    o.sharding = {kind};
    return o;
}

// The message of the zt::Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Note [Shard bytes], written out.
int64_t expected_shard_bytes(const EmbeddingTableSpec& t, const TableShard& s,
                             const EmbeddingPlanOptions& o) {
    const int64_t r = s.row_end - s.row_begin, c = s.col_end - s.col_begin;
    return r * c * o.weight_bytes_per_elem + ceil_div(r * o.state_floats_per_row * 4 * c, t.dim);
}

TEST(ShardPlan, KindNamesRoundTripAndUnknownNameListsThem) {
    for (ShardKind k : {ShardKind::kAuto, ShardKind::kDataParallel, ShardKind::kTable,
                        ShardKind::kRow, ShardKind::kColumn})
        EXPECT_EQ(parse_shard_kind(shard_kind_name(k), "embedding.sharding"), k);
    const std::string msg = error_of([] { parse_shard_kind("rows", "embedding.sharding[2]"); });
    EXPECT_NE(msg.find("embedding.sharding[2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"rows\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("auto, data_parallel, table, row, column"), std::string::npos) << msg;
}

// Row ranges: contiguous, exact cover, lengths rows / ranks with the first rows % ranks one longer;
// empty ranges (rows < ranks) are left out.
TEST(ShardPlan, RowRangesTileTheTable) {
    const std::vector<std::pair<int64_t, int>> cases = {
        {1001, 4}, {1000, 4}, {7, 3}, {3, 4}, {5, 1}};
    for (auto [rows, ranks] : cases) {
        const EmbeddingTableSpec t = table("t", rows, 5);
        const EmbeddingPlan plan = plan_embeddings({t}, options(ranks, ShardKind::kRow));
        const auto& shards = plan.placement[0].shards;
        ASSERT_EQ(shards.size(), static_cast<size_t>(std::min<int64_t>(rows, ranks)));
        int64_t at = 0;
        for (size_t i = 0; i < shards.size(); ++i) {
            const TableShard& s = shards[i];
            EXPECT_EQ(s.rank, static_cast<int>(i));
            EXPECT_EQ(s.row_begin, at);
            const int64_t want = rows / ranks + (static_cast<int64_t>(i) < rows % ranks ? 1 : 0);
            EXPECT_EQ(s.row_end - s.row_begin, want) << rows << " rows, shard " << i;
            EXPECT_EQ(s.col_begin, 0);
            EXPECT_EQ(s.col_end, t.dim);
            EXPECT_EQ(plan.shard_on(0, s.rank), &s);
            at = s.row_end;
        }
        EXPECT_EQ(at, rows);
        for (int r = static_cast<int>(shards.size()); r < ranks; ++r)
            EXPECT_EQ(plan.shard_on(0, r), nullptr);
    }
}

// Column ranges: min(ranks, dim) of them, range j on rank j, the first dim % n one longer.
TEST(ShardPlan, ColumnRangesTileTheTable) {
    const std::vector<std::pair<int64_t, int>> cases = {{13, 4}, {3, 4}, {1, 4}, {16, 4}};
    for (auto [dim, ranks] : cases) {
        const int64_t rows = 9;
        const EmbeddingPlan plan =
            plan_embeddings({table("t", rows, dim)}, options(ranks, ShardKind::kColumn));
        const auto& shards = plan.placement[0].shards;
        const int64_t n = std::min<int64_t>(dim, ranks);
        ASSERT_EQ(static_cast<int64_t>(shards.size()), n);
        int64_t at = 0;
        for (int64_t j = 0; j < n; ++j) {
            const TableShard& s = shards[static_cast<size_t>(j)];
            EXPECT_EQ(s.rank, j);
            EXPECT_EQ(s.col_begin, at);
            EXPECT_EQ(s.col_end - s.col_begin, dim / n + (j < dim % n ? 1 : 0));
            EXPECT_EQ(s.row_begin, 0);
            EXPECT_EQ(s.row_end, rows);
            at = s.col_end;
        }
        EXPECT_EQ(at, dim);
    }
}

// Rank bytes: weights plus the rounded-up state share per shard; replicated tables on every rank.
TEST(ShardPlan, RankBytesFollowTheShardFormula) {
    EmbeddingPlanOptions o = options(4, ShardKind::kColumn);
    o.sharding = {ShardKind::kColumn, ShardKind::kRow, ShardKind::kDataParallel};
    o.state_floats_per_row = 3;
    o.weight_bytes_per_elem = 4;
    o.dense_bytes_per_elem = 12;
    const std::vector<EmbeddingTableSpec> tables = {table("c", 101, 13), table("r", 1001, 7),
                                                    table("d", 10, 6)};
    const EmbeddingPlan plan = plan_embeddings(tables, o);
    std::vector<int64_t> want(4, tables[2].rows * tables[2].dim * o.dense_bytes_per_elem);
    std::vector<int64_t> want_table = {0, 0, want[0] * 4};
    for (size_t t = 0; t < 2; ++t)
        for (const TableShard& s : plan.placement[t].shards) {
            want[static_cast<size_t>(s.rank)] += expected_shard_bytes(tables[t], s, o);
            want_table[t] += expected_shard_bytes(tables[t], s, o);
        }
    EXPECT_EQ(plan.rank_bytes, want);
    EXPECT_EQ(plan.table_bytes, want_table);
    EXPECT_EQ(plan.total_bytes, std::accumulate(want.begin(), want.end(), int64_t{0}));
    EXPECT_TRUE(plan.placement[2].shards.empty());
    EXPECT_FALSE(plan.sharded(2));
    EXPECT_TRUE(plan.sharded(0));
}

// The greedy rule, written independently: decreasing weight bytes (ties: ids_per_sample * dim,
// then index), each to the least-loaded rank (ties: lowest).
std::vector<int> greedy_owners(const std::vector<EmbeddingTableSpec>& tables, int ranks,
                               int64_t wb) {
    std::vector<size_t> order(tables.size());
    std::iota(order.begin(), order.end(), size_t{0});
    auto key = [&](size_t i) {
        return std::tuple(-tables[i].rows * tables[i].dim * wb,
                          -tables[i].ids_per_sample * static_cast<double>(tables[i].dim), i);
    };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
    std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
    std::vector<int> owner(tables.size());
    for (size_t i : order) {
        int best = 0;
        for (int r = 1; r < ranks; ++r)
            if (load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
        owner[i] = best;
        load[static_cast<size_t>(best)] += tables[i].rows * tables[i].dim * wb;
    }
    return owner;
}

std::vector<int> plan_owners(const EmbeddingPlan& plan) {
    std::vector<int> out;
    for (const TablePlacement& p : plan.placement) {
        EXPECT_EQ(p.kind, ShardKind::kTable);
        EXPECT_EQ(p.shards.size(), 1u);
        out.push_back(p.shards.at(0).rank);
    }
    return out;
}

TEST(ShardPlan, TableWiseBalancesGreedily) {
    const int64_t dim = 4;
    // Costs 5, 8, 4, 7, 6 (x rows of 4 f32) over 3 ranks, by hand: 8 -> 0, 7 -> 1, 6 -> 2,
    // 5 -> 2 (6 the least), 4 -> 1 (7 the least).
    std::vector<EmbeddingTableSpec> tables;
    for (int64_t c : {5, 8, 4, 7, 6}) tables.push_back(table(str_cat("t", c), c * 10, dim));
    const EmbeddingPlan plan = plan_embeddings(tables, options(3, ShardKind::kTable));
    EXPECT_EQ(plan_owners(plan), (std::vector<int>{2, 0, 1, 1, 2}));
    EXPECT_EQ(plan_owners(plan), greedy_owners(tables, 3, 4));
    // Equal bytes: the table read more (ids_per_sample * dim) goes first, then the lower index.
    const std::vector<EmbeddingTableSpec> ties = {table("a", 20, dim, 1),
                                                  table("b", 10, 2 * dim, 3),
                                                  table("c", 40, dim / 2, 1), table("d", 5, 1, 1)};
    const EmbeddingPlan tied = plan_embeddings(ties, options(2, ShardKind::kTable));
    EXPECT_EQ(plan_owners(tied), (std::vector<int>{1, 0, 0, 1}));
    EXPECT_EQ(plan_owners(tied), greedy_owners(ties, 2, 4));
    // Many tables of varied sizes over 4 ranks, against the independent rule; and deterministic.
    std::vector<EmbeddingTableSpec> many;
    for (int i = 0; i < 26; ++i)
        many.push_back(table(str_cat("e", i), 1 + (i * 37) % 101, 1 + i % 5));
    const EmbeddingPlan a = plan_embeddings(many, options(4, ShardKind::kTable));
    EXPECT_EQ(plan_owners(a), greedy_owners(many, 4, 4));
    EXPECT_EQ(a.to_json(), plan_embeddings(many, options(4, ShardKind::kTable)).to_json());
}

// embedding.rank_weights: table-wise tables in proportion to each rank's weight (ranks of
// unequal speed or memory); equal weights are the unweighted plan.
TEST(ShardPlan, RankWeightsGiveHeavierRanksMoreTables) {
    std::vector<EmbeddingTableSpec> tables;
    for (int i = 0; i < 8; ++i) tables.push_back(table(str_cat("t", i), 100, 4));
    EmbeddingPlanOptions o = options(2, ShardKind::kTable);
    o.rank_weights = {3, 1};
    const EmbeddingPlan plan = plan_embeddings(tables, o);
    const std::vector<int> owners = plan_owners(plan);
    EXPECT_EQ(std::count(owners.begin(), owners.end(), 0), 6);  // 3 : 1 of the 8 equal tables
    EXPECT_EQ(plan.rank_bytes[0], 3 * plan.rank_bytes[1]);
    o.rank_weights = {2, 2};
    EXPECT_EQ(plan_embeddings(tables, o).to_json(),
              plan_embeddings(tables, options(2, ShardKind::kTable)).to_json());
    o.rank_weights = {1, 1, 1};
    try {
        plan_embeddings(tables, o);
        ADD_FAILURE() << "3 weights for 2 ranks accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("embedding.rank_weights: expected one weight per "
                                             "rank (2), got 3"),
                  std::string::npos)
            << e.what();
    }
}

TEST(ShardPlan, AutoChoosesAtItsThresholds) {
    const int64_t dim = 16, wb = 4;
    const int64_t small_rows = kAutoReplicateBytes / (dim * wb);  // exactly the threshold
    auto kinds = [](const EmbeddingPlan& p) {
        std::vector<ShardKind> out;
        for (const TablePlacement& t : p.placement) out.push_back(t.kind);
        return out;
    };
    using K = ShardKind;
    // Under the threshold: replicated; at it: sharded (row, being every sharded byte).
    EXPECT_EQ(kinds(plan_embeddings({table("s", small_rows - 1, dim)}, options(2, K::kAuto))),
              std::vector<K>{K::kDataParallel});
    EXPECT_EQ(kinds(plan_embeddings({table("s", small_rows, dim)}, options(2, K::kAuto))),
              std::vector<K>{K::kRow});
    // Two big tables over 2 ranks: row when bytes * 2 > both tables' bytes, i.e. when larger.
    const int64_t big = 4 * small_rows;
    EXPECT_EQ(
        kinds(plan_embeddings({table("a", big, dim), table("b", big, dim)}, options(2, K::kAuto))),
        (std::vector<K>{K::kTable, K::kTable}));
    EXPECT_EQ(
        kinds(plan_embeddings({table("a", big + 1, dim), table("b", big, dim), table("s", 1, dim)},
                              options(2, K::kAuto))),
        (std::vector<K>{K::kRow, K::kTable, K::kDataParallel}));
    // Explicit kinds count among the sharded bytes: a pinned row table of 3 * big makes the auto
    // table of big + 1 less than half of 4 * big + 1.
    EmbeddingPlanOptions mixed = options(2, K::kAuto);
    mixed.sharding = {K::kRow, K::kAuto};
    EXPECT_EQ(kinds(plan_embeddings({table("p", 3 * big, dim), table("a", big + 1, dim)}, mixed)),
              (std::vector<K>{K::kRow, K::kTable}));
    // One rank: a single big table has one owner.
    const EmbeddingPlan one = plan_embeddings({table("a", big, dim)}, options(1, K::kAuto));
    EXPECT_EQ(kinds(one), std::vector<K>{K::kTable});
    EXPECT_EQ(one.placement[0].shards.at(0).rank, 0);
}

// Note [All-to-all bytes], written out per case.
TEST(ShardPlan, AllToAllBytesOfOneTableWiseTable) {
    EmbeddingPlanOptions o = options(2, ShardKind::kTable);
    o.samples_per_rank = 6;
    o.micro_batches = 3;
    const EmbeddingTableSpec t = table("t", 50, 7, 2.5);
    const EmbeddingPlan plan = plan_embeddings({t}, o);
    ASSERT_EQ(plan.placement[0].shards.at(0).rank, 0);
    const double ids = t.ids_per_sample * o.samples_per_rank * o.micro_batches;  // per rank, step
    // Rank 1 sends its ids and their gradient rows; rank 0 sends the rows.
    EXPECT_EQ(plan.rank_alltoall_bytes[1], std::llround(ids * (8 + 4 * t.dim)));
    EXPECT_EQ(plan.rank_alltoall_bytes[0], std::llround(ids * 4 * t.dim));
    EXPECT_EQ(plan.alltoall_bytes_per_step,
              plan.rank_alltoall_bytes[0] + plan.rank_alltoall_bytes[1]);
}

TEST(ShardPlan, AllToAllBytesOfRowAndColumnShards) {
    EmbeddingPlanOptions o = options(5, ShardKind::kRow);
    o.sharding = {ShardKind::kRow, ShardKind::kColumn, ShardKind::kDataParallel};
    o.samples_per_rank = 4;
    o.micro_batches = 2;
    const std::vector<EmbeddingTableSpec> tables = {table("r", 1001, 6, 3), table("c", 20, 3, 2),
                                                    table("d", 30, 8, 5)};
    const EmbeddingPlan plan = plan_embeddings(tables, o);
    const int ranks = o.ranks;
    std::vector<double> want(static_cast<size_t>(ranks), 0.0);
    const double mb = static_cast<double>(o.micro_batches);
    // Row table: owner q answers the fraction rows_q / rows of every other rank's ids.
    const EmbeddingTableSpec& r = tables[0];
    const double n_r = r.ids_per_sample * o.samples_per_rank;
    for (int q = 0; q < ranks; ++q) {
        const double frac = static_cast<double>(r.rows / ranks + (q < r.rows % ranks ? 1 : 0)) /
                            static_cast<double>(r.rows);
        for (int p = 0; p < ranks; ++p) {
            if (p == q) continue;
            want[static_cast<size_t>(p)] += n_r * frac * (8 + 4 * r.dim);
            want[static_cast<size_t>(q)] += n_r * frac * 4 * r.dim;
        }
    }
    // Column table, dim 3 over 5 ranks: ranks 0-2 own one column each and see every id; ranks 3
    // and 4 own none and ask all three.
    const EmbeddingTableSpec& c = tables[1];
    const double n_c = c.ids_per_sample * o.samples_per_rank;
    for (int q = 0; q < c.dim; ++q)
        for (int p = 0; p < ranks; ++p) {
            if (p == q) continue;
            want[static_cast<size_t>(p)] += n_c * (8 + 4 * 1);
            want[static_cast<size_t>(q)] += n_c * 4 * 1;
        }
    for (int q = 0; q < ranks; ++q)  // the rounding up of a sum of fractions: within 1 byte
        EXPECT_NEAR(static_cast<double>(plan.rank_alltoall_bytes[static_cast<size_t>(q)]),
                    want[static_cast<size_t>(q)] * mb, 1.0)
            << "rank " << q;
}

// n tables of about 1 GiB each at dim 64 (f32), one row more each.
std::vector<EmbeddingTableSpec> gib_tables(int64_t rows_of_one_gib, int n) {
    std::vector<EmbeddingTableSpec> out;
    for (int i = 0; i < n; ++i) out.push_back(table(str_cat("emb_l.", i), rows_of_one_gib + i, 64));
    return out;
}

TEST(ShardPlan, BudgetErrorSaysWhichShardingFits) {
    const int64_t rows = (int64_t{1} << 30) / (64 * 4);  // 1 GiB a table at dim 64, f32
    const std::vector<EmbeddingTableSpec> tables = gib_tables(rows, 6);
    EmbeddingPlanOptions o = options(4, ShardKind::kTable);
    const EmbeddingPlan free_plan = plan_embeddings(tables, o);  // no budget: no error
    const int64_t most =
        *std::max_element(free_plan.rank_bytes.begin(), free_plan.rank_bytes.end());
    const int most_rank = static_cast<int>(
        std::max_element(free_plan.rank_bytes.begin(), free_plan.rank_bytes.end()) -
        free_plan.rank_bytes.begin());
    // Row-wise the largest rank holds ceil(rows / 4) of each table.
    int64_t row_wise = 0;
    for (const EmbeddingTableSpec& t : tables) row_wise += ceil_div(t.rows, 4) * t.dim * 4;
    ASSERT_LT(row_wise, most);
    o.budget_bytes_per_rank = row_wise;
    const std::string msg = error_of([&] { plan_embeddings(tables, o); });
    for (const std::string& part :
         {str_cat("the tables need ", format_bytes(static_cast<double>(free_plan.total_bytes)),
                  " in all"),
          str_cat("(rank ", most_rank, " would hold ", format_bytes(static_cast<double>(most)),
                  ")"),
          str_cat("each rank's budget is ", format_bytes(static_cast<double>(row_wise)), " (",
                  format_bytes(static_cast<double>(row_wise) * 4), " over 4 ranks)"),
          str_cat("'row' sharding would fit (", format_bytes(static_cast<double>(row_wise)),
                  " a rank)")})
        EXPECT_NE(msg.find(part), std::string::npos) << "want: " << part << "\ngot: " << msg;
    // Exactly at the budget row-wise passes.
    o.sharding = {ShardKind::kRow};
    EXPECT_NO_THROW(plan_embeddings(tables, o));
    // A budget row-wise cannot meet over 4 ranks: the fewest ranks that meet it, searched here.
    o.budget_bytes_per_rank = row_wise / 3;
    int64_t need = 5;
    auto row_bytes = [&](int64_t ranks) {
        int64_t b = 0;
        for (const EmbeddingTableSpec& t : tables) b += ceil_div(t.rows, ranks) * t.dim * 4;
        return b;
    };
    while (row_bytes(need) > o.budget_bytes_per_rank) ++need;
    const std::string more = error_of([&] { plan_embeddings(tables, o); });
    const std::string part = str_cat("even row-wise sharding needs at least ", need, " ranks");
    EXPECT_NE(more.find(part), std::string::npos) << more;
    EXPECT_GT(need, 4);
    // Under one row of each table a rank: only a larger budget helps.
    o.budget_bytes_per_rank = 64 * 4 * 6 - 1;
    EXPECT_NE(error_of([&] { plan_embeddings(tables, o); }).find("raise the budget"),
              std::string::npos);
}

TEST(ShardPlan, BadInputsNameTheProblem) {
    const std::vector<EmbeddingTableSpec> three = {table("a", 10, 4), table("b", 10, 4),
                                                   table("c", 10, 4)};
    std::string msg = error_of([&] { plan_embeddings(three, options(0, ShardKind::kRow)); });
    EXPECT_NE(msg.find("at least 1 rank, got 0"), std::string::npos) << msg;
    EmbeddingPlanOptions o = options(2, ShardKind::kRow);
    o.sharding = {ShardKind::kRow, ShardKind::kTable};
    msg = error_of([&] { plan_embeddings(three, o); });
    EXPECT_NE(msg.find("lists 2 kinds for 3 tables"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected 1 (for every table) or 3"), std::string::npos) << msg;
    msg = error_of([] { plan_embeddings({table("z", 0, 4)}, options(2, ShardKind::kRow)); });
    EXPECT_NE(msg.find("table 'z' is 0 x 4"), std::string::npos) << msg;
    msg = error_of([] { plan_embeddings({table("w", 4, 0)}, options(2, ShardKind::kRow)); });
    EXPECT_NE(msg.find("table 'w' is 4 x 0"), std::string::npos) << msg;
    EXPECT_THROW(plan_embeddings({table("n", 4, 4, -1)}, options(2, ShardKind::kRow)), Error);
}

TEST(ShardPlan, JsonAndDescribeCarryThePlan) {
    EmbeddingPlanOptions o = options(3, ShardKind::kRow);
    o.sharding = {ShardKind::kRow, ShardKind::kTable, ShardKind::kDataParallel};
    o.samples_per_rank = 2;
    const std::vector<EmbeddingTableSpec> tables = {table("emb_l.0.weight", 10, 4),
                                                    table("emb_l.1.weight", 7, 5),
                                                    table("emb_l.2.weight", 3, 2)};
    const EmbeddingPlan plan = plan_embeddings(tables, o);
    const nlohmann::json j = plan.to_json();
    ASSERT_EQ(j.at("tables").size(), tables.size());
    for (size_t t = 0; t < tables.size(); ++t) {
        const nlohmann::json& jt = j.at("tables")[t];
        EXPECT_EQ(jt.at("name"), tables[t].name);
        EXPECT_EQ(jt.at("rows"), tables[t].rows);
        EXPECT_EQ(jt.at("dim"), tables[t].dim);
        EXPECT_EQ(jt.at("kind"), shard_kind_name(plan.placement[t].kind));
        EXPECT_EQ(jt.at("bytes"), plan.table_bytes[t]);
        ASSERT_EQ(jt.at("shards").size(), plan.placement[t].shards.size());
        for (size_t i = 0; i < plan.placement[t].shards.size(); ++i) {
            const TableShard& s = plan.placement[t].shards[i];
            const nlohmann::json& js = jt.at("shards")[i];
            EXPECT_EQ(js.at("rank"), s.rank);
            EXPECT_EQ(js.at("row_begin"), s.row_begin);
            EXPECT_EQ(js.at("row_end"), s.row_end);
            EXPECT_EQ(js.at("col_begin"), s.col_begin);
            EXPECT_EQ(js.at("col_end"), s.col_end);
        }
    }
    EXPECT_EQ(j.at("tables")[0].at("kind"), "row");
    EXPECT_EQ(j.at("tables")[1].at("kind"), "table");
    EXPECT_EQ(j.at("tables")[2].at("kind"), "data_parallel");
    EXPECT_EQ(j.at("rank_bytes").get<std::vector<int64_t>>(), plan.rank_bytes);
    EXPECT_EQ(j.at("rank_alltoall_bytes").get<std::vector<int64_t>>(), plan.rank_alltoall_bytes);
    EXPECT_EQ(j.at("alltoall_bytes_per_step"), plan.alltoall_bytes_per_step);
    EXPECT_EQ(j.at("total_bytes"), plan.total_bytes);
    EXPECT_EQ(plan.total_bytes,
              std::accumulate(plan.table_bytes.begin(), plan.table_bytes.end(), int64_t{0}));

    const std::vector<std::string> lines = plan.describe();
    ASSERT_EQ(lines.size(), tables.size() + static_cast<size_t>(o.ranks) + 1);
    EXPECT_EQ(
        lines[0].rfind("emb_l.0.weight (10 x 4): row over 3 ranks (4 rows a rank, some 3)", 0), 0u)
        << lines[0];
    EXPECT_NE(lines[1].find(str_cat("table on rank ", plan.placement[1].shards.at(0).rank)),
              std::string::npos)
        << lines[1];
    EXPECT_NE(lines[2].find("data_parallel, replicated on every rank"), std::string::npos);
    EXPECT_EQ(lines[3].rfind("rank 0: ", 0), 0u) << lines[3];
}

}  // namespace
}  // namespace zt
