// Dynamic tables (embedding/dynamic_table.h, u64_map.h): the id map against std::unordered_map
// under random inserts and erases past several resizes; the table against a small independent
// reference (std::map rows, a pending map, eviction by sorting every row) under random sightings,
// row writes, admissions and evictions, LRU and LFU, with full 64-bit ids; a save and restore
// mid-run, and a split into two tables by id merged back (resharding), that continue
// identically; initial rows from (seed, name, id) only.
#include "embedding/dynamic_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "util/random.h"

namespace zt {
namespace {

TEST(U64Map, MatchesUnorderedMapPastSeveralResizes) {
    U64Map m;
    std::unordered_map<uint64_t, int64_t> ref;
    std::mt19937_64 rng(7);
    std::vector<uint64_t> keys;
    for (int i = 0; i < 3000; ++i) keys.push_back(rng());  // full 64-bit keys
    keys.push_back(0);
    keys.push_back(~uint64_t{0});
    for (int op = 0; op < 60000; ++op) {
        const uint64_t k = keys[rng() % keys.size()];
        const int what = static_cast<int>(rng() % 3);
        if (what == 0 && !ref.count(k)) {
            m.insert(k, op);
            ref[k] = op;
        } else if (what == 1) {
            EXPECT_EQ(m.erase(k), ref.erase(k) == 1);
        } else if (ref.count(k)) {
            m.set(k, op + 1);
            ref[k] = op + 1;
        }
        if (op % 997 != 0) continue;
        for (uint64_t q : keys) {
            ASSERT_EQ(m.find(q), ref.count(q) ? ref[q] : -1) << op;
        }
    }
    EXPECT_EQ(m.size(), static_cast<int64_t>(ref.size()));
    EXPECT_GE(m.resizes(), 6);  // 16 -> 4096 slots at least
    EXPECT_LE(m.load_factor(), U64Map::kMaxLoad);
}

// The reference: the documented semantics written plainly (Note [Admission], Note [Eviction]).
struct RefTable {
    struct Row {
        std::vector<float> w;
        int64_t last = 0, count = 0;
    };
    DynamicTableOptions o;
    std::map<uint64_t, Row> rows;
    std::map<uint64_t, std::pair<int64_t, int64_t>> pending;  // id -> (count, last)
    std::vector<uint64_t> evicted;
    int64_t step = 0;

