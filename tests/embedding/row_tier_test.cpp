// RowTier against a plain array of rows: random fetches, updates through the cache, range reads
// and writes, on host memory and on a swap file, LRU and LFU, with caches far smaller
// than the rows (every fetch evicts and writes back).
#include "embedding/row_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "embedding/sharded_tables.h"
#include "offload/host_store.h"
#include "offload/nvme_store.h"
#include "util/error.h"

namespace zt {
namespace {

struct Reference {
    int64_t cols, sc;
    std::vector<float> w, st;
};

std::unique_ptr<Store> make_test_store(bool nvme, uint64_t bytes, const std::string& name) {
    if (!nvme) return std::make_unique<HostStore>(bytes);
    NvmeStoreOptions o;
    o.dir = std::filesystem::temp_directory_path().string();
    o.name = name;
    o.bytes = bytes;
    o.queue_depth = 16;
    return std::make_unique<NvmeStore>(o);
}

void check_equal(RowTier& tier, const Reference& ref, int64_t rows) {
    std::vector<float> w(static_cast<size_t>(rows * ref.cols)),
        st(static_cast<size_t>(rows * ref.sc));
    tier.read_range(0, rows, w.data(), ref.sc > 0 ? st.data() : nullptr);
    ASSERT_EQ(w, ref.w);
    if (ref.sc > 0) {
        ASSERT_EQ(st, ref.st);
    }
}

struct Case {
    bool nvme;
    RowCachePolicy policy;
    int64_t cols, sc;
};

class RowTierRandom : public ::testing::TestWithParam<Case> {};

TEST_P(RowTierRandom, FollowsAPlainArray) {
    const Case c = GetParam();
    const int64_t rows = 1000, capacity = 40;
    MemoryPool pool;
    RowTier tier(pool, "t", rows, c.cols, c.sc, capacity, c.policy,
                 make_test_store(c.nvme, RowTier::store_bytes(rows, c.cols, c.sc),
                                 str_cat("rowtier-", ::getpid(), "-", c.cols, c.sc, c.nvme,
                                         static_cast<int>(c.policy))));
    Reference ref{c.cols, c.sc, {}, {}};
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    ref.w.resize(static_cast<size_t>(rows * c.cols));
    ref.st.resize(static_cast<size_t>(rows * c.sc));
    for (float& x : ref.w) x = u(rng);
    for (float& x : ref.st) x = u(rng);
    // Filled in three uneven pieces (page-straddling ranges take the read-modify-write path).
    const int64_t cut1 = 77, cut2 = 513;
    tier.write_range(0, cut1, ref.w.data(), ref.st.data());
    tier.write_range(cut1, cut2 - cut1, ref.w.data() + cut1 * c.cols, ref.st.data() + cut1 * c.sc);
    tier.write_range(cut2, rows - cut2, ref.w.data() + cut2 * c.cols, ref.st.data() + cut2 * c.sc);
    check_equal(tier, ref, rows);
    // Skewed ids: a hot set and a long tail, repeats within a fetch.
    std::uniform_int_distribution<int64_t> hot(0, 20), any(0, rows - 1), len(1, 30);
    auto draw = [&] {
        std::vector<int64_t> a(static_cast<size_t>(len(rng)));
        for (int64_t& r : a) r = rng() % 3 == 0 ? any(rng) : hot(rng);
        return a;
    };
    std::vector<int64_t> ask = draw();
    int64_t asked = 0;  // rows asked for, repeats included: each is a hit or a miss
    for (int step = 0; step < 200; ++step) {
        std::vector<int64_t> slots(ask.size());
        tier.fetch(ask, slots.data());
        asked += static_cast<int64_t>(ask.size());
        // Read ahead (Note [Row prefetch]): mostly the next fetch's rows, sometimes others, and
        // sometimes nothing; between the prefetch and that fetch this step's rows change and
        // are evicted and written back.
        const std::vector<int64_t> next = draw();
        if (step % 5 == 3)
            tier.prefetch(draw());
        else if (step % 5 != 4)
            tier.prefetch(next);
        SparseRowStorage cache = tier.cache_storage();
        float* cst = tier.cache_state();
        std::vector<int64_t> seen;
        for (size_t i = 0; i < ask.size(); ++i) {
            const int64_t r = ask[i], s = slots[i];
            for (int64_t k = 0; k < c.cols; ++k)
                ASSERT_EQ(cache.f32[s * c.cols + k], ref.w[static_cast<size_t>(r * c.cols + k)])
                    << "step " << step << " row " << r;
            for (int64_t k = 0; k < c.sc; ++k)
                ASSERT_EQ(cst[s * c.sc + k], ref.st[static_cast<size_t>(r * c.sc + k)]);
            if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
            seen.push_back(r);
            if (rng() % 2) continue;  // only some rows change
            const float d = u(rng);
            for (int64_t k = 0; k < c.cols; ++k) {
                cache.f32[s * c.cols + k] += d;
                ref.w[static_cast<size_t>(r * c.cols + k)] += d;
            }
            for (int64_t k = 0; k < c.sc; ++k) {
                cst[s * c.sc + k] -= d;
                ref.st[static_cast<size_t>(r * c.sc + k)] -= d;
            }
            tier.mark_dirty(std::span<const int64_t>(&slots[i], 1));
        }
        tier.end_step();
        ask = next;
        if (step % 50 == 49) {
            check_equal(tier, ref, rows);
        }
        if (step == 120) {  // weights only over a range: state untouched, cached rows replaced
            std::vector<float> nw(static_cast<size_t>(100 * c.cols));
            for (float& x : nw) x = u(rng);
            tier.write_range(5, 100, nw.data(), nullptr);
            std::copy(nw.begin(), nw.end(), ref.w.begin() + 5 * c.cols);
        }
    }
    check_equal(tier, ref, rows);
    const RowTierStats s = tier.stats();
    EXPECT_EQ(s.lookups(), asked);
    EXPECT_GT(s.hits, 0);
    EXPECT_GT(s.misses, 0);
    EXPECT_GT(s.writebacks, 0);
    EXPECT_GT(s.prefetch_hits, 0);
    EXPECT_LE(tier.resident(), capacity);
}

INSTANTIATE_TEST_SUITE_P(Tiers, RowTierRandom,
                         ::testing::Values(Case{false, RowCachePolicy::kLru, 16, 16},
                                           Case{false, RowCachePolicy::kLfu, 16, 1},
                                           Case{true, RowCachePolicy::kLru, 16, 32},
                                           Case{true, RowCachePolicy::kLfu, 3, 0},
                                           Case{false, RowCachePolicy::kLru, 1500, 0}));

TEST(RowTier, RecordsPackIntoPages) {
    EXPECT_EQ(RowTier::rows_per_page(16, 1), 4096 / 68);
    EXPECT_EQ(RowTier::page_bytes(16, 1), 4096);
    EXPECT_EQ(RowTier::rows_per_page(1500, 0), 1);
    EXPECT_EQ(RowTier::page_bytes(1500, 0), 8192);
    EXPECT_EQ(RowTier::store_bytes(1000, 16, 16), ((1000 + 31) / 32) * 4096u);
}

TEST(RowTier, RefusesAStepLargerThanTheCache) {
    MemoryPool pool;
    RowTier tier(pool, "t", 100, 4, 0, 3, RowCachePolicy::kLru,
                 std::make_unique<HostStore>(RowTier::store_bytes(100, 4, 0)));
    std::vector<float> zeros(400);
    tier.write_range(0, 100, zeros.data(), nullptr);
    std::vector<int64_t> slots(4);
    const std::vector<int64_t> a = {1, 2}, b = {3, 4};
    tier.fetch(a, slots.data());
    try {
        tier.fetch(b, slots.data());  // 1 and 2 still pinned: 4 rows for 3 slots
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cache_ratio"), std::string::npos) << e.what();
    }
}

TEST(RowTier, LruEvictsTheLeastRecentlyUsedAndLfuTheLeastUsed) {
    for (RowCachePolicy p : {RowCachePolicy::kLru, RowCachePolicy::kLfu}) {
        MemoryPool pool;
        RowTier tier(pool, "t", 10, 2, 0, 3, p,
                     std::make_unique<HostStore>(RowTier::store_bytes(10, 2, 0)));
        std::vector<float> zeros(20);
        tier.write_range(0, 10, zeros.data(), nullptr);
        int64_t slot = 0;
        auto ask = [&](int64_t r) {
            tier.fetch(std::span<const int64_t>(&r, 1), &slot);
            tier.end_step();
        };
        ask(0);
        ask(0);
        ask(0);
        ask(1);
        ask(2);  // cache: 0 (3 uses, oldest), 1, 2
        ask(3);  // LRU drops 0; LFU drops 1 (fewest uses, least recent)
        const int64_t before = tier.stats().misses;
        ask(0);
        EXPECT_EQ(tier.stats().misses - before, p == RowCachePolicy::kLru ? 1 : 0)
            << row_cache_policy_name(p);
    }
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

TEST(SplitCacheBytes, SmallShardsWholeThenTheRestByBytes) {
    // 100 bytes over shards of 10, 1000 and 3000: the small one whole (10), the others share 90
    // by size.
    const std::vector<double> r = split_cache_bytes({1000, 10, 3000}, 100);
    EXPECT_DOUBLE_EQ(r[1], 1.0);
    EXPECT_DOUBLE_EQ(r[0], 90.0 / 4000);
    EXPECT_DOUBLE_EQ(r[2], 90.0 / 4000);
    const std::vector<double> all = split_cache_bytes({10, 20}, 1000);  // everything fits
    EXPECT_DOUBLE_EQ(all[0], 1.0);
    EXPECT_DOUBLE_EQ(all[1], 1.0);
}

}  // namespace
}  // namespace zt
