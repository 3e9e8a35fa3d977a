// Incremental checkpoint blocks of a dynamic table (Note [Incremental table state]): under random
// sightings, row writes, admissions, LRU and LFU evictions and an export taking the eviction log,
// a chain of deltas applied to the first whole save() equals every later save() word for word and
// bit for bit; a delta holds exactly the rows sighted, admitted or moved since the last mark (few
// when few change), so one that left out a changed row would not equal the save; and a delta on
// the wrong base is refused naming the broken chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>

#include "embedding/dynamic_table.h"
#include "util/error.h"

namespace zt {
namespace {

DynamicTableOptions options(int64_t min_count, int64_t unseen, int64_t max_rows, EvictPolicy p) {
    DynamicTableOptions o;
    o.name = "emb_l.1.weight";
    o.dim = 5;  // not a SIMD width
    o.min_count = min_count;
    o.evict_unseen_steps = unseen;
    o.max_rows = max_rows;
    o.policy = p;
    o.unadmitted = UnadmittedRow::kDefaultRow;
    o.init = ParamInit::uniform(0.5f);
    o.optimizer.kind = SparseOptimKind::kAdagrad;
    return o;
}

void expect_equal(const DynamicTable::Saved& a, const DynamicTable::Saved& b, int step) {
    ASSERT_EQ(a.words, b.words) << "step " << step;
    ASSERT_EQ(a.weights, b.weights) << "step " << step;
    ASSERT_EQ(a.state, b.state) << "step " << step;
}

// One step of traffic over `pool_size` ids (skewed): sightings, and a write to a quarter of the
// sighted rows' values and state (as the sparse optimizer does). The distinct rows sighted.
std::set<int64_t> traffic(DynamicTable& t, std::mt19937_64& rng, int64_t pool_size, int draws) {
    std::set<int64_t> sighted;
    for (int mb = 0; mb < 2; ++mb) {
        std::set<uint64_t> batch;
        for (int k = 0; k < draws; ++k) {
            const double u = std::uniform_real_distribution<double>(0, 1)(rng);
            batch.insert(static_cast<uint64_t>(u * u * static_cast<double>(pool_size)) * 977 +
                         (uint64_t{1} << 63));
        }
        for (uint64_t id : batch) {
            const int64_t slot = t.see(id);
            if (slot < 0) continue;
            sighted.insert(static_cast<int64_t>(id));
            if (rng() % 4) continue;
            float* w = t.storage().f32 + slot * t.dim();
            for (int64_t c = 0; c < t.dim(); ++c) w[c] += static_cast<float>(rng() % 100) / 9.0f;
            t.state()[slot * t.state_per_row()] += 0.25f;
        }
    }
    return sighted;
}

struct Case {
    int64_t min_count, unseen, max_rows;
    EvictPolicy policy;
};

class DynamicTableDelta : public ::testing::TestWithParam<Case> {};

TEST_P(DynamicTableDelta, ChainOfDeltasEqualsTheWholeSave) {
    const Case c = GetParam();
    const DynamicTableOptions o = options(c.min_count, c.unseen, c.max_rows, c.policy);
    MemoryPool pool;
    DynamicTable t(pool, o);
    t.track_changes(true);
    std::mt19937_64 rng(static_cast<uint64_t>(c.min_count * 31 + c.unseen * 7 + c.max_rows));
    DynamicTable::Saved chain = t.save();  // the full checkpoint the deltas build on
    t.mark_saved();
    int deltas = 0;
    for (int step = 0; step < 40; ++step) {
        traffic(t, rng, 300 + 20 * step, 60);
        t.end_step();
        if (step == 17) (void)t.take_evicted();  // an export empties the eviction log
        if (step % 3 != 2) continue;             // a checkpoint every 3 steps
        if (step % 12 == 11) {                   // every 4th is full
            chain = t.save();
        } else {
            const DynamicTable::Saved d = t.save_delta();
            ASSERT_TRUE(DynamicTable::is_delta(d.words));
            t.apply_delta(chain, d);
            ++deltas;
        }
        t.mark_saved();
        ASSERT_NO_FATAL_FAILURE(expect_equal(chain, t.save(), step));
        // The chain restores into a fresh table that continues identically.
        DynamicTable fresh(pool, o);
        fresh.restore(chain);
        ASSERT_NO_FATAL_FAILURE(expect_equal(fresh.save(), t.save(), step));
    }
    EXPECT_EQ(deltas, 10);
    EXPECT_GT(t.stats().evictions, c.unseen > 0 || c.max_rows > 0 ? 0 : -1);
}

INSTANTIATE_TEST_SUITE_P(Policies, DynamicTableDelta,
                         ::testing::Values(Case{1, 0, 0, EvictPolicy::kLru},  // grows only
                                           Case{2, 3, 0, EvictPolicy::kLru},  // expiry, pending
                                           Case{1, 0, 90, EvictPolicy::kLru},
                                           Case{2, 4, 70, EvictPolicy::kLfu}));

// Few rows change: the delta holds exactly the rows sighted since the mark (none admitted, moved
// or evicted here), and is that much smaller than a whole save.
TEST(DynamicTableDelta, HoldsExactlyTheRowsThatChanged) {
    const DynamicTableOptions o = options(1, 0, 0, EvictPolicy::kLru);
    MemoryPool pool;
    DynamicTable t(pool, o);
    t.track_changes(true);
    for (uint64_t id = 0; id < 2000; ++id) t.see(id);  // 2000 rows
    t.end_step();
    DynamicTable::Saved base = t.save();
    t.mark_saved();
    const std::vector<uint64_t> touched = {3, 17, 1999, 640, 641};
    for (uint64_t id : touched) {
        const int64_t slot = t.see(id);
        t.storage().f32[slot * o.dim] += 1.0f;  // an update written into the row
    }
    t.end_step();
    const DynamicTable::Saved d = t.save_delta();
    ASSERT_EQ(static_cast<size_t>(d.words[2]), touched.size());  // changed rows
    ASSERT_EQ(d.weights.size(), (touched.size() + 1) * 5);       // and the default row
    const size_t delta_bytes = d.words.size() * 8 + (d.weights.size() + d.state.size()) * 4;
    const DynamicTable::Saved whole = t.save();
    const size_t whole_bytes =
        whole.words.size() * 8 + (whole.weights.size() + whole.state.size()) * 4;
    EXPECT_LT(delta_bytes * 50, whole_bytes);
    const DynamicTable::Saved at_mark = base;
    t.apply_delta(base, d);
    expect_equal(base, whole, 1);
    // A delta that left out one changed row (the last one: id 1999, updated in place) would not
    // give the whole save: the row would keep its value of the mark.
    DynamicTable::Saved cut = d;
    const auto c = static_cast<std::ptrdiff_t>(touched.size());
    cut.words[2] = static_cast<uint64_t>(c - 1);
    for (std::ptrdiff_t k = 3; k >= 0; --k)  // the last entry of slots, ids, steps and counts
        cut.words.erase(cut.words.begin() + 13 + k * c + (c - 1));
    cut.weights.erase(cut.weights.begin() + (c - 1) * 5, cut.weights.begin() + c * 5);
    cut.state.erase(cut.state.begin() + (c - 1) * 5, cut.state.begin() + c * 5);
    DynamicTable::Saved wrong = at_mark;
    t.apply_delta(wrong, cut);
    EXPECT_NE(wrong.weights, whole.weights);
}

TEST(DynamicTableDelta, ADeltaOnTheWrongBaseIsRefused) {
    const DynamicTableOptions o = options(1, 2, 0, EvictPolicy::kLru);
    MemoryPool pool;
    DynamicTable t(pool, o);
    t.track_changes(true);
    for (uint64_t id = 0; id < 50; ++id) t.see(id);
    t.end_step();
    const DynamicTable::Saved first = t.save();
    t.mark_saved();
    for (uint64_t id = 40; id < 60; ++id) t.see(id);
    t.end_step();
    DynamicTable::Saved second = t.save();
    t.mark_saved();
    for (uint64_t id = 55; id < 70; ++id) t.see(id);
    t.end_step();
    const DynamicTable::Saved d = t.save_delta();  // follows `second`, not `first`
    DynamicTable::Saved wrong = first;
    try {
        t.apply_delta(wrong, d);
        FAIL() << "applied to the wrong base";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("the chain of checkpoints is broken"), std::string::npos)
            << e.message();
    }
    t.apply_delta(second, d);
    EXPECT_EQ(second.words, t.save().words);
    // A delta read as a whole block is refused too.
    DynamicTable fresh(pool, o);
    EXPECT_THROW(fresh.restore(d), Error);
}

}  // namespace
}  // namespace zt
