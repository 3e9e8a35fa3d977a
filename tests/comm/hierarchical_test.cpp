// Hierarchical collectives (comm/hierarchical.h) on the local backend: 4 ranks on two hosts of 2
// (and 6 on three hosts of 2 and two of 3): all_reduce, reduce_scatter and all_gather give, on
// every rank, the sums in the hierarchy's fixed order ((x0 + x1) + (x2 + x3)) computed here, for
// uneven and zero counts, f32 and bf16; what crosses hosts is one host's share; layouts that are
// not one block of ranks per host are refused with the reason.
#include "comm/hierarchical.h"

#include <gtest/gtest.h>

#include <mutex>

#include "comm/local/local_comm.h"
#include "tensor/dtype.h"

namespace zt {
namespace {

float value(int rank, int64_t i) { return 0.37f * float(rank + 1) + 1e-3f * float(i % 97) - 0.11f; }

// The hierarchy's sum of element i over ranks: within each host of L in rank order, then over
// hosts in host order, in f32.
float hier_sum(int ranks, int L, int64_t i) {
    float total = 0;
    for (int h = 0; h < ranks / L; ++h) {
        float host = value(h * L, i);
        for (int l = 1; l < L; ++l) host = host + value(h * L + l, i);
        total = h == 0 ? host : total + host;
    }
    return total;
}

std::vector<std::string> hosts_of(int ranks, int L) {
    std::vector<std::string> h;
    for (int r = 0; r < ranks; ++r) h.push_back("host" + std::to_string(r / L));
    return h;
}

TEST(Hierarchical, AllReduceSumsWithinHostsThenAcross) {
    for (const auto& [ranks, L] : {std::pair{4, 2}, std::pair{6, 2}, std::pair{6, 3}}) {
        const int64_t n = 1001;
        std::mutex mu;
        std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
        std::vector<int64_t> cross(static_cast<size_t>(ranks)),
            flat_bytes(static_cast<size_t>(ranks));
        run_local_ranks(ranks, [&](Communicator& c) {
            std::string why;
            auto h = make_hierarchical(c, hosts_of(ranks, L), &why);
            ASSERT_TRUE(h) << why;
            std::vector<float> x(n);
            for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = value(c.rank(), i);
            std::vector<float> y = x;
            h->all_reduce(x.data(), n, CommType::kF32)->wait();
            c.reset_stats();
            c.all_reduce(y.data(), n, CommType::kF32)->wait();
            std::lock_guard<std::mutex> lock(mu);
            got[static_cast<size_t>(c.rank())] = x;
            cross[static_cast<size_t>(c.rank())] =
                cross_host_group(*h)->stats().bytes_sent[int(CollectiveKind::kAllReduce)];
            flat_bytes[static_cast<size_t>(c.rank())] =
                c.stats().bytes_sent[int(CollectiveKind::kAllReduce)];
        });
        for (int r = 0; r < ranks; ++r)
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(got[static_cast<size_t>(r)][static_cast<size_t>(i)],
                          hier_sum(ranks, L, i))
                    << ranks << "/" << L << " rank " << r << " element " << i;
        // Across hosts: an all-reduce of n / L values among H ranks, against n among R.
        for (int r = 0; r < ranks; ++r)
            EXPECT_LT(cross[static_cast<size_t>(r)] * L, flat_bytes[static_cast<size_t>(r)] + 8 * L)
                << ranks << "/" << L;
    }
}

TEST(Hierarchical, ReduceScatterAndAllGatherWithUnevenCounts) {
    const int ranks = 4, L = 2;
    const std::vector<int64_t> counts = {3, 0, 5, 7};
    const int64_t n = 15;
    std::mutex mu;
    std::vector<std::vector<float>> seg(ranks), all(ranks);
    run_local_ranks(ranks, [&](Communicator& c) {
        auto h = make_hierarchical(c, hosts_of(ranks, L), nullptr);
        ASSERT_TRUE(h);
        std::vector<float> x(n);
        for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = value(c.rank(), i);
        std::vector<float> mine(static_cast<size_t>(counts[static_cast<size_t>(c.rank())]) + 1);
        h->reduce_scatter(x.data(), mine.data(), counts, CommType::kF32)->wait();
        std::vector<float> gathered(n, -1.0f);
        h->all_gather(mine.data(), gathered.data(), counts, CommType::kF32)->wait();
        std::lock_guard<std::mutex> lock(mu);
        mine.resize(static_cast<size_t>(counts[static_cast<size_t>(c.rank())]));
        seg[static_cast<size_t>(c.rank())] = mine;
        all[static_cast<size_t>(c.rank())] = gathered;
    });
    int64_t at = 0;
    for (int r = 0; r < ranks; ++r) {
        for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i)
            EXPECT_EQ(seg[static_cast<size_t>(r)][static_cast<size_t>(i)],
                      hier_sum(ranks, L, at + i))
                << "rank " << r;
        at += counts[static_cast<size_t>(r)];
    }
    for (int r = 0; r < ranks; ++r)
        for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(all[static_cast<size_t>(r)][static_cast<size_t>(i)], hier_sum(ranks, L, i))
                << "rank " << r << " element " << i;
}

TEST(Hierarchical, Bf16RoundsAfterEachPhase) {
    const int ranks = 4, L = 2;
    const int64_t n = 64;
    std::mutex mu;
    std::vector<std::vector<uint16_t>> got(ranks);
    run_local_ranks(ranks, [&](Communicator& c) {
        auto h = make_hierarchical(c, hosts_of(ranks, L), nullptr);
        std::vector<uint16_t> x(n);
        for (int64_t i = 0; i < n; ++i)
            x[static_cast<size_t>(i)] = f32_to_bf16(value(c.rank(), i)).bits;
        h->all_reduce(x.data(), n, CommType::kBF16)->wait();
        std::lock_guard<std::mutex> lock(mu);
        got[static_cast<size_t>(c.rank())] = x;
    });
    auto b = [](int r, int64_t i) { return bf16_to_f32(f32_to_bf16(value(r, i))); };
    for (int64_t i = 0; i < n; ++i) {
        const float h0 = bf16_to_f32(f32_to_bf16(b(0, i) + b(1, i)));
        const float h1 = bf16_to_f32(f32_to_bf16(b(2, i) + b(3, i)));
        const uint16_t want = f32_to_bf16(h0 + h1).bits;
        for (int r = 0; r < ranks; ++r)
            EXPECT_EQ(got[static_cast<size_t>(r)][static_cast<size_t>(i)], want) << i;
    }
}

TEST(Hierarchical, LayoutsOtherThanOneBlockPerHostAreRefused) {
    std::string why;
    EXPECT_EQ(ranks_per_host({"a", "a", "b", "b"}, &why), 2);
    EXPECT_EQ(ranks_per_host({"a", "a", "a", "a"}, &why), 0);
    EXPECT_NE(why.find("one host"), std::string::npos) << why;
    EXPECT_EQ(ranks_per_host({"a", "b", "c", "d"}, &why), 0);
    EXPECT_NE(why.find("one rank per host"), std::string::npos) << why;
    EXPECT_EQ(ranks_per_host({"a", "a", "b", "b", "b"}, &why), 0);
    EXPECT_NE(why.find("does not divide"), std::string::npos) << why;
    EXPECT_EQ(ranks_per_host({"a", "a", "b", "a"}, &why), 0);
    EXPECT_NE(why.find("rank 3"), std::string::npos) << why;
    EXPECT_EQ(ranks_per_host({"a", "a", "b", "b", "a", "a"}, &why), 0);
    EXPECT_NE(why.find("not consecutive"), std::string::npos) << why;
    EXPECT_FALSE(host_key().empty());
}

}  // namespace
}  // namespace zt
