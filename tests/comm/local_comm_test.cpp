// The conformance suite (conformance.h) on the local backend, 1 to 4 ranks, plus what only the
// local backend can check in-process: a failing rank aborts the group instead of hanging it.
#include "comm/local/local_comm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "comm/conformance.h"
#include "comm/conformance_priority.h"
#include "util/error.h"

namespace zt {
namespace {

class LocalConformance : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(LocalConformance, Passes) {
    const auto& check = conformance::checks()[std::get<0>(GetParam())];
    const int n = std::get<1>(GetParam());
    EXPECT_NO_THROW(run_local_ranks(n,
                                    [&](Communicator& c) {
                                        EXPECT_EQ(c.backend(), "local");
                                        EXPECT_EQ(c.size(), n);
                                        check.fn(c);
                                    }))
        << check.name << " on " << n << " ranks";
}

INSTANTIATE_TEST_SUITE_P(
    Comm, LocalConformance,
    ::testing::Combine(::testing::Range<size_t>(0, conformance::checks().size()),
                       ::testing::Range(1, 5)),
    [](const auto& info) {
        return std::string(conformance::checks()[std::get<0>(info.param)].name) + "_np" +
               std::to_string(std::get<1>(info.param));
    });

// Priority and chunks (conformance_priority.h): accepted here, and ops still run in issue order.
class LocalPriorityConformance : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(LocalPriorityConformance, Passes) {
    const auto& check = conformance::priority_checks()[std::get<0>(GetParam())];
    const int n = std::get<1>(GetParam());
    EXPECT_NO_THROW(run_local_ranks(n, [&](Communicator& c) { check.fn(c); }))
        << check.name << " on " << n << " ranks";
}

INSTANTIATE_TEST_SUITE_P(
    Comm, LocalPriorityConformance,
    ::testing::Combine(::testing::Range<size_t>(0, conformance::priority_checks().size()),
                       ::testing::Range(1, 5)),
    [](const auto& info) {
        return std::string(conformance::priority_checks()[std::get<0>(info.param)].name) + "_np" +
               std::to_string(std::get<1>(info.param));
    });

// Rank 1 throws before its collective: the others' pending and later ops fail with "rank 1
// failed", and run_local_ranks rethrows rank 1's own error.
TEST(LocalComm, FailingRankAbortsGroup) {
    std::atomic<int> saw_abort{0};
    try {
        run_local_ranks(3, [&](Communicator& c) {
            if (c.rank() == 1) throw std::runtime_error("boom");
            std::vector<float> buf(10, 1.0f);
            auto h = c.all_reduce(buf.data(), 10, CommType::kF32);
            try {
                h->wait();
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find("rank 1 failed: boom"), std::string::npos)
                    << e.what();
                saw_abort += 1;
            }
            EXPECT_THROW(c.barrier()->wait(), Error);  // issued after the abort
            EXPECT_THROW(c.recv(buf.data(), 10, CommType::kF32, 1, 0)->wait(), Error);
        });
        FAIL() << "run_local_ranks did not rethrow";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "boom");
    }
    EXPECT_EQ(saw_abort.load(), 2);
}

// A rank that fails inside a sub-group aborts the world group too.
TEST(LocalComm, FailureInSubGroupAbortsEverything) {
    EXPECT_THROW(run_local_ranks(4,
                                 [&](Communicator& c) {
                                     auto sub = c.split(c.rank() % 2, c.rank());
                                     if (c.rank() == 3) ZT_FAIL("sub-group failure");
                                     c.barrier()->wait();
                                 }),
                 Error);
}

// Rank 0 returns without the collective the others wait in: they fail instead of hanging.
TEST(LocalComm, RankReturningEarlyFailsWaiters) {
    try {
        run_local_ranks(2, [&](Communicator& c) {
            if (c.rank() == 0) return;
            c.barrier()->wait();
        });
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 0 failed"), std::string::npos) << e.what();
    }
    // And a receive whose sender returned.
    EXPECT_THROW(run_local_ranks(2,
                                 [&](Communicator& c) {
                                     if (c.rank() == 0) return;
                                     float x;
                                     c.recv(&x, 1, CommType::kF32, 0, 0)->wait();
                                 }),
                 Error);
}

