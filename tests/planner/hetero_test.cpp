// Ranks of unequal speed (planner/hetero.h): the speed-weighted partition against exhaustive
// enumeration and against balanced_partition at equal speeds; the search gives pipeline layouts
// on unequal ranks their partition and the cost model times the slowest stage.
#include "planner/hetero.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "models/dlrm/dlrm_family.h"
#include "planner/search.h"
#include "planner/sparse_times.h"
#include "planner_test_util.h"
#include "util/error.h"

namespace zt {
namespace {

// Two ranks, ZeRO-0 in memory, no checkpointing: the small space of the searches below.
SearchSpace two_ranks_zero0() {
    SearchSpace space;
    space.ranks = 2;
    space.offload = {"none"};
    space.zero_stages = {0};
    space.checkpoint = {"none"};
    return space;
}

using testing::round_profile;
using testing::tiny_gpt_base;

// The slowest piece's time of `counts` (cost over speed), written out here.
double slowest(const PipeCosts& c, const std::vector<int64_t>& counts,
               const std::vector<double>& speed) {
    double worst = 0;
    int64_t lo = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
        double x = 0;
        for (int64_t l = lo; l < lo + counts[k]; ++l) x += c.block[static_cast<size_t>(l)];
        if (k == 0) x += c.first;
        if (k + 1 == counts.size()) x += c.last;
        worst = std::max(worst, x / speed[k]);
        lo += counts[k];
    }
    return worst;
}

TEST(Hetero, EqualSpeedsGiveTheBalancedPartition) {
    const PipeCosts c{{1, 2, 3, 4, 5, 6, 2}, 2, 3};
    for (int p = 1; p <= 4; ++p) {
        const PipeOptions o{p, p, 1, PipeSchedule::kOneFOneB};
        EXPECT_EQ(speed_partition(c, std::vector<double>(static_cast<size_t>(p), 1.0)),
                  balanced_partition(o, c))
            << p;
    }
}

TEST(Hetero, PartitionIsTheExhaustiveOptimum) {
    const PipeCosts c{{3, 1, 4, 1, 5, 9, 2, 6}, 2.5, 4};
    const std::vector<std::vector<double>> speeds = {
        {1, 0.5}, {0.25, 1}, {1, 1, 0.5}, {0.5, 1, 0.75, 1}, {2, 1, 1}};
    for (const std::vector<double>& sp : speeds) {
        const int64_t p = static_cast<int64_t>(sp.size()), L = 8;
        double best = 1e300;
        std::vector<int64_t> cur;
        std::function<void(int64_t)> rec = [&](int64_t left) {  // every composition of L
            if (static_cast<int64_t>(cur.size()) == p - 1) {
                if (left < 1) return;
                cur.push_back(left);
                best = std::min(best, slowest(c, cur, sp));
                cur.pop_back();
                return;
            }
            for (int64_t n = 1; n <= left - (p - 1 - static_cast<int64_t>(cur.size())); ++n) {
                cur.push_back(n);
                rec(left - n);
                cur.pop_back();
            }
        };
        rec(L);
        const std::vector<int64_t> got = speed_partition(c, sp);
        int64_t sum = 0;
        for (int64_t n : got) {
            EXPECT_GE(n, 1);
            sum += n;
        }
        EXPECT_EQ(sum, L);
        EXPECT_DOUBLE_EQ(slowest(c, got, sp), best) << sp.size();
        EXPECT_EQ(speed_partition(c, sp), got);  // deterministic
    }
}

TEST(Hetero, AHalfSpeedStageGetsHalfTheBlocks) {
    const PipeCosts c{std::vector<double>(6, 1.0), 0, 0};
    const std::vector<int64_t> counts = speed_partition(c, {1, 0.5});
    EXPECT_EQ(counts, (std::vector<int64_t>{4, 2}));
    EXPECT_DOUBLE_EQ(speed_share(c, counts, {1, 0.5}), std::max(4 / 1.0, 2 / 0.5) / 6);
    EXPECT_DOUBLE_EQ(speed_share(c, {3, 3}, {1, 1}), 0.5);
}

TEST(Hetero, StageSpeedIsItsSlowestRank) {
    // 8 ranks, dp 2 x tp 1 x pp 4: stage k holds ranks 2k and 2k + 1.
    EXPECT_EQ(stage_speeds({1, 0.5, 1, 1, 0.25, 1, 1, 2}, 2, 1, 4),
              (std::vector<double>{0.5, 1, 0.25, 1}));
    EXPECT_EQ(stage_speeds({1, 0.5}, 1, 1, 2), (std::vector<double>{1, 0.5}));
}

TEST(Hetero, ParsesOneSpeedPerRank) {
    EXPECT_EQ(parse_rank_speeds("1,1,0.5,0.5", 4), (std::vector<double>{1, 1, 0.5, 0.5}));
    EXPECT_THROW(parse_rank_speeds("1,0.5", 4), Error);
    EXPECT_THROW(parse_rank_speeds("1,x", 2), Error);
    EXPECT_THROW(parse_rank_speeds("1,0", 2), Error);
    EXPECT_THROW(parse_rank_speeds("1,-1", 2), Error);
}

// "measured": the calibration profile's speeds (Note [Measured rank speeds]).
TEST(Hetero, MeasuredSpeedsComeFromTheProfileForItsRankCount) {
    const std::vector<double> m = {1.0, 0.8};
    EXPECT_EQ(rank_speeds_of("measured", 2, m), m);
    EXPECT_EQ(rank_speeds_of("1,0.5", 2, m), (std::vector<double>{1, 0.5}));
    auto message = [](const std::string& text, int ranks, const std::vector<double>& v) {
        try {
            rank_speeds_of(text, ranks, v);
        } catch (const Error& e) {
            return e.message();
        }
        return std::string();
    };
    EXPECT_NE(message("measured", 2, {}).find("mpirun -np 2 zerotrain bench calibrate"),
              std::string::npos);
    EXPECT_NE(message("measured", 4, m).find("are for 2 ranks, not 4"), std::string::npos)
        << message("measured", 4, m);
}

TEST(Hetero, CappedPartitionKeepsEachStageWithinItsCap) {
    const PipeCosts c{std::vector<double>(6, 1.0), 0, 0};
    const std::vector<double> equal = {1, 1};
    EXPECT_EQ(capped_partition(c, equal, {6, 6}), (std::vector<int64_t>{3, 3}));
    EXPECT_EQ(capped_partition(c, equal, {6, 2}), (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(capped_partition(c, equal, {1, 6}), (std::vector<int64_t>{1, 5}));
    EXPECT_TRUE(capped_partition(c, equal, {2, 2}).empty());  // 4 blocks of room for 6
    EXPECT_TRUE(capped_partition(c, equal, {0, 6}).empty());  // a stage that holds nothing
    // Speed and caps together: the half-speed stage wants 2 blocks, its cap allows 1.
    EXPECT_EQ(capped_partition(c, {1, 0.5}, {6, 6}), (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(capped_partition(c, {1, 0.5}, {6, 1}), (std::vector<int64_t>{5, 1}));
    // Against every cut: the capped optimum is the best feasible one.
    const PipeCosts u{{3, 1, 4, 1, 5, 9, 2, 6}, 2.5, 4};
    const std::vector<double> sp = {1, 0.7, 1.3};
    for (const std::vector<int64_t>& cap :
         {std::vector<int64_t>{3, 8, 8}, std::vector<int64_t>{8, 2, 3},
          std::vector<int64_t>{4, 4, 1}}) {
        const std::vector<int64_t> got = capped_partition(u, sp, cap);
        ASSERT_EQ(got.size(), 3u);
        double best = 1e300;
        for (int64_t a = 1; a <= 6; ++a)
            for (int64_t b = 1; a + b <= 7; ++b) {
                const std::vector<int64_t> n = {a, b, 8 - a - b};
                if (a > cap[0] || b > cap[1] || n[2] > cap[2]) continue;
                best = std::min(best, speed_share(u, n, sp));
            }
        for (size_t k = 0; k < 3; ++k) EXPECT_LE(got[k], cap[k]);
        EXPECT_DOUBLE_EQ(speed_share(u, got, sp), best);
    }
}

TEST(Hetero, ParsesOneBudgetPerRankAndTakesEachStagesSmallest) {
    EXPECT_EQ(parse_rank_memory("2GiB,1024,1MiB", 3),
              (std::vector<int64_t>{int64_t{2} << 30, 1024, 1 << 20}));
    EXPECT_THROW(parse_rank_memory("1GiB", 2), Error);
    EXPECT_THROW(parse_rank_memory("1GiB,x", 2), Error);
    EXPECT_THROW(parse_rank_memory("1GiB,0", 2), Error);
    EXPECT_EQ(stage_budgets({8, 4, 6, 9}, 2, 1, 2), (std::vector<int64_t>{4, 6}));
}

// Note [Stages sized to memory]: a rank with less memory gets a stage with fewer blocks, each
// stage's predicted peak within its rank's budget, where the balanced cut would not fit.
TEST(Hetero, SearchSizesStagesToTheirMemory) {
    PlanBase base = tiny_gpt_base(8, 8);
    SearchSpace space = two_ranks_zero0();
    space.schedules = {PipeSchedule::kGpipe};
    Strategy s;
    s.pp = 2;
    s.micro_batch = 4;
    s.grad_accum = 2;
    s.checkpoint = "none";
    s.schedule = PipeSchedule::kGpipe;
    const int64_t even1 = plan_peak_bytes(plan_memory_of_stage(base, s, 1));
    const int64_t even0 = plan_peak_bytes(plan_memory_of_stage(base, s, 0));
    base.rank_memory = {int64_t{1} << 40, even1 - 1};  // the last stage's 4 blocks do not fit
    SearchOptions opt;
    opt.top = 0;
    const SearchResult r = search_plans(base, space, nullptr, opt, nullptr);
    bool found = false;
    for (const PlanCost& c : r.ranked) {
        if (c.strategy.pp != 2 || c.strategy.micro_batch != 4) continue;
        found = true;
        ASSERT_EQ(c.strategy.partition.size(), 2u);
        EXPECT_LT(c.strategy.partition[1], 4) << "fewer blocks on the smaller rank";
        ASSERT_EQ(c.stage_bytes.size(), 2u);
        EXPECT_LE(c.stage_bytes[1], base.rank_memory[1]);
        EXPECT_GT(c.stage_bytes[0], even0) << "the larger rank took the blocks";
    }
    EXPECT_TRUE(found);
    // A budget no stage of one block fits: every pipeline rejected, naming the stage.
    base.rank_memory = {int64_t{1} << 40, 1024};
    const SearchResult none = search_plans(base, space, nullptr, opt, nullptr);
    for (const PlanCost& c : none.ranked) EXPECT_EQ(c.strategy.pp, 1) << "dp also needs rank 1";
    bool said = false;
    for (const Rejected& x : none.rejected)
        said = said || x.reason.find(", stage 1 needs") != std::string::npos;
    EXPECT_TRUE(said);
}

// The search sizes a pipeline's stages to the declared speeds (no interleaving) and the cost
// model times the slowest stage; without a pipeline the slowest rank sets the pace.
TEST(Hetero, SearchSizesStagesToTheirSpeed) {
    PlanBase base = tiny_gpt_base(8, 4);
    const MachineProfile prof = round_profile();
    base.rank_speed = {1, 0.5};
    SearchSpace space;
    space.ranks = 2;
    space.offload = {"none"};
    SearchOptions opt;
    opt.top = 0;
    const SearchResult r = search_plans(base, space, &prof, opt, nullptr);
    const std::vector<int64_t> want =
        speed_partition(base.spec.model->pipeline_costs(), std::vector<double>{1, 0.5});
    int pipelines = 0;
    for (const PlanCost& c : r.ranked) {
        if (c.strategy.pp == 1) {
            EXPECT_TRUE(c.strategy.partition.empty());
            continue;
        }
        ++pipelines;
        EXPECT_EQ(c.strategy.partition, want);
        EXPECT_EQ(c.strategy.virtual_stages, 1);
    }
    EXPECT_GT(pipelines, 0);
    const SearchResult again = search_plans(base, space, &prof, opt, nullptr);
    ASSERT_EQ(again.ranked.size(), r.ranked.size());
    for (size_t i = 0; i < r.ranked.size(); ++i)
        EXPECT_EQ(again.ranked[i].strategy, r.ranked[i].strategy);

    // dp 2 at speeds 1 and 0.5: twice the compute of equal ranks.
    Strategy s;
    s.dp = 2;
    s.micro_batch = 4;
    PlanBase equal = base;
    equal.rank_speed.clear();
    EXPECT_NEAR(plan_cost(base, s, &prof).time.compute, 2 * plan_cost(equal, s, &prof).time.compute,
                1e-12);
    // pp 2: the slowest stage's cost over its speed, against the balanced stages' share.
    s = Strategy{};
    s.pp = 2;
    s.micro_batch = 2;
    s.grad_accum = 4;
    s.partition = want;
    const PipeCosts pc = base.spec.model->pipeline_costs();
    Strategy even = s;
    even.partition.clear();
    const PipeOptions o{2, 4, 1, PipeSchedule::kOneFOneB};
    const double share_even = speed_share(pc, balanced_partition(o, pc), {1, 1});
    EXPECT_NEAR(plan_cost(base, s, &prof).time.compute / plan_cost(equal, even, &prof).time.compute,
                speed_share(pc, want, {1, 0.5}) / share_even, 1e-9);
}

TEST(Hetero, BatchSharesFollowSpeed) {
    EXPECT_EQ(shares_by_speed(64, {1, 0.5}), (std::vector<int64_t>{43, 21}));
    EXPECT_EQ(shares_by_speed(8, {1, 1}), (std::vector<int64_t>{4, 4}));
    EXPECT_EQ(shares_by_speed(3, {1, 1}), (std::vector<int64_t>{2, 1}));  // ties to the earlier
    EXPECT_EQ(shares_by_speed(4, {1, 0.001, 0.001}), (std::vector<int64_t>{2, 1, 1}));  // >= 1
    for (int64_t total : {3, 8, 17, 64})
        for (const std::vector<double>& v :
             {std::vector<double>{1, 0.5, 0.25}, std::vector<double>{0.3, 1, 0.7, 0.01}}) {
            if (total < static_cast<int64_t>(v.size())) continue;
            const std::vector<int64_t> got = shares_by_speed(total, v);
            int64_t sum = 0;
            double vsum = 0;
            for (size_t r = 0; r < v.size(); ++r) {
                EXPECT_GE(got[r], 1);
                sum += got[r];
                vsum += v[r];
            }
            EXPECT_EQ(sum, total);
            for (size_t r = 0; r < v.size(); ++r)  // within one sample of proportional
                EXPECT_LE(std::abs(static_cast<double>(got[r]) -
                                   std::max(1.0, static_cast<double>(total) * v[r] / vsum)),
                          1.0 + 1e-9)
                    << total << " rank " << r;
        }
    EXPECT_EQ(dp_speeds({1, 0.5, 0.8, 0.9}, 2, 2), (std::vector<double>{0.5, 0.8}));
}

// Data-parallel ranks of unequal speed: the layout with shares by speed is costed at its slowest
// rank's work for its speed, and ranks above the same layout of equal shares.
TEST(Hetero, SearchGivesFasterRanksMoreOfTheBatch) {
    PlanBase base = tiny_gpt_base(8);
    base.rank_speed = {1, 0.5};
    const MachineProfile prof = round_profile();
    Strategy even;
    even.dp = 2;
    even.micro_batch = 4;
    Strategy shared = even;
    shared.batch_shares = {5, 3};
    const PlanCost a = plan_cost(base, even, &prof), b = plan_cost(base, shared, &prof);
    // Compute scales with the slowest rank's samples over its speed: 4 / 0.5 against 3 / 0.5.
    EXPECT_NEAR(b.time.compute / a.time.compute, 3.0 / 4.0, 1e-9);
    EXPECT_GT(b.device_bytes, a.device_bytes);  // the rank of 5 samples holds more activations
    SearchSpace space;
    space.ranks = 2;
    space.offload = {"none"};
    space.max_pp = 1;
    space.max_tp = 1;
    SearchOptions opt;
    opt.top = 0;
    const SearchResult r = search_plans(base, space, &prof, opt);
    ASSERT_FALSE(r.ranked.empty());
    EXPECT_EQ(r.ranked.front().strategy.batch_shares.size(), 2u)
        << strategy_label(r.ranked.front().strategy);
    base.rank_speed = {1, 1};  // equal ranks: no shares
    for (const PlanCost& c : search_plans(base, space, &prof, opt).ranked)
        EXPECT_TRUE(c.strategy.batch_shares.empty()) << strategy_label(c.strategy);
}

// A DLRM whose tables (dim 16, the first `first_dim` wide) are placed whole on ranks, planned for
// a global batch of 64 on 4 cores.
PlanBase table_sharded_dlrm(std::initializer_list<int64_t> table_rows, int64_t first_dim = 16) {
    DlrmOptions o;
    o.dense_features = 13;
    for (int64_t rows : table_rows) {
        DlrmTable t;
        t.rows = rows;
        t.dim = 16;
        o.tables.push_back(t);
    }
    o.tables[0].dim = first_dim;
    o.embedding.enabled = true;
    o.embedding.sharding = {ShardKind::kTable};
    o.bottom_mlp = {24, 16};
    o.top_mlp = {16, 1};
    PlanBase base;
    base.spec.model = std::make_shared<DlrmFamily>(o, DlrmDataOptions{});
    base.spec.optimizer = "AdamW";
    base.spec.state.optimizer_states = 2;
    base.global_batch = 64;
    base.cores = 4;
    base.threads = 1;
    base.param_tensors = 8;
    return base;
}

// Ranks of unequal memory, tables placed whole on ranks: where the config's equal placement
// leaves the smaller rank over its budget, the search places the tables by the ranks' budgets
// (embedding.rank_weights), and checks each rank's bytes (its own tables beside the common
// state) against its own budget.
TEST(Hetero, SearchPlacesTablesByMemory) {
    PlanBase base = table_sharded_dlrm({400000, 300000, 200000, 100000, 50000});
    const ModelFamily& m = *base.spec.model;
    ASSERT_TRUE(m.places_tables_by_weight(2));
    EXPECT_FALSE(m.places_tables_by_weight(1));
    // Weights move whole tables: the same bytes in all, more of them on the heavier rank.
    const std::vector<int64_t> equal = m.sparse_bytes_by_rank(2, {});
    const std::vector<int64_t> tilted = m.sparse_bytes_by_rank(2, std::vector<double>{3, 1});
    EXPECT_EQ(equal[0] + equal[1], tilted[0] + tilted[1]);
    EXPECT_GT(tilted[0], tilted[1]);
    EXPECT_EQ(std::max(equal[0], equal[1]), m.sparse_bytes_per_rank(2));

    SearchSpace space = two_ranks_zero0();
    SearchOptions opt;
    opt.top = 0;
    // Equal placement: rank 1's tables alone are over its budget, at any micro-batch.
    const int64_t small = std::max(equal[0], equal[1]) * 9 / 10;
    base.rank_memory = {int64_t{1} << 40, small};
    const SearchResult r = search_plans(base, space, nullptr, opt, nullptr);
    bool found = false;
    for (const PlanCost& c : r.ranked) {
        ASSERT_FALSE(c.strategy.table_weights.empty()) << strategy_label(c.strategy);
        found = true;
        EXPECT_EQ(
            c.strategy.table_weights,
            (std::vector<double>{1 << 20, std::floor(static_cast<double>(small) / (1 << 20))}));
        const std::vector<int64_t> each = m.sparse_bytes_by_rank(2, c.strategy.table_weights);
        EXPECT_LE(c.device_bytes - std::max(each[0], each[1]) + each[1], base.rank_memory[1])
            << "rank 1 within its budget";
        EXPECT_EQ(c.device_bytes, plan_peak_bytes(plan_memory(base, c.strategy)));
        EXPECT_EQ(c.memory.device[static_cast<int>(MemCategory::kEmbedding)],
                  std::max(each[0], each[1]));
        EXPECT_NE(strategy_label(c.strategy).find(", tables by "), std::string::npos);
    }
    EXPECT_TRUE(found);
    // Equal budgets: no weights (the config's placement is the budgets' already).
    base.rank_memory = {int64_t{1} << 30, int64_t{1} << 30};
    for (const PlanCost& c : search_plans(base, space, nullptr, opt, nullptr).ranked)
        EXPECT_TRUE(c.strategy.table_weights.empty());
    // A rank that cannot hold even the common state: rejected, naming the rank.
    base.rank_memory = {int64_t{1} << 40, 1024};
    const SearchResult none = search_plans(base, space, nullptr, opt, nullptr);
    EXPECT_TRUE(none.ranked.empty());
    bool said = false;
    for (const Rejected& x : none.rejected)
        said = said || x.reason.find("dp rank 1 needs") != std::string::npos;
    EXPECT_TRUE(said);
}

// Note [Tables by speed]: each rank serves its own tables' lookups for every rank's micro-batch,
// so the step waits for max_r (D + R f_r S) / v_r; with --rank-speed the search also places the
// tables by the speeds, and that placement wins where one rank is much slower.
TEST(Hetero, SearchPlacesTablesBySpeed) {
    // A wider first table: its lookups are twice the work.
    PlanBase base = table_sharded_dlrm({4000, 3000, 2000, 1000, 500, 400, 300, 200}, 32);
    const ModelFamily& m = *base.spec.model;
    // The work shares: each rank's tables' columns x ids over all of them, summing to 1.
    const std::vector<double> equal = m.sparse_work_by_rank(2, {});
    const std::vector<double> tilted = m.sparse_work_by_rank(2, std::vector<double>{1, 0.25});
    ASSERT_EQ(equal.size(), 2u);
    EXPECT_NEAR(equal[0] + equal[1], 1.0, 1e-12);
    EXPECT_NEAR(tilted[0] + tilted[1], 1.0, 1e-12);
    EXPECT_GT(tilted[0], equal[0]);
    // Whole tables: 9 units of work (eight tables, the first twice as wide).
    for (double w : tilted) EXPECT_NEAR(w * 9, std::round(w * 9), 1e-12);
    EXPECT_TRUE(m.sparse_work_by_rank(1, {}) == std::vector<double>{1.0});

    // A profile with the sharded tables' time of every micro-batch the search tries: 1 ms at 32.
    MachineProfile prof = testing::round_profile();
    for (int64_t b : {1, 2, 4, 8, 16, 32, 64})
        for (int threads = 1; threads <= 4; ++threads)
            for (const SparseShape& x : m.sparse_shapes(b))
                prof.shape_s[sparse_time_key(threads, x)] = 1e-3 * static_cast<double>(b) / 32;
    SearchSpace space = two_ranks_zero0();
    SearchOptions opt;
    opt.top = 0;
    base.rank_speed = {1.0, 0.25};
    const SearchResult r = search_plans(base, space, &prof, opt, nullptr);
    ASSERT_FALSE(r.ranked.empty());
    const PlanCost& best = r.ranked.front();
    ASSERT_EQ(best.strategy.dp, 2) << strategy_label(best.strategy);
    // Sharded tables take no batch shares (the engine refuses them): none is proposed.
    for (const PlanCost& c : r.ranked)
        EXPECT_TRUE(c.strategy.batch_shares.empty()) << strategy_label(c.strategy);
    EXPECT_EQ(best.strategy.table_weights, (std::vector<double>{1.0, 0.25}));
    EXPECT_NE(strategy_label(best.strategy).find(", tables by 1+0.25"), std::string::npos);
    // The formula: D at speed 1 from the same layout without the tables' time, then the rank
    // with the most (D + 2 f_r S) / v_r.
    MachineProfile no_sparse = testing::round_profile();
    const PlanCost dense = plan_cost(base, best.strategy, &no_sparse);
    const double mb = static_cast<double>(best.strategy.grad_accum);
    const double S = 1e-3 * static_cast<double>(best.strategy.micro_batch) / 32;
    const double D = dense.time.compute / mb * 0.25;  // scaled by 1 / the slowest speed
    const std::vector<double> f = m.sparse_work_by_rank(2, best.strategy.table_weights);
    const double want = mb * std::max((D + 2 * f[0] * S) / 1.0, (D + 2 * f[1] * S) / 0.25);
    EXPECT_NEAR(best.time.compute, want, want * 1e-12);
    // The same layout with the tables placed evenly is slower: the slow rank serves half.
    Strategy even = best.strategy;
    even.table_weights.clear();
    EXPECT_GT(plan_cost(base, even, &prof).time.compute, best.time.compute);
    // Equal speeds: no placement by speed is tried.
    base.rank_speed = {1.0, 1.0};
    for (const PlanCost& c : search_plans(base, space, &prof, opt, nullptr).ranked)
        EXPECT_TRUE(c.strategy.table_weights.empty()) << strategy_label(c.strategy);
}

}  // namespace
}  // namespace zt
