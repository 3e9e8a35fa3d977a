#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "util/error.h"
#include "util/radix_sort.h"
#include "util/random.h"
#include "util/units.h"

namespace zt {

TEST(Units, ParsesSizesWithUnits) {
    EXPECT_EQ(parse_bytes("8GiB", "x"), int64_t{8} << 30);
    EXPECT_EQ(parse_bytes("512MiB", "x"), int64_t{512} << 20);
    EXPECT_EQ(parse_bytes("1.5GB", "x"), int64_t{1500000000});
    EXPECT_EQ(parse_bytes("123", "x"), 123);
    EXPECT_EQ(parse_bytes("2 KiB", "x"), 2048);
}

TEST(Units, RejectsBadSizesNamingTheKey) {
    try {
        parse_bytes("8 parsecs", "memory.budget_per_rank");
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("memory.budget_per_rank"), std::string::npos);
        EXPECT_NE(e.message().find("parsecs"), std::string::npos);
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
    }
    EXPECT_THROW(parse_bytes("abc", "k"), Error);
    EXPECT_THROW(parse_bytes("-5", "k"), Error);
}

TEST(Units, FormatsBytes) {
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(1536), "1.50 KiB");
    EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.00 GiB");
}

TEST(Error, CheckAndAssertKinds) {
    try {
        ZT_CHECK(1 + 1 == 3, "arith: expected ", 3, ", got ", 2);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        EXPECT_EQ(e.message(), "arith: expected 3, got 2");
        EXPECT_NE(std::string(e.what()).find("util_test.cpp"), std::string::npos);
    }
    try {
        ZT_ASSERT(false, "broken");
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    }
}

TEST(Random, CounterBasedValuesDependOnlyOnKey) {
    EXPECT_EQ(uniform01(1, 2, 3), uniform01(1, 2, 3));
    EXPECT_NE(uniform01(1, 2, 3), uniform01(1, 2, 4));
    EXPECT_NE(uniform01(1, 2, 3), uniform01(2, 2, 3));
    EXPECT_NE(hash_string("a.weight"), hash_string("b.weight"));
}

TEST(Random, NormalHasUnitMoments) {
    const int n = 200000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
        double x = normal01(7, 11, i);
        s += x;
        s2 += x * x;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    // Standard error of the mean is 1/sqrt(n) = 0.0022; of the variance sqrt(2/n) = 0.0032.
    EXPECT_NEAR(mean, 0.0, 5 * 0.0023);
    EXPECT_NEAR(var, 1.0, 5 * 0.0032);
}

TEST(RadixSort, SortsStablyOnTheField) {
    // Keys (value << 32 | original position): a stable sort on the value keeps positions in order.
    std::vector<uint64_t> keys, tmp;
    const std::vector<uint32_t> values = {700, 3, 70000, 3, 0, 700, 65536, 1u << 20, 3};
    for (size_t p = 0; p < values.size(); ++p) keys.push_back(uint64_t{values[p]} << 32 | p);
    std::vector<uint64_t> want = keys;
    std::stable_sort(want.begin(), want.end(),
                     [](uint64_t a, uint64_t b) { return a >> 32 < b >> 32; });
    radix_sort_field(keys, 32, bits_below(int64_t{1} << 21), tmp);
    EXPECT_EQ(keys, want);
    EXPECT_EQ(bits_below(1), 0);
    EXPECT_EQ(bits_below(256), 8);
    EXPECT_EQ(bits_below(257), 9);
}

TEST(RadixSort, IndexDistinctGivesSortedDistinctIdsAndEachPositionsIndex) {
    std::vector<int64_t> uniq;
    std::vector<int32_t> index;
    std::vector<uint64_t> keys, tmp;
    const std::vector<int64_t> ids = {5, 9, 5, 0, 123456, 9, 9, 1};
    index_distinct(ids, uniq, index, keys, tmp);
    EXPECT_EQ(uniq, (std::vector<int64_t>{0, 1, 5, 9, 123456}));
    ASSERT_EQ(index.size(), ids.size());
    for (size_t p = 0; p < ids.size(); ++p) EXPECT_EQ(uniq[static_cast<size_t>(index[p])], ids[p]);
    // A negative id sorts last, so one look at the back says whether every id is in [0, R).
    index_distinct(std::vector<int64_t>{4, -2, 4, 7}, uniq, index, keys, tmp);
    EXPECT_EQ(uniq, (std::vector<int64_t>{4, 7, -2}));
    index_distinct(std::vector<int64_t>{}, uniq, index, keys, tmp);
    EXPECT_TRUE(uniq.empty());
    EXPECT_TRUE(index.empty());
}

// Raw 64-bit ids (a dynamic table's) take the wide path: against std::sort and std::unique over
// random ids spread over all 64 bits, repeats and the extremes included.
TEST(RadixSort, IndexDistinctOfWideIdsMatchesASortedUnique) {
    Rng rng(77);
    for (int round = 0; round < 20; ++round) {
        std::vector<int64_t> pool;
        for (int i = 0; i < 1 + round * 7; ++i) pool.push_back(static_cast<int64_t>(rng.next()));
        pool.push_back(std::numeric_limits<int64_t>::min());
        pool.push_back(std::numeric_limits<int64_t>::max());
        pool.push_back(-1);
        pool.push_back(int64_t{1} << 32);
        pool.push_back(3);
        std::vector<int64_t> ids;
        for (int p = 0; p < 50 + round * 31; ++p) ids.push_back(pool[rng.next() % pool.size()]);
        std::vector<int64_t> uniq;
        std::vector<int32_t> index;
        std::vector<uint64_t> keys, tmp;
        index_distinct(ids, uniq, index, keys, tmp);
        std::vector<uint64_t> want(ids.begin(), ids.end());
        std::sort(want.begin(), want.end());
        want.erase(std::unique(want.begin(), want.end()), want.end());
        ASSERT_EQ(uniq.size(), want.size());
        for (size_t u = 0; u < want.size(); ++u) EXPECT_EQ(static_cast<uint64_t>(uniq[u]), want[u]);
        ASSERT_EQ(index.size(), ids.size());
        for (size_t p = 0; p < ids.size(); ++p)
            EXPECT_EQ(uniq[static_cast<size_t>(index[p])], ids[p]);
    }
}

}  // namespace zt
