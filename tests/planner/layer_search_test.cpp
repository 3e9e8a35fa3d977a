// The per-layer search (planner/layer_search.h): the dynamic program against exhaustive
// enumeration, per-block lists of one choice against the named policies they equal, and the
// list chosen for a layout against every list of a small model.
#include "planner/layer_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "planner/search.h"
#include "planner_test_util.h"
#include "util/random.h"

namespace zt {
namespace {

using testing::round_profile;
using testing::tiny_gpt_base;

struct Best {
    double seconds = std::numeric_limits<double>::infinity();
    bool found = false;
};

// Whether a choice fits: each layer's peak on the bytes before it, and the tail on them all.
bool fits(const std::vector<std::vector<LayerOption>>& layers, const std::vector<size_t>& at,
          double capacity, double tail) {
    double bytes = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
        if (bytes + layers[l][at[l]].peak > capacity) return false;
        bytes += layers[l][at[l]].bytes;
    }
    return bytes + tail <= capacity;
}

// Every choice of one option per layer: the least seconds among those that fit.
Best exhaustive(const std::vector<std::vector<LayerOption>>& layers, double capacity, double tail) {
    Best b;
    std::vector<size_t> at(layers.size(), 0);
    for (;;) {
        double sec = 0;
        for (size_t l = 0; l < layers.size(); ++l) sec += layers[l][at[l]].seconds;
        if (fits(layers, at, capacity, tail) && sec < b.seconds) b = {sec, true};
        size_t l = 0;
        while (l < layers.size() && ++at[l] == layers[l].size()) at[l++] = 0;
        if (l == layers.size()) break;
    }
    return b;
}

TEST(LayerSearch, DynamicProgramEqualsExhaustiveEnumeration) {
    // Whole-number bytes and one byte a step: the rounding is exact, so the program's optimum
    // is the enumeration's.
    for (uint64_t trial = 0; trial < 300; ++trial) {
        const int n = 1 + static_cast<int>(uniform01(3, trial, 0) * 6);
        std::vector<std::vector<LayerOption>> layers(static_cast<size_t>(n));
        uint64_t k = 1;
        for (auto& opts : layers) {
            const int count = 1 + static_cast<int>(uniform01(3, trial, k++) * 3);
            for (int o = 0; o < count; ++o)
                opts.push_back({std::floor(uniform01(3, trial, k++) * 10),
                                std::floor(uniform01(3, trial, k++) * 100) / 7,
                                // half the trials with peaks (a backward on top of the sum)
                                trial % 2 ? std::floor(uniform01(3, trial, k++) * 12) : 0});
        }
        const int capacity = static_cast<int>(uniform01(3, trial, k++) * 8 * n);
        const double tail = trial % 2 ? std::floor(uniform01(3, trial, k++) * 6) : 0;
        const Best want = exhaustive(layers, capacity, tail);
        const auto got = cheapest_within(layers, capacity, std::max(capacity, 1), tail);
        ASSERT_EQ(got.has_value(), want.found) << "trial " << trial;
        if (!got) continue;
        std::vector<size_t> at;
        double sec = 0;
        for (size_t l = 0; l < layers.size(); ++l) {
            at.push_back(static_cast<size_t>((*got)[l]));
            sec += layers[l][at.back()].seconds;
        }
        EXPECT_TRUE(fits(layers, at, capacity, tail)) << "trial " << trial;
        EXPECT_NEAR(sec, want.seconds, 1e-9) << "trial " << trial;
    }
}

TEST(LayerSearch, RoundedBytesNeverPassTheCapacity) {
    for (uint64_t trial = 0; trial < 100; ++trial) {
        std::vector<std::vector<LayerOption>> layers(5);
        uint64_t k = 1;
        for (auto& opts : layers)
            for (int o = 0; o < 3; ++o)
                opts.push_back({uniform01(4, trial, k++) * 1e6, uniform01(4, trial, k++)});
        const double capacity = uniform01(4, trial, k++) * 3e6;
        const auto got = cheapest_within(layers, capacity, 64);
        if (!got) continue;
        double bytes = 0;
        for (size_t l = 0; l < layers.size(); ++l)
            bytes += layers[l][static_cast<size_t>((*got)[l])].bytes;
        EXPECT_LE(bytes, capacity) << "trial " << trial;
    }
    EXPECT_FALSE(cheapest_within({{{5, 0}}}, 4).has_value());
    EXPECT_FALSE(cheapest_within({{{0, 0}}}, -1).has_value());
}

Strategy listed(Strategy s, BlockRecompute r, int64_t n) {
    s.checkpoint = "blocks";
    s.blocks.assign(static_cast<size_t>(n), r);
    return s;
}

// A list of one choice is the named policy it equals, in memory (every stage) and in time.
TEST(LayerSearch, ListsOfOneChoiceCostLikeTheNamedPolicies) {
    const PlanBase base = tiny_gpt_base(16);
    const MachineProfile prof = round_profile();
    const std::pair<BlockRecompute, const char*> same[] = {
        {BlockRecompute::kNone, "none"},
        {BlockRecompute::kSelective, "selective"},
        {BlockRecompute::kFull, "every"}};
    for (int pp : {1, 2})
        for (const auto& [r, name] : same) {
            Strategy s;
            s.pp = pp;
            s.micro_batch = 2;
            s.grad_accum = 8;
            s.checkpoint = name;
            const Strategy l = listed(s, r, 4);
            const PlanCost a = plan_cost(base, s, &prof), b = plan_cost(base, l, &prof);
            EXPECT_EQ(a.memory.activations.saved, b.memory.activations.saved) << name << pp;
            EXPECT_EQ(a.memory.activations.peak, b.memory.activations.peak) << name << pp;
            EXPECT_EQ(a.device_bytes, b.device_bytes) << name << " pp " << pp;
            for (int k = 0; k < pp; ++k)
                EXPECT_EQ(plan_peak_bytes(plan_memory_of_stage(base, s, k)),
                          plan_peak_bytes(plan_memory_of_stage(base, l, k)))
                    << name << " stage " << k;
            EXPECT_NEAR(a.time.recompute, b.time.recompute, 1e-12 + 1e-9 * a.time.recompute)
                << name << " pp " << pp;
            EXPECT_NEAR(a.time.total(), b.time.total(), 1e-9 * a.time.total()) << name;
        }
}

// A 5-block model at micro-batch 8 with the device bytes of keeping every activation (none)
// and of recomputing every block whole (full): budgets between them need mixed lists.
struct Bracket {
    PlanBase base;
    MachineProfile prof;
    Strategy s;
    int64_t none = 0;
    int64_t full = 0;
};

Bracket five_block_bracket() {
    Bracket k{tiny_gpt_base(8, 5), round_profile(), {}, 0, 0};
    k.s.micro_batch = 8;
    k.none = plan_cost(k.base, k.s, &k.prof).device_bytes;
    k.full = plan_cost(k.base, listed(k.s, BlockRecompute::kFull, 5), &k.prof).device_bytes;
    return k;
}

// Every list of a 5-block model: the least recompute among those that fit, which the search's
// list must equal.
TEST(LayerSearch, ChosenListIsTheFastestOfEveryListThatFits) {
    const Bracket k = five_block_bracket();
    const PlanBase& base = k.base;
    const MachineProfile& prof = k.prof;
    const Strategy& s = k.s;
    const int64_t none = k.none;
    const int64_t full = k.full;
    ASSERT_LT(full, none);
    int mixed = 0;
    for (int step = 1; step < 10; ++step) {
        const int64_t budget = full + (none - full) * step / 10;
        double best = std::numeric_limits<double>::infinity();
        for (int code = 0; code < 243; ++code) {
            Strategy t = s;
            t.checkpoint = "blocks";
            for (int l = 0, c = code; l < 5; ++l, c /= 3)
                t.blocks.push_back(kBlockRecomputes[c % 3]);
            const PlanCost pc = plan_cost(base, t, &prof);
            if (pc.device_bytes <= budget) best = std::min(best, pc.time.recompute);
        }
        const std::optional<Strategy> got = per_block_layout(base, s, budget, &prof);
        if (!got) {
            // Only a list of one choice is as fast (a named policy covers it).
            bool uniform_best = false;
            for (BlockRecompute r : kBlockRecomputes) {
                const PlanCost pc = plan_cost(base, listed(s, r, 5), &prof);
                uniform_best |= pc.device_bytes <= budget && pc.time.recompute <= best * (1 + 1e-9);
            }
            EXPECT_TRUE(uniform_best) << "budget " << budget;
            continue;
        }
        ++mixed;
        const PlanCost pc = plan_cost(base, *got, &prof);
        EXPECT_LE(pc.device_bytes, budget) << strategy_label(*got);
        EXPECT_NEAR(pc.time.recompute, best, 1e-9 * best) << strategy_label(*got);
    }
    EXPECT_GE(mixed, 3);  // budgets between the named policies' need mixes
}

// A 1F1B pipeline's first stage holds more micro-batches in flight: it recomputes more blocks.
TEST(LayerSearch, EarlierPipelineStagesRecomputeMore) {
    const PlanBase base = tiny_gpt_base(16, 8);
    const MachineProfile prof = round_profile();
    Strategy s;
    s.pp = 2;
    s.micro_batch = 2;
    s.grad_accum = 8;
    s.schedule = PipeSchedule::kOneFOneB;
    const Strategy full = listed(s, BlockRecompute::kFull, 8);
    const int64_t low = std::max(plan_peak_bytes(plan_memory_of_stage(base, full, 0)),
                                 plan_peak_bytes(plan_memory_of_stage(base, full, 1)));
    const int64_t high = plan_cost(base, s, &prof).device_bytes;
    const std::optional<Strategy> got = per_block_layout(base, s, (low + high) / 2, &prof);
    ASSERT_TRUE(got.has_value());
    auto kept = [&](int k) {
        int n = 0;
        for (int64_t l : stage_blocks(base, *got, k))
            n += got->blocks[static_cast<size_t>(l)] != BlockRecompute::kFull;
        return n;
    };
    EXPECT_LT(kept(0), kept(1)) << strategy_label(*got);
    for (int k = 0; k < 2; ++k)
        EXPECT_LE(plan_peak_bytes(plan_memory_of_stage(base, *got, k)), (low + high) / 2);
}

TEST(LayerSearch, SearchRanksTheListAboveEveryNamedPolicyThatFits) {
    const Bracket k = five_block_bracket();
    SearchSpace space;
    space.ranks = 1;
    space.offload = {"none"};
    SearchOptions opt;
    opt.budget = k.full + (k.none - k.full) * 6 / 10;
    opt.top = 0;
    const SearchResult r = search_plans(k.base, space, &k.prof, opt);
    // Among the layouts of whole micro-batches (smaller ones may fit without recompute), the
    // list comes first, before "every" (which fits too) and "selective" where it fits.
    std::vector<const PlanCost*> whole;
    for (const PlanCost& c : r.ranked)
        if (c.strategy.micro_batch == 8) whole.push_back(&c);
    ASSERT_GE(whole.size(), 2u);
    EXPECT_EQ(whole.front()->strategy.checkpoint, "blocks")
        << strategy_label(whole.front()->strategy);
    bool every = false;
    for (const PlanCost* c : whole) {
        every |= c->strategy.checkpoint == "every";
        if (c == whole.front()) continue;
        EXPECT_LT(whole.front()->time.total(), c->time.total()) << strategy_label(c->strategy);
    }
    EXPECT_TRUE(every);
    space.per_block = false;
    for (const PlanCost& c : search_plans(k.base, space, &k.prof, opt).ranked)
        EXPECT_NE(c.strategy.checkpoint, "blocks");
}

}  // namespace
}  // namespace zt
