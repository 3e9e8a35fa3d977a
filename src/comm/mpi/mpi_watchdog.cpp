// The MPI watchdog (mpi_watchdog.h). Every call here runs on the communicator's worker thread.
// Errors of MPI calls are ignored on the report path: it ends the job whatever happens, and a
// partial report (ranks named as not answering) beats none.
#include "comm/mpi/mpi_watchdog.h"

#include <cstdio>
#include <ctime>

#include "comm/mpi/mpi_comm.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt::mpi_detail {
namespace {

constexpr int kRequestTag = 1;    // "what are you in?" (one int64, unused)
constexpr int kAnswerTag = 2;     // an OpState in wire form
constexpr int kCheckTagBase = 16;  // check_sequence: kCheckTagBase + seq % kCheckTags
constexpr int kCheckTags = 16384;  // keeps every tag under 32767, MPI's least MPI_TAG_UB
constexpr double kGraceS = 0.25;   // answering on after collecting, before MPI_Abort

}  // namespace

Watchdog::Watchdog(MPI_Comm wd, MPI_Comm group_comm, std::string group)
    : wd_(wd), group_(std::move(group)) {
    auto g = lock();
    ZT_MPI(MPI_Comm_set_errhandler(wd_, MPI_ERRORS_RETURN));
    ZT_MPI(MPI_Comm_rank(wd_, &rank_));
    ZT_MPI(MPI_Comm_size(wd_, &size_));
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    ZT_MPI(MPI_Comm_group(group_comm, &mine));
    ZT_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> ranks(static_cast<size_t>(size_));
    for (int q = 0; q < size_; ++q) ranks[static_cast<size_t>(q)] = q;
    world_ranks_.resize(static_cast<size_t>(size_));
    ZT_MPI(MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks_.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
}

Watchdog::~Watchdog() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    auto g = lock();
    for (auto it = answers_.begin(); it != answers_.end();) {
        int done = 0;
        MPI_Test(&it->req, &done, MPI_STATUS_IGNORE);
        if (done) {
            it = answers_.erase(it);
        } else {
            ++it;
        }
    }
    // An answer to a rank that no longer receives (it is aborting the job): let MPI finish or drop
    // it, and keep its buffer alive for that.
    for (auto& a : answers_) MPI_Request_free(&a.req);
    if (!answers_.empty()) new std::list<Answer>(std::move(answers_));
    MPI_Comm_free(&wd_);
}

int Watchdog::check_tag(uint64_t seq) {
    return kCheckTagBase + static_cast<int>(seq % kCheckTags);
}

void Watchdog::serve(const comm_detail::OpState& mine) {
    auto g = lock();
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kRequestTag, wd_, &flag, &st) != MPI_SUCCESS || !flag) break;
        int64_t ask = 0;
        // Probed: the message is here, so this receive returns at once.
        MPI_Recv(&ask, 1, MPI_INT64_T, st.MPI_SOURCE, kRequestTag, wd_, MPI_STATUS_IGNORE);
        auto& a = answers_.emplace_back();
        a.words = mine.encode();
        MPI_Isend(a.words.data(), comm_detail::OpState::kWords, MPI_INT64_T, st.MPI_SOURCE,
                  kAnswerTag, wd_, &a.req);
    }
    for (auto it = answers_.begin(); it != answers_.end();) {
        int done = 0;
        MPI_Test(&it->req, &done, MPI_STATUS_IGNORE);
        if (done) {
            it = answers_.erase(it);
        } else {
            ++it;
        }
    }
}

void Watchdog::report_and_abort(const comm_detail::OpState& mine, double waited_s,
                                double timeout_s) {
    const auto n = static_cast<size_t>(size_);
    std::vector<std::array<int64_t, comm_detail::OpState::kWords>> got(n);
    std::vector<MPI_Request> recvs(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
    std::vector<comm_detail::RankState> states(n);
    states[static_cast<size_t>(rank_)] = {true, mine};
    int64_t ask = 1;
    {
        auto g = lock();
        for (int q = 0; q < size_; ++q) {
            if (q == rank_) continue;
            const auto i = static_cast<size_t>(q);
            MPI_Irecv(got[i].data(), comm_detail::OpState::kWords, MPI_INT64_T, q, kAnswerTag, wd_,
                      &recvs[i]);
            MPI_Isend(&ask, 1, MPI_INT64_T, q, kRequestTag, wd_, &sends[i]);
        }
    }
    const double deadline = now_s() + comm_detail::answer_wait_s(timeout_s);
    size_t missing = n - 1;
    while (missing > 0 && now_s() < deadline) {
        serve(mine);  // the others may be asking this rank at the same time
        auto g = lock();
        for (size_t i = 0; i < n; ++i) {
            if (states[i].answered || recvs[i] == MPI_REQUEST_NULL) continue;
            int done = 0;
            MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE);
            if (!done) continue;
            states[i] = {true, comm_detail::OpState::decode(got[i])};
            --missing;
        }
        if (g.owns_lock()) g.unlock();
        timespec ts{0, 1'000'000};  // 1 ms
        nanosleep(&ts, nullptr);
    }
    // Other ranks that timed out too may still be collecting: answer them a moment longer, so that
    // each report is complete, not only the first.
    const double grace_end = now_s() + kGraceS;
    while (now_s() < grace_end) {
        serve(mine);
        timespec ts{0, 1'000'000};  // 1 ms
        nanosleep(&ts, nullptr);
    }
    const comm_detail::HangInfo info{group_, world_ranks_, rank_, waited_s, timeout_s};
    mpi_abort(1, str_cat("rank ", world_ranks_[static_cast<size_t>(rank_)], ": ",
                         comm_detail::hang_report(info, states)));
}

}  // namespace zt::mpi_detail
