#include "offload/param_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "offload/host_store.h"
#include "offload/nvme_store.h"
#include "util/random.h"

namespace zt {
namespace {

// Writes and reads of unaligned element ranges (2-byte elements: ranges start and end inside
// 4 KiB blocks) keep every other element, on the host tier (mapped) and the NVMe tier (partial
// blocks read, patched, written back).
void check_ranges(ParamTier& t) {
    const int64_t n = t.numel();
    std::vector<uint16_t> want(static_cast<size_t>(n), 0);
    for (uint64_t round = 0; round < 40; ++round) {
        const auto lo = static_cast<int64_t>(uniform01(3, round, 0) * static_cast<double>(n));
        const auto len = std::min<int64_t>(
            n - lo, static_cast<int64_t>(uniform01(3, round, 1) * 5000.0));
        std::vector<uint16_t> src(static_cast<size_t>(len));
        for (int64_t i = 0; i < len; ++i)
            src[static_cast<size_t>(i)] = static_cast<uint16_t>(round * 1000 + static_cast<uint64_t>(i));
        t.write(lo, len, src.data());
        std::copy(src.begin(), src.end(), want.begin() + lo);
        // A range that straddles the write's ends reads back the merged contents.
        const int64_t rlo = std::max<int64_t>(0, lo - 777), rhi = std::min(n, lo + len + 1234);
        auto f = t.fetch(rlo, rhi - rlo);
        t.wait(*f);
        ASSERT_EQ(std::memcmp(f->data(), want.data() + rlo,
                              static_cast<size_t>(rhi - rlo) * sizeof(uint16_t)),
                  0)
            << "round " << round << ": [" << rlo << ", " << rhi << ")";
    }
    auto all = t.fetch(0, n);
    t.wait(*all);
    EXPECT_EQ(std::memcmp(all->data(), want.data(), want.size() * sizeof(uint16_t)), 0);
    auto none = t.fetch(n, 0);  // an empty slice: nothing to read
    t.wait(*none);
}

TEST(ParamTier, UnalignedRangesOnTheHostTier) {
    const int64_t n = 20011;
    ParamTier t(std::make_unique<HostStore>(ParamTier::capacity_for(n, DType::kBF16)), n,
                DType::kBF16);
    EXPECT_STREQ(t.tier(), "cpu");
    check_ranges(t);
}

TEST(ParamTier, UnalignedRangesOnTheNvmeTier) {
    char name[] = "/tmp/zt_param_tier_XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    {
        const int64_t n = 20011;
        NvmeStoreOptions o;
        o.dir = name;
        o.name = "params-test";
        o.bytes = ParamTier::capacity_for(n, DType::kBF16);
        ParamTier t(std::make_unique<NvmeStore>(o), n, DType::kBF16);
        EXPECT_STREQ(t.tier(), "nvme");
        check_ranges(t);
        EXPECT_GT(t.stats().bytes_written, 0u);
    }
    std::filesystem::remove_all(name);
}

}  // namespace
}  // namespace zt
