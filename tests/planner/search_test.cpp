// The search against exhaustive enumeration: with pruning it returns the same fastest feasible
// layouts as costing every layout and sorting; an infeasible budget names the least memory any
// layout needs and its largest part; the order is deterministic.
#include "planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "planner_test_util.h"

namespace zt {
namespace {

using testing::round_profile;
using testing::tiny_gpt_base;

// The reference: every layout costed, the feasible ones sorted by time then label.
std::vector<PlanCost> brute_force(const PlanBase& base, const SearchSpace& space,
                                  const MachineProfile& prof, int64_t budget) {
    std::vector<PlanCost> all;
    for (const Strategy& s : enumerate_layouts(base, space)) {
        const PlanCost c = plan_cost(base, s, &prof);
        if (budget == 0 || c.device_bytes <= budget) all.push_back(c);
    }
    std::sort(all.begin(), all.end(), [](const PlanCost& a, const PlanCost& b) {
        if (a.time.total() != b.time.total()) return a.time.total() < b.time.total();
        return strategy_label(a.strategy) < strategy_label(b.strategy);
    });
    return all;
}

TEST(Search, PrunedSearchFindsTheExhaustiveOptimum) {
    const MachineProfile prof = round_profile();
    for (int ranks : {1, 2, 4}) {
        const PlanBase base = tiny_gpt_base(8);
        SearchSpace space;
        space.ranks = ranks;
        space.per_block = false;  // lists: LayerSearch.ChosenListIsTheFastestOfEveryListThatFits
        // Budgets from loose to tight: the state floor prunes more groups as they shrink.
        const std::vector<PlanCost> loose = brute_force(base, space, prof, 0);
        ASSERT_FALSE(loose.empty());
        int64_t lo = loose.front().device_bytes, hi = lo;
        for (const PlanCost& c : loose) {
            lo = std::min(lo, c.device_bytes);
            hi = std::max(hi, c.device_bytes);
        }
        for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
            const int64_t budget = lo + static_cast<int64_t>(f * static_cast<double>(hi - lo));
            SCOPED_TRACE(::testing::Message() << "ranks " << ranks << " budget " << budget);
            const std::vector<PlanCost> want = brute_force(base, space, prof, budget);
            SearchOptions o;
            o.budget = budget;
            o.top = 3;
            const SearchResult got = search_plans(base, space, &prof, o);
            ASSERT_EQ(got.ranked.size(), std::min<size_t>(3, want.size()));
            for (size_t i = 0; i < got.ranked.size(); ++i)
                EXPECT_EQ(got.ranked[i].strategy, want[i].strategy) << i;
            EXPECT_LE(got.costed, static_cast<int64_t>(enumerate_layouts(base, space).size()));
        }
    }
}

TEST(Search, InfeasibleBudgetNamesTheSmallestLayoutAndItsLargestPart) {
    const MachineProfile prof = round_profile();
    const PlanBase base = tiny_gpt_base(8);
    SearchSpace space;
    space.ranks = 2;
    int64_t smallest = -1;
    for (const Strategy& s : enumerate_layouts(base, space)) {
        const int64_t b = plan_cost(base, s, nullptr).device_bytes;
        if (smallest < 0 || b < smallest) smallest = b;
    }
    SearchOptions o;
    o.budget = smallest - 1;
    const SearchResult r = search_plans(base, space, &prof, o);
    EXPECT_TRUE(r.infeasible);
    EXPECT_TRUE(r.ranked.empty());
    EXPECT_EQ(r.smallest.device_bytes, smallest);
    const auto [cat, bytes] = largest_category(r.smallest.memory);
    EXPECT_NE(r.smallest_reason.find(cat), std::string::npos) << r.smallest_reason;
    EXPECT_NE(r.smallest_reason.find("needs"), std::string::npos) << r.smallest_reason;
    EXPECT_FALSE(r.rejected.empty());
    // At exactly the smallest size one layout fits.
    o.budget = smallest;
    EXPECT_FALSE(search_plans(base, space, &prof, o).infeasible);
}

TEST(Search, RejectionSaysStageSizeBudgetAndLargestPart) {
    const PlanBase base = tiny_gpt_base(8);
    Strategy s;
    s.dp = 2;
    s.zero_stage = 2;
    s.micro_batch = 4;
    const PlanCost c = plan_cost(base, s, nullptr);
    const std::string r = over_budget_reason(c, 1024);
    const auto [cat, bytes] = largest_category(c.memory);
    EXPECT_EQ(r.rfind("ZeRO-2 needs ", 0), 0u) << r;
    EXPECT_NE(r.find(" > 1.00 KiB: " + cat + " "), std::string::npos) << r;
}

TEST(Search, DeterministicAndTheCheckRefuses) {
    const MachineProfile prof = round_profile();
    const PlanBase base = tiny_gpt_base(8);
    SearchSpace space;
    space.ranks = 4;
    SearchOptions o;
    o.top = 0;
    const SearchResult a = search_plans(base, space, &prof, o);
    const SearchResult b = search_plans(base, space, &prof, o);
    ASSERT_EQ(a.ranked.size(), b.ranked.size());
    for (size_t i = 0; i < a.ranked.size(); ++i)
        EXPECT_EQ(a.ranked[i].strategy, b.ranked[i].strategy);
    // A check refusing the best layout moves the second up, with the check's reason kept.
    const Strategy best = a.ranked[0].strategy;
    o.top = 1;
    const SearchResult c = search_plans(base, space, &prof, o, [&](const Strategy& s) {
        return s == best ? std::string("not built") : std::string();
    });
    ASSERT_EQ(c.ranked.size(), 1u);
    EXPECT_EQ(c.ranked[0].strategy, a.ranked[1].strategy);
    EXPECT_EQ(c.rejected.back().reason, "not built");
}

// One rank: offloaded, stages 2 and 3 keep the gradients in host memory (and stage 3 may
// offload the weights), so they are layouts of their own; without offload they are stage 0's.
// A host budget rejects what the host cannot hold (the cpu tier) and keeps the nvme tier.
TEST(Search, OneRankOffloadedStagesAndTheHostBudget) {
    PlanBase base = tiny_gpt_base(8);
    base.spec.state.offload_param = true;
    base.spec.state.offload_sub_group = 1000;  // nvme staging: 4 sub-groups, not 4 whole tiers
    SearchSpace space;
    space.ranks = 1;
    space.offload = {"none", "cpu", "nvme"};
    std::set<std::pair<int, std::string>> seen;
    for (const Strategy& s : enumerate_layouts(base, space)) seen.insert({s.zero_stage, s.offload});
    const std::set<std::pair<int, std::string>> want = {
        {0, "none"}, {0, "cpu"}, {0, "nvme"}, {2, "cpu"}, {2, "nvme"}, {3, "cpu"}, {3, "nvme"}};
    EXPECT_EQ(seen, want);
    Strategy z3;
    z3.zero_stage = 3;
    z3.micro_batch = 8;
    z3.offload = "cpu";
    const PlanCost cpu = plan_cost(base, z3, nullptr);
    z3.offload = "nvme";
    const PlanCost nvme = plan_cost(base, z3, nullptr);
    ASSERT_GT(cpu.memory.host_total, nvme.memory.host_total);
    const MachineProfile prof = round_profile();
    SearchOptions o;
    o.top = 0;
    o.host_budget = nvme.memory.host_total;  // the nvme tier's host bytes fit, the cpu tier's not
    const SearchResult r = search_plans(base, space, &prof, o);
    bool nvme_ranked = false;
    for (const PlanCost& c : r.ranked) {
        EXPECT_LE(c.memory.host_total, o.host_budget) << strategy_label(c.strategy);
        nvme_ranked = nvme_ranked || (c.strategy.zero_stage == 3 && c.strategy.offload == "nvme");
    }
    EXPECT_TRUE(nvme_ranked);
    bool said = false;
    for (const Rejected& x : r.rejected)
        said = said || x.reason.find("of host memory per rank x 1 on a host") != std::string::npos;
    EXPECT_TRUE(said);
}

// 96 blocks on 1,024 ranks plans at all, under a roomy budget and under one that keeps no
// layout's every activation (per-block checkpointing lists are searched too). How long it takes
// is a benchmark figure (`bench/planner.py --search-time`, docs/benchmarks-planner.md), not a
// test's verdict: a wall-clock bound fails on a loaded machine.
TEST(Search, LargeWorldPlans) {
    PlanBase base = tiny_gpt_base(1024, 96);
    const MachineProfile prof = round_profile();
    SearchSpace space;
    space.ranks = 1024;
    SearchOptions o;
    o.budget = int64_t{1} << 30;
    const SearchResult r = search_plans(base, space, &prof, o);
    ASSERT_FALSE(r.ranked.empty());
    EXPECT_GT(r.candidates, 1);
    for (const PlanCost& c : r.ranked) EXPECT_LE(c.device_bytes, o.budget);
    o.budget = int64_t{2} << 20;
    const SearchResult tight = search_plans(base, space, &prof, o);
    ASSERT_FALSE(tight.ranked.empty());
    for (const PlanCost& c : tight.ranked) EXPECT_LE(c.device_bytes, o.budget);
    std::printf("budget 2 MiB: %lld layouts, first %s\n", static_cast<long long>(tight.candidates),
                strategy_label(tight.ranked.front().strategy).c_str());
}

}  // namespace
}  // namespace zt
