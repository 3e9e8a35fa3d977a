// Dynamic tables on a tier (embedding/dynamic_rows.h, row_tier_grow.cpp, docs/embedding-tier.md)
// against the same table in memory: random sightings, admissions, evictions (expiry and the cap,
// LRU and LFU) and sparse updates, growth past several doublings, a cache of a few rows (that
// grows only to hold a step's rows), on host memory and on swap files: every fetched row,
// evaluation read, whole save and incremental save is the in-memory table's, bit for bit and slot
// for slot; a restore and a resharding merge carry on the same. The growing store on its own too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include "embedding/dynamic_table.h"
#include "offload/host_store.h"
#include "offload/segmented_store.h"
#include "util/error.h"

namespace zt {
namespace {

struct Case {
    std::string device;
    RowCachePolicy policy;
    int64_t min_count, unseen, max_rows;
    SparseOptimKind optim;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
    const Case& c = i.param;
    return str_cat(c.device, "_", row_cache_policy_name(c.policy), "_", c.min_count, "_", c.unseen,
                   "_", c.max_rows, "_", sparse_optim_name(c.optim));
}

void expect_same_save(const DynamicTable::Saved& a, const DynamicTable::Saved& b,
                      const std::string& what) {
    ASSERT_EQ(a.words, b.words) << what;
    ASSERT_EQ(a.weights, b.weights) << what;  // exact: the cache holds f32 copies
    ASSERT_EQ(a.state, b.state) << what;
}

class DynamicTier : public ::testing::TestWithParam<Case> {};

TEST_P(DynamicTier, TrainsBitForBitLikeTheTableInMemory) {
    const Case c = GetParam();
    const std::string dir =
        (std::filesystem::temp_directory_path() / str_cat("zt-dyntier-", ::getpid())).string();
    std::filesystem::create_directories(dir);
    DynamicTableOptions o;
    o.name = "emb_l.1.weight";
    o.dim = 5;  // not a SIMD width
    o.min_count = c.min_count;
    o.evict_unseen_steps = c.unseen;
    o.max_rows = c.max_rows;
    o.policy = EvictPolicy::kLru;
    o.init = ParamInit::uniform(0.5f);
    o.seed = 3;
    o.optimizer.kind = c.optim;
    DynamicTableOptions tiered = o;
    tiered.tier.device = c.device;
    tiered.tier.nvme_path = dir;
    tiered.tier.file_name = str_cat("dyntier-test-", case_name({c, 0}));
    tiered.tier.cache_ratio = 0.02;  // 2 rows of the first 64 slots: every fetch misses
    tiered.tier.policy = c.policy;
    tiered.tier.queue_depth = 16;
    const SparseRowOptimizer opt(o.optimizer);
    MemoryPool pool;
    auto mem = std::make_unique<DynamicTable>(pool, o);
    auto tier = std::make_unique<DynamicTable>(pool, tiered);
    mem->track_changes(true);
    tier->track_changes(true);
    std::mt19937_64 rng(static_cast<uint64_t>(c.min_count * 131 + c.unseen * 7 + c.max_rows));
    std::vector<uint64_t> ids;
    for (int i = 0; i < 3000; ++i) ids.push_back(rng() | (uint64_t{1} << 63) * (i % 2));
    std::uniform_real_distribution<float> g(-1, 1);
    auto draw = [&](int step) {
        std::vector<uint64_t> batch;
        for (int k = 0; k < 70; ++k) {
            const double u = std::uniform_real_distribution<double>(0, 1)(rng);
            batch.push_back(ids[static_cast<size_t>(u * u * (300 + 60 * step))]);
        }
        std::sort(batch.begin(), batch.end());
        batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
        return batch;
    };
    const int64_t d = o.dim;
    std::vector<uint64_t> next = draw(0);
    for (int step = 0; step < 40; ++step) {
        std::set<int64_t> used;  // slots fetched in this step
        for (int mb = 0; mb < 3; ++mb) {
            const std::vector<uint64_t> batch = next;
            next = draw(step);
            std::vector<int64_t> slots;
            for (uint64_t id : batch) {
                const int64_t s = mem->see(id);
                ASSERT_EQ(tier->see(id), s) << id;
                if (s >= 0) slots.push_back(s);
            }
            if (rng() % 3 == 0 && !slots.empty()) slots.push_back(slots[0]);  // a repeat
            std::vector<int64_t> hm(slots.size()), ht(slots.size());
            mem->fetch(slots, hm.data());
            tier->fetch(slots, ht.data());
            for (size_t i = 0; i < slots.size(); ++i)
                for (int64_t k = 0; k < d; ++k)
                    ASSERT_EQ(tier->fetched_row(ht[i])[k], mem->fetched_row(hm[i])[k])
                        << "step " << step << " slot " << slots[i];
            used.insert(slots.begin(), slots.end());
            // Read ahead: the next batch's rows that exist (their pages, into images).
            std::vector<int64_t> ahead;
            for (uint64_t id : next)
                if (const int64_t s = tier->find(id); s >= 0) ahead.push_back(s);
            if (mb != 1) tier->prefetch(ahead);
        }
        // Evaluation reads (found, not sighted) leave the tier's cache as it is.
        std::vector<int64_t> some;
        for (int k = 0; k < 40; ++k)
            if (const int64_t s = mem->find(ids[rng() % 600]); s >= 0) some.push_back(s);
        std::vector<float> rm(some.size() * static_cast<size_t>(d)), rt(rm.size());
        mem->read_rows(some, rm.data());
        tier->read_rows(some, rt.data());
        ASSERT_EQ(rt, rm) << "step " << step;
        // The update of most rows used, in ascending id order (DynamicTables::step's).
        std::vector<int64_t> upd;
        for (int64_t s : used)
            if (rng() % 5) upd.push_back(s);
        std::sort(upd.begin(), upd.end(),
                  [&](int64_t a, int64_t b) { return mem->id_of(a) < mem->id_of(b); });
        std::vector<float> grads(upd.size() * static_cast<size_t>(d));
        for (float& x : grads) x = g(rng);
        mem->update(opt, upd, grads.data(), 0.1f, step + 1);
        tier->update(opt, upd, grads.data(), 0.1f, step + 1);
        mem->end_step();
        tier->end_step();
        if (step % 4 == 3) {  // an incremental checkpoint, then a whole one
            ASSERT_NO_FATAL_FAILURE(
                expect_same_save(tier->save_delta(), mem->save_delta(), str_cat("delta ", step)));
            mem->mark_saved();
            tier->mark_saved();
        }
        ASSERT_NO_FATAL_FAILURE(
            expect_same_save(tier->save(), mem->save(), str_cat("step ", step)));
        if (step == 20) {  // a resume: the tiered table restored from the in-memory one's save
            const DynamicTable::Saved s = mem->save();
            tier.reset();  // its swap files go before the next one's come
            tier = std::make_unique<DynamicTable>(pool, tiered);
            tier->restore(s);
            tier->track_changes(true);
            mem->track_changes(true);
        }
        if (step == 30) {  // resharded: split by id over two tiered tables, merged back into one
            const DynamicTable::Saved s = tier->save();
            DynamicTableOptions a = tiered, b = tiered;
            a.tier.file_name += "-a";
            b.tier.file_name += "-b";
            DynamicTable even(pool, a), odd(pool, b);
            even.merge(
                s, [](uint64_t id) { return id % 2 == 0; }, true);
            odd.merge(
                s, [](uint64_t id) { return id % 2 == 1; }, false);
            EXPECT_EQ(even.rows() + odd.rows(), tier->rows());
            // Merged in one process's order (odd then even) into both tables.
            auto all = [](uint64_t) { return true; };
            const DynamicTable::Saved so = odd.save(), se = even.save();
            tier.reset();
            tier = std::make_unique<DynamicTable>(pool, tiered);
            mem = std::make_unique<DynamicTable>(pool, o);
            for (DynamicTable* t : {tier.get(), mem.get()}) {
                t->merge(so, all, true);
                t->merge(se, all, true);
                t->track_changes(true);
            }
            ASSERT_NO_FATAL_FAILURE(expect_same_save(tier->save(), mem->save(), "merged"));
        }
    }
    const DynamicTableStats st = mem->stats();
    EXPECT_GT(st.admissions, 600);  // past several doublings of the first 64 slots
    EXPECT_GT(mem->rows(), 250);
    if (c.unseen > 0 || c.max_rows > 0) {
        EXPECT_GT(st.evictions, 0);
    }
    const RowTierStats ts = tier->tier()->stats();
    EXPECT_GT(ts.misses, 0);
    EXPECT_GT(ts.evictions, 0);
    EXPECT_GT(ts.writebacks, 0);
    EXPECT_GT(ts.fresh, 0);
    if (c.unseen > 0 || c.max_rows > 0) {
        EXPECT_GT(ts.moved, 0);
    }
    EXPECT_GT(ts.prefetch_hits, 0);
    EXPECT_LT(tier->tier()->capacity(), tier->rows());  // the cache stayed a part of the table
    EXPECT_EQ(mem->take_evicted(), tier->take_evicted());
    tier.reset();
    for (const auto& e : std::filesystem::directory_iterator(dir))  // the swap files went too
        EXPECT_EQ(e.path().filename().string().find("zerotrain-swap-"), std::string::npos)
            << e.path();
    std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Tiers, DynamicTier,
    ::testing::Values(Case{"cpu", RowCachePolicy::kLru, 1, 0, 0, SparseOptimKind::kAdagrad},
                      Case{"cpu", RowCachePolicy::kLfu, 2, 5, 0, SparseOptimKind::kAdam},
                      Case{"nvme", RowCachePolicy::kLru, 2, 0, 400, SparseOptimKind::kSgd},
                      Case{"nvme", RowCachePolicy::kLfu, 1, 6, 350,
                           SparseOptimKind::kRowwiseAdagrad}),
    case_name);

TEST(SegmentedStore, GrowsBySegmentsAndSplitsRequestsAtTheirBoundaries) {
    std::vector<uint64_t> made;
    SegmentedStore s(
        [&](uint64_t bytes, int) {
            made.push_back(bytes);
            return std::make_unique<HostStore>(bytes);
        },
        3 * kStoreAlign);
    s.grow(2 * kStoreAlign);  // no smaller
    s.grow(5 * kStoreAlign + 1);
    EXPECT_EQ(made, (std::vector<uint64_t>{3 * kStoreAlign, 3 * kStoreAlign}));
    EXPECT_EQ(s.capacity(), 6 * kStoreAlign);
    EXPECT_EQ(s.segments(), 2);
    EXPECT_STREQ(s.tier(), "cpu");
    AlignedBuffer in = alloc_aligned_buffer(4 * kStoreAlign, "test");
    AlignedBuffer out = alloc_aligned_buffer(4 * kStoreAlign, "test");
    for (size_t i = 0; i < 4 * kStoreAlign; ++i) in.get()[i] = static_cast<std::byte>(i * 7 + 1);
    s.wait(s.write(kStoreAlign, in.get(), 4 * kStoreAlign));  // pages 1-4: across the boundary
    s.wait(s.read(kStoreAlign, out.get(), 4 * kStoreAlign));
    EXPECT_EQ(std::memcmp(in.get(), out.get(), 4 * kStoreAlign), 0);
    EXPECT_EQ(s.stats().bytes_written, 4 * kStoreAlign);
    EXPECT_EQ(s.stats().bytes_read, 4 * kStoreAlign);
    EXPECT_EQ(static_cast<std::byte*>(s.mapped(4 * kStoreAlign))[0], in.get()[3 * kStoreAlign]);
}

}  // namespace
}  // namespace zt