    std::vector<float> init(uint64_t id) const {
        std::vector<float> w(static_cast<size_t>(o.dim));
        for (int64_t c = 0; c < o.dim; ++c)
            w[static_cast<size_t>(c)] = param_init_value(
                o.init, o.seed, hash_string(o.name),
                static_cast<int64_t>(id * static_cast<uint64_t>(o.dim) + static_cast<uint64_t>(c)));
        return w;
    }
    bool see(uint64_t id) {
        if (auto it = rows.find(id); it != rows.end()) {
            it->second.last = step;
            ++it->second.count;
            return true;
        }
        auto& [count, last] = pending[id];
        ++count;
        last = step;
        if (count < o.min_count) return false;
        rows[id] = {init(id), step, count};
        pending.erase(id);
        return true;
    }
    void end_step() {
        const int64_t S = o.evict_unseen_steps;
        std::vector<uint64_t> leave;
        for (auto& [id, r] : rows)
            if (S > 0 && step - r.last >= S) leave.push_back(id);
        for (auto it = pending.begin(); it != pending.end();)
            it = S > 0 && step - it->second.second >= S ? pending.erase(it) : std::next(it);
        for (uint64_t id : leave) rows.erase(id);
        if (o.max_rows > 0 && static_cast<int64_t>(rows.size()) > o.max_rows) {
            std::vector<std::tuple<int64_t, int64_t, uint64_t>> order;
            for (auto& [id, r] : rows)
                order.emplace_back(o.policy == EvictPolicy::kLfu ? r.count : 0, r.last, id);
            std::sort(order.begin(), order.end());
            for (size_t i = 0; i < rows.size() - static_cast<size_t>(o.max_rows); ++i)
                leave.push_back(std::get<2>(order[i]));
            for (size_t i = 0; i < order.size() && static_cast<int64_t>(rows.size()) > o.max_rows;
                 ++i)
                rows.erase(std::get<2>(order[i]));
        }
        evicted.insert(evicted.end(), leave.begin(), leave.end());
        ++step;
    }
};

void expect_same(DynamicTable& t, const RefTable& ref, const std::vector<uint64_t>& ids) {
    ASSERT_EQ(t.rows(), static_cast<int64_t>(ref.rows.size()));
    for (uint64_t id : ids) {
        const auto it = ref.rows.find(id);
        const int64_t slot = t.find(id);
        ASSERT_EQ(slot >= 0, it != ref.rows.end()) << id;
        if (slot < 0) continue;
        ASSERT_EQ(t.id_of(slot), id);
        for (int64_t c = 0; c < t.dim(); ++c)
            ASSERT_EQ(t.row(slot)[c], it->second.w[static_cast<size_t>(c)]) << id;
    }
    EXPECT_EQ(t.stats().pending, static_cast<int64_t>(ref.pending.size()));
}

struct Case {
    int64_t min_count, unseen, max_rows;
    EvictPolicy policy;
};

class DynamicTableRef : public ::testing::TestWithParam<Case> {};

TEST_P(DynamicTableRef, MatchesReferenceUnderRandomTraffic) {
    const Case c = GetParam();
    DynamicTableOptions o;
    o.name = "emb_l.2.weight";
    o.dim = 5;  // not a SIMD width
    o.min_count = c.min_count;
    o.evict_unseen_steps = c.unseen;
    o.max_rows = c.max_rows;
    o.policy = c.policy;
    o.init = ParamInit::uniform(0.5f);
    o.seed = 11;
    o.optimizer.kind = SparseOptimKind::kAdagrad;
    MemoryPool pool;
    auto t = std::make_unique<DynamicTable>(pool, o);
    RefTable ref{o, {}, {}, {}, 0};
    std::mt19937_64 rng(static_cast<uint64_t>(c.min_count * 131 + c.unseen * 7 + c.max_rows));
    std::vector<uint64_t> ids;
    for (int i = 0; i < 5000; ++i) ids.push_back(rng() | (uint64_t{1} << 63) * (i % 2));
    std::vector<uint64_t> evicted;
    for (int step = 0; step < 60; ++step) {
        // A skewed draw: the first ids come often, the tail rarely, and the tail grows.
        for (int mb = 0; mb < 3; ++mb) {
            std::vector<uint64_t> batch;
            for (int k = 0; k < 200; ++k) {
                const double u = std::uniform_real_distribution<double>(0, 1)(rng);
                const auto i = static_cast<size_t>(u * u * u * (500 + 75 * step));
                batch.push_back(ids[i]);
            }
            std::sort(batch.begin(), batch.end());
            batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
            for (uint64_t id : batch) {
                const int64_t slot = t->see(id);
                ASSERT_EQ(slot >= 0, ref.see(id)) << id;
                if (slot < 0 || rng() % 4) continue;
                // An update written into the row (as the optimizer does), mirrored.
                std::vector<float> w(static_cast<size_t>(o.dim));
                for (float& x : w) x = static_cast<float>(rng() % 1000) / 7.0f;
                SparseRowStorage s = t->storage();
                s.write_row(slot, w.data());
                ref.rows[id].w = w;
            }
        }
        t->end_step();
        ref.end_step();
        if (step == 30) {  // a checkpoint: restored into a fresh table, which carries on
            const DynamicTable::Saved saved = t->save();
            t = std::make_unique<DynamicTable>(pool, o);
            t->restore(saved);
        }
        if (step == 45) {  // resharded: split by id into two tables, then merged back into one
            const DynamicTable::Saved saved = t->save();
            DynamicTable even(pool, o), odd(pool, o);
            even.merge(
                saved, [](uint64_t id) { return id % 2 == 0; }, true);
            odd.merge(
                saved, [](uint64_t id) { return id % 2 == 1; }, false);
            EXPECT_EQ(even.rows() + odd.rows(), t->rows());
            t = std::make_unique<DynamicTable>(pool, o);
            auto all = [](uint64_t) { return true; };
            t->merge(odd.save(), all, true);
            t->merge(even.save(), all, true);
        }
        ASSERT_NO_FATAL_FAILURE(expect_same(*t, ref, ids)) << "step " << step;
        if (c.max_rows > 0) {
            EXPECT_LE(t->rows(), c.max_rows);
        }
    }
    std::vector<uint64_t> want = ref.evicted;
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    EXPECT_EQ(t->take_evicted(), want);
    EXPECT_TRUE(t->take_evicted().empty());
    const DynamicTableStats st = t->stats();
    EXPECT_EQ(st.admissions - st.evictions, st.rows);
    if (c.unseen > 0 || c.max_rows > 0) {
        EXPECT_GT(st.evictions, 0);
    }
    EXPECT_GT(st.bytes, st.rows * o.dim * 4 * 2);  // rows and their Adagrad state at least
}

INSTANTIATE_TEST_SUITE_P(
    Policies, DynamicTableRef,
    ::testing::Values(Case{1, 0, 0, EvictPolicy::kLru},    // grows only: past several resizes
                      Case{3, 0, 0, EvictPolicy::kLru},    // admission
                      Case{1, 4, 0, EvictPolicy::kLru},    // expiry
                      Case{2, 0, 300, EvictPolicy::kLru},  // the cap, LRU
                      Case{2, 6, 250, EvictPolicy::kLfu}));

TEST(DynamicTable, RowsStartFromSeedNameAndIdOnly) {
    DynamicTableOptions o;
    o.name = "emb_l.0.weight";
    o.dim = 3;
    o.init = ParamInit::uniform(0.1f);
    MemoryPool pool;
    DynamicTable a(pool, o), b(pool, o);
    const uint64_t id = 0x8000000000000123ull;
    for (uint64_t other = 1; other < 100; ++other) a.see(other);  // other rows first in a
    const int64_t sa = a.see(id), sb = b.see(id);
    for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(a.row(sa)[c], b.row(sb)[c]);
        EXPECT_EQ(a.row(sa)[c], param_init_value(o.init, o.seed, hash_string(o.name),
                                                 static_cast<int64_t>(id * 3 + c)));
    }
    o.unadmitted = UnadmittedRow::kDefaultRow;
    o.min_count = 2;
    DynamicTable d(pool, o);
    EXPECT_EQ(d.see(5), -1);
    ASSERT_NE(d.default_row(), nullptr);
    EXPECT_EQ(d.rows(), 0);
    EXPECT_GE(d.see(5), 0);
}

}  // namespace
}  // namespace zt
