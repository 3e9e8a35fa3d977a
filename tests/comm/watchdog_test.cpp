// Hang detection (Note [Hang detection], comm/watchdog.h) on the local backend: a rank that skips a
// collective (ZT_FAULT_SKIP_COLLECTIVE) is reported on every rank, naming what each is in, at once
// when every rank waits in a collective, else by the timeout; check_sequence names a mismatch at
// once. Verdicts come from the reports, not the clock (elapsed time is only a hang guard). Plus the
// report's formatting. The MPI side runs as ctest comm.mpi_watchdog_np4 and
// comm.mpi_check_sequence_np4 (tests/CMakeLists.txt).
#include "comm/watchdog.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <mutex>

#include "comm/local/local_comm.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt {
namespace {

using comm_detail::OpState;
using comm_detail::RankState;

// Sets ZT_FAULT_SKIP_COLLECTIVE for one test.
class FaultEnv {
  public:
    explicit FaultEnv(const char* v) { setenv("ZT_FAULT_SKIP_COLLECTIVE", v, 1); }
    ~FaultEnv() { unsetenv("ZT_FAULT_SKIP_COLLECTIVE"); }
};

OpState op(CollectiveKind k, uint64_t seq, int64_t count) {
    return OpState{true, static_cast<int>(k), seq, count, CommType::kF32, -1, true};
}

TEST(Watchdog, FormatsRanksAndStates) {
    EXPECT_EQ(comm_detail::format_ranks({3}), "rank 3");
    EXPECT_EQ(comm_detail::format_ranks({2, 0, 1, 5, 7, 6}), "ranks 0-2,5-7");
    std::vector<RankState> s(4, {true, op(CollectiveKind::kReduceScatter, 812, 4096)});
    s[3] = {true, op(CollectiveKind::kAllGather, 812, 1024)};
    EXPECT_EQ(
        comm_detail::format_states(s),
        "rank 3 is in all_gather #812 (1024 f32), ranks 0-2 in reduce_scatter #812 (4096 f32)");
    s[1].answered = false;
    s[3].state.active = false;
    EXPECT_EQ(comm_detail::format_states(s),
              "rank 3 is in no collective (last: all_gather #812), "
              "ranks 0,2 in reduce_scatter #812 (4096 f32), rank 1 did not answer");
    const auto w = op(CollectiveKind::kBroadcast, 7, 5);
    EXPECT_EQ(OpState::decode(w.encode()).encode(), w.encode());
}

TEST(Watchdog, ParsesFaultVariable) {
    {
        FaultEnv env("3:812");
        const auto f = comm_detail::fault_skip_from_env();
        EXPECT_EQ(f.world_rank, 3);
        EXPECT_EQ(f.seq, 812u);
    }
    EXPECT_EQ(comm_detail::fault_skip_from_env().world_rank, -1);
    FaultEnv bad("3");
    EXPECT_THROW(comm_detail::fault_skip_from_env(), Error);
}

// Runs 4 ranks issuing all_reduce #1, reduce_scatter #2, all_gather #3 (rank 3 skipping #2);
// collects every rank's error.
std::vector<std::string> run_skipping(double timeout_s, bool check_sequence, bool then_recv) {
    std::mutex mu;
    std::vector<std::string> errors(4);
    EXPECT_THROW(
        run_local_ranks(
            4,
            [&](Communicator& c) {
                c.set_timeout(timeout_s);
                c.set_check_sequence(check_sequence);
                std::vector<float> a(12, 1.0f), b(3);
                try {
                    c.all_reduce(a.data(), 12, CommType::kF32)->wait();
                    c.reduce_scatter(a.data(), b.data(), {3, 3, 3, 3}, CommType::kF32)->wait();
                    if (then_recv && c.rank() == 3) {
                        // In no collective: waits for a message that
                        // never comes.
                        c.recv(b.data(), 3, CommType::kF32, 0, 0)->wait();
                    }
                    c.all_gather(b.data(), a.data(), {3, 3, 3, 3}, CommType::kF32)->wait();
                } catch (const Error& e) {
                    std::lock_guard lock(mu);
                    errors[static_cast<size_t>(c.rank())] = e.message();
                    throw;
                }
            }),
        Error);
    return errors;
}

// Rank 3 skips reduce_scatter #2 and issues all_gather #2: every rank waits in a collective of the
// group, so the local backend names the mismatch at once, not by the timeout: the report is the
// at-once one (no "waited ... (comm.timeout_s ...)"), with a timeout far longer than the test.
TEST(Watchdog, SkippedCollectiveNamesMismatch) {
    FaultEnv env("3:2");
    Stopwatch sw;
    const auto errors = run_skipping(300.0, false, false);
    EXPECT_LT(sw.elapsed_s(), 120.0);  // a hang guard only: the verdict is the report's kind
    for (int r = 0; r < 4; ++r) {
        const auto& e = errors[static_cast<size_t>(r)];
        EXPECT_NE(e.find("comm: collective mismatch on group world: rank 3 is in all_gather #2 "
                         "(12 f32), ranks 0-2 in reduce_scatter #2 (12 f32)"),
                  std::string::npos)
            << "rank " << r << ": " << e;
        EXPECT_EQ(e.find("comm.timeout_s"), std::string::npos) << "rank " << r << ": " << e;
    }
}

// The seconds the watchdog's report says a rank waited ("Rank R waited X s in ..."); -1 if absent.
double reported_wait_s(const std::string& report) {
    const size_t at = report.find(" waited ");
    return at == std::string::npos ? -1.0 : std::atof(report.c_str() + at + 8);
}

// Rank 3 skips reduce_scatter #2 and then waits in a receive: only the timeout finds it. The
// verdict is the report: it fired (every rank has it), by the timeout (it quotes the configured
// limit and a wait, measured by the watchdog itself, of at least that), naming every rank.
TEST(Watchdog, TimeoutReportsEveryRank) {
    FaultEnv env("3:2");
    const double timeout_s = 1.0;
    Stopwatch sw;
    const auto errors = run_skipping(timeout_s, false, true);
    EXPECT_LT(sw.elapsed_s(), 120.0);  // a hang guard only
    for (int r = 0; r < 4; ++r) {
        const auto& e = errors[static_cast<size_t>(r)];
        EXPECT_NE(e.find("comm watchdog: collective mismatch on group world (4 ranks): rank 3 is "
                         "in no collective (last: all_reduce #1), ranks 0-2 in reduce_scatter #2 "
                         "(12 f32)"),
                  std::string::npos)
            << "rank " << r << ": " << e;
        EXPECT_NE(e.find(" (comm.timeout_s 1)"), std::string::npos) << "rank " << r << ": " << e;
        EXPECT_GE(reported_wait_s(e), timeout_s) << "rank " << r << ": " << e;
    }
}

// check_sequence: a count mismatch is named at once, with what each rank issued.
TEST(Watchdog, CheckSequenceNamesCountMismatch) {
    std::string error;
    try {
        run_local_ranks(3, [&](Communicator& c) {
            c.set_check_sequence(true);
            std::vector<float> a(8, 1.0f);
            c.barrier()->wait();
            c.all_reduce(a.data(), c.rank() == 1 ? 4 : 8, CommType::kF32)->wait();
        });
    } catch (const Error& e) {
        error = e.message();
    }
    EXPECT_NE(error.find("comm check_sequence: collective mismatch on group world: rank 1 is in "
                         "all_reduce #2 (4 f32), ranks 0,2 in all_reduce #2 (8 f32)"),
              std::string::npos)
        << error;
}

// Settings pass to split communicators; a hang in a sub-group names the group.
TEST(Watchdog, SubGroupInheritsTimeout) {
    std::string error;
    try {
        run_local_ranks(4, [&](Communicator& c) {
            c.set_timeout(0.5);
            auto sub = c.split(c.rank() % 2, c.rank());
            if (c.rank() == 3) {  // waits for rank 1, which waits for it in the sub-group
                float x;
                c.recv(&x, 1, CommType::kF32, 1, 0)->wait();
            }
            sub->barrier()->wait();
        });
    } catch (const Error& e) {
        error = e.message();
    }
    EXPECT_NE(error.find("on group world/split1(color 1) (2 ranks; world ranks 1,3): rank 0 is in "
                         "barrier #1, rank 1 in no collective (none issued yet)"),
              std::string::npos)
        << error;
}

}  // namespace
}  // namespace zt