TEST(LocalComm, MismatchedCountsFail) {
    EXPECT_THROW(
        run_local_ranks(2,
                        [&](Communicator& c) {
                            std::vector<float> buf(8, 1.0f);
                            c.all_reduce(buf.data(), c.rank() == 0 ? 4 : 8, CommType::kF32)->wait();
                        }),
        Error);
}

TEST(LocalComm, BadArgumentsAreInputErrors) {
    auto g = make_local_group(2);
    float x = 0, y = 0;
    EXPECT_THROW(g[0]->reduce_scatter(&x, &y, {1}, CommType::kF32), Error);  // one count, 2 ranks
    EXPECT_THROW(g[0]->broadcast(&x, 1, CommType::kF32, 2), Error);
    EXPECT_THROW(g[0]->send(&x, 1, CommType::kF32, -1, 0), Error);
    EXPECT_THROW(make_local_group(0), Error);
}

// make_local_group with threads the caller drives; ops queue while the caller computes.
TEST(LocalComm, GroupDrivenByOwnThreads) {
    auto g = make_local_group(2);
    std::vector<double> a(100, 1.5), b(100, 2.25);
    auto ha = g[0]->all_reduce(a.data(), 100, CommType::kF64);
    std::thread t([&] { g[1]->all_reduce(b.data(), 100, CommType::kF64)->wait(); });
    ha->wait();
    t.join();
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(a[static_cast<size_t>(i)], 3.75);
        EXPECT_EQ(b[static_cast<size_t>(i)], 3.75);
    }
}

// Note [Ops run by their waiter]: a caller that waits for an op the worker has not taken runs it
// itself. Ops still run in issue order and the ranks meet whichever thread runs each side: waits
// at once, waits after other work (the worker runs the op meanwhile), and waits out of issue
// order (a later op's waiter must not run it ahead of an earlier one), mixed over the ranks.
TEST(LocalComm, OpsRunByTheirWaiterKeepIssueOrder) {
    constexpr int kRanks = 3, kRounds = 200;
    run_local_ranks(kRanks, [&](Communicator& c) {
        const int r = c.rank();
        for (int i = 0; i < kRounds; ++i) {
            std::vector<double> a(64, r + i), b(64, 10.0 * r + i);
            std::vector<double> order = {static_cast<double>(r)};
            std::vector<double> seen(kRanks);
            auto ha = c.all_reduce(a.data(), 64, CommType::kF64);
            auto hb = c.all_gather(order.data(), seen.data(), std::vector<int64_t>(kRanks, 1),
                                   CommType::kF64);
            auto hc = c.all_reduce(b.data(), 64, CommType::kF64);
            switch ((i + r) % 3) {
                case 0:  // in order, at once
                    ha->wait();
                    hb->wait();
                    hc->wait();
                    break;
                case 1:  // the last first: not run before the two ahead of it
                    hc->wait();
                    hb->wait();
                    ha->wait();
                    break;
                default: {  // after some work of its own
                    volatile double x = 0;
                    for (int k = 0; k < 20000; ++k) x = x + 1e-3 * k;
                    hb->wait();
                    ha->wait();
                    hc->wait();
                }
            }
            const double sum_r = kRanks * (kRanks - 1) / 2.0;
            for (double v : a) ASSERT_EQ(v, sum_r + kRanks * i) << "round " << i;
            for (double v : b) ASSERT_EQ(v, 10.0 * sum_r + kRanks * i) << "round " << i;
            for (int q = 0; q < kRanks; ++q) ASSERT_EQ(seen[static_cast<size_t>(q)], q);
        }
    });
}

}  // namespace
}  // namespace zt
