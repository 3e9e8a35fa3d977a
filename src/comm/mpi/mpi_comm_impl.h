// The MPI communicator's implementation types (mpi_comm.h is the interface), shared by
// mpi_comm.cpp (the worker: scheduling, progress, hang detection) and mpi_comm_ops.cpp (how
// each collective is built from phases and chunks). Not for other users.
#pragma once


#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "comm/detail.h"
#include "comm/mpi/mpi_chunks.h"
#include "comm/mpi/mpi_comm.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/mpi/mpi_watchdog.h"
#include "comm/reduce.h"
#include "comm/watchdog.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt::mpi_impl {

using comm_detail::OpState;
using comm_detail::StatsRecorder;
using comm_detail::Work;
using mpi_detail::Chunks;

constexpr int kSpinYields = 16;              // sched_yield polls before sleeping between polls
constexpr long kPollSleepNs = 30'000;        // 30 us between polls once the op is slow
constexpr long kIdleSleepMaxNs = 1'000'000;  // 1 ms: the longest sleep for ops nobody awaits

// Note [Idle polling]
// The worker polls its ops with MPI_Testall. While a caller waits (or a collective runs, whose
// later phases only this worker can post) it polls every 30 us after a few yields. A pipeline's
// point-to-point ops are different: the receive of the next micro-batch's activations and the
// send of this one's are in flight through the whole of a micro-batch's compute, which nobody
// waits for yet, and on a machine with one core per rank the worker's 30 us wake-ups share the
// core with that compute: GPT config M on 2 stages (1F1B, one rank per core) took 23.2 s a step
// with them and 17.2 s with 0.5 ms sleeps (tensor parallel on the same cores: 13.2 s). So while
// only point-to-point ops nobody has awaited are in flight, the sleep doubles from 30 us up to
// 1 ms; a new op or a caller that starts waiting (Work::on_awaited) rings the bell and ends the
// sleep at once, so no wait sees the slow cadence.
class Bell {
  public:
    void ring() {
        {
            std::lock_guard lock(mu_);
            rung_ = true;
        }
        cv_.notify_one();
    }
    // Sleeps up to ns nanoseconds or until rung; clears the bell.
    void sleep(long ns) {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::nanoseconds(ns), [&] { return rung_; });
        rung_ = false;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool rung_ = false;
};
constexpr double kServeEveryS = 0.001;  // 1 ms: how often a busy worker answers the watchdog

// The tag of collective #seq's messages on the collectives' communicator: a rank in another
// collective (a mismatch) never matches them, so it hangs and is reported instead of exchanging
// wrong data, and two collectives in flight together never take each other's messages (Note
// [Two collectives in flight]). Under 32767, MPI's least MPI_TAG_UB.
inline int coll_tag(uint64_t seq, int op) { return static_cast<int>(seq % 2048) * 16 + op; }

// Note [Two collectives in flight]
// Note [Urgent ops] (comm/communicator.h) on this backend. The worker starts queued ops in issue
// order, with one exception: an urgent collective starts ahead of the bulk collectives queued
// before it, as soon as no other urgent one runs and the running bulk collective, if any, streams
// its chunks (Note [Chunked ops]; an unchunked one goes first, whole). The bulk op then posts its
// next chunks behind the urgent op's messages, so at most the two chunks it has in flight go
// first. Point-to-point ops and split are never overtaken (an urgent op that started before a
// split another rank already blocks in would wait for it forever). The two then progress side by
// side, each posting its next chunk or phase when its own requests have completed, so neither
// waits for the other: every op waits only for ops issued before it, which every rank completes,
// and so no rank can deadlock, whichever chunk boundary each rank started the urgent op at, even
// one whose caller waits for the bulk op before issuing the urgent one. (Pausing the bulk op
// while an urgent one runs would give the urgent one the whole link, and deadlock that rank.) A
// bulk collective may start beside a running urgent one; when a slot frees, queued urgent ops are
// looked at first. Each op posts with its own tag (coll_tag_ is set to it while the op
// progresses), and an op whose tag equals a running collective's (numbers 2048 apart) waits for
// it. The collectives built on MPI's own (broadcast, barrier, split), whose order on a
// communicator must be the same on every rank, are never urgent, so they keep issue order. The
// watchdog reports the oldest collective running; each has its own timeout from its start.

// Chunks of one op posted a few at a time (Note [Chunked ops]): post(k) posts chunk k's
// requests; arrived(k), if set, runs once they have completed, chunks in order.
struct Stream {
    Chunks chunks;
    std::function<void(int64_t, std::vector<MPI_Request>&)> post;
    std::function<void(int64_t)> arrived;
    int64_t posted = 0;
    int64_t arrived_count = 0;
    std::deque<std::vector<MPI_Request>> in_flight;  // chunks posted, oldest first
};

// A step of an op: requests posted at once (the next step runs when all have completed), or a
// stream of chunks (the next step runs when every chunk has arrived).
struct Phase {
    template <typename F,
              typename = std::enable_if_t<std::is_invocable_v<F&, std::vector<MPI_Request>&>>>
    Phase(F f) : post(std::move(f)) {}  // NOLINT(google-explicit-constructor): a plain phase
    explicit Phase(std::shared_ptr<Stream> s) : stream(std::move(s)) {}
    std::function<void(std::vector<MPI_Request>&)> post;
    std::shared_ptr<Stream> stream;
};

// An op as phases: each posts nonblocking requests (and may compute first); the next runs when
// every request of the previous has completed.
struct Op {
    explicit Op(CollectiveKind k = CollectiveKind::kBarrier) : kind(k) {
        state.active = true;
        state.op = static_cast<int>(k);
    }
    CollectiveKind kind;
    int64_t bytes = 0;
    bool record = true;
    bool collective = true;
    bool urgent = false;    // a collective that may overtake bulk ones (Note [Two collectives ...])
    bool streamed = false;  // moves chunk by chunk: an urgent op may start beside it
    int tag = 0;            // a collective's coll_tag (set by enqueue)
    double t_issue = 0;
    double t_start = 0;    // a collective: when it started on the worker
    OpState state;         // a collective: what the watchdog reports (seq set by enqueue)
    double timeout_s = 0;  // 0: no limit
    std::shared_ptr<Work> work;
    std::vector<Phase> phases;
    size_t next_phase = 0;
    std::vector<MPI_Request> reqs;
    Stream* stream = nullptr;  // the phase running, when a stream
};

inline const char* cbytes(const void* p, int64_t elems, size_t es) {
    return static_cast<const char*>(p) + elems * static_cast<int64_t>(es);
}
inline char* bytes(void* p, int64_t elems, size_t es) {
    return static_cast<char*>(p) + elems * static_cast<int64_t>(es);
}

class MpiComm final : public Communicator {
  public:
    // Takes ownership of comm (user point-to-point), coll (collectives) and wd (watchdog), three
    // duplicates of one group; name is the group's in reports.
    MpiComm(MPI_Comm comm, MPI_Comm coll, MPI_Comm wd, std::string name, const MpiOptions& opt)
        : comm_(comm), coll_(coll), opt_(opt) {
        ZT_CHECK(opt_.max_piece_elems >= 1 && opt_.max_piece_elems <= INT_MAX,
                 "mpi: max_piece_elems ", opt_.max_piece_elems, " outside 1..INT_MAX");
        watchdog_ = std::make_unique<mpi_detail::Watchdog>(wd, comm, std::move(name));
        int world_rank = 0;
        auto g = mpi_detail::lock();
        ZT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
        if (fault_.world_rank != world_rank) fault_.world_rank = -1;
        ZT_MPI(MPI_Comm_rank(comm_, &rank_));
        ZT_MPI(MPI_Comm_size(comm_, &size_));
        ZT_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
        ZT_MPI(MPI_Comm_set_errhandler(coll_, MPI_ERRORS_RETURN));
        int flag = 0;
        int* ub = nullptr;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
        tag_ub_ = flag && ub ? *ub : 32767;
        if (g.owns_lock()) g.unlock();
        worker_ = std::thread([this] { worker_loop(); });
    }
    ~MpiComm() override {
        {
            std::lock_guard lock(q_mu_);
            stop_ = true;
        }
        q_cv_.notify_all();
        worker_.join();
        watchdog_.reset();
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) {
            auto g = mpi_detail::lock();
            MPI_Comm_free(&comm_);
            MPI_Comm_free(&coll_);
        }
    }
    MpiComm(const MpiComm&) = delete;
    MpiComm& operator=(const MpiComm&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string backend() const override { return "mpi"; }

    CommHandle all_reduce(void* buf, int64_t count, CommType t) override;
    CommHandle reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                              CommType t) override;
    CommHandle all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                          CommType t) override;
    CommHandle broadcast(void* buf, int64_t count, CommType t, int root) override;
    CommHandle all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                          std::vector<int64_t> recv_counts, CommType t) override;
    CommHandle send(const void* buf, int64_t count, CommType t, int peer, int tag) override;
    CommHandle recv(void* buf, int64_t count, CommType t, int peer, int tag) override;
    CommHandle barrier() override;
    std::unique_ptr<Communicator> split(int color, int key) override;
    CommStats stats() const override { return stats_->get(); }
    void reset_stats() override { stats_->reset(); }
    void set_timeout(double seconds) override {
        ZT_CHECK(seconds >= 0, "comm set_timeout: ", seconds, " s; expected >= 0 (0: no limit)");
        timeout_s_ = seconds;
        q_cv_.notify_all();  // an idle worker starts answering the watchdog
    }
    void set_check_sequence(bool on) override { check_sequence_ = on; }
    bool set_urgent(bool on) override { return urgent_.exchange(on); }
    void set_chunk_bytes(int64_t bytes) override {
        ZT_CHECK(bytes >= 0, "comm set_chunk_bytes: ", bytes, "; expected >= 0 (0: whole)");
        chunk_bytes_ = bytes;
    }

  private:
    CommHandle enqueue(Op op) {
        op.work = std::make_shared<Work>();
        op.work->on_awaited([bell = bell_] { bell->ring(); });
        op.t_issue = now_s();
        if (op.record) op.work->count_waits_in(stats_, op.t_issue);  // Note [Busy time]
        CommHandle h = op.work;
        {
            std::lock_guard lock(q_mu_);
            if (op.collective) {
                if (fault_.world_rank >= 0 && fault_.seq == issued_seq_ + 1) {
                    fault_.world_rank = -1;  // once; the op takes no number
                    op.work->complete(nullptr);
                    return h;
                }
                op.state.seq = ++issued_seq_;
                op.tag = coll_tag(op.state.seq, op.state.op);
                op.timeout_s = timeout_s_;
                if (check_sequence_) add_check_phases(op);
            }
            if (op.record) stats_->issued(op.kind, op.bytes);  // Note [Counted at issue]
            queue_.push_back(std::move(op));
        }
        q_cv_.notify_one();
        bell_->ring();
        return h;
    }
    // check_sequence: exchange op.state with every rank before the op's own phases.
    void add_check_phases(Op& op);
    // Worker: answers state requests (at most every kServeEveryS while busy); ends the job when
    // a running collective has waited past its limit.
    void watch(const std::deque<Op>& active);

    void worker_loop();
    bool abandon_at_stop(std::deque<Op>& active);
    bool start_ready_ops(std::deque<Op>& active);
    // Whether queued op may start now (Note [Two collectives in flight]). waiting: an op queued
    // before it has not started; overtakable: all those are bulk collectives other than split.
    bool may_start(const Op& op, const std::deque<Op>& active, bool waiting,
                   bool overtakable) const;
    // cur_: the state of the oldest collective running, else of the last one started.
    void refresh_cur(const std::deque<Op>& active);
    bool progress(Op& op);  // true when op finished (successfully or not)
    void finish(Op& op, std::exception_ptr error);

    // Point-to-point in pieces of at most max_piece_elems elements, posted in order so the
    // receiver's pieces match the sender's (MPI's non-overtaking rule).
    void isend(const void* buf, int64_t count, CommType t, int peer, int tag, MPI_Comm c,
               std::vector<MPI_Request>& reqs) const {
        const size_t es = comm_type_size(t);
        for (int64_t o = 0; o < count; o += opt_.max_piece_elems) {
            const int n = static_cast<int>(std::min(opt_.max_piece_elems, count - o));
            reqs.emplace_back();
            ZT_MPI(MPI_Isend(cbytes(buf, o, es), n, mpi_detail::datatype(t), peer, tag, c,
                             &reqs.back()));
        }
    }
    void irecv(void* buf, int64_t count, CommType t, int peer, int tag, MPI_Comm c,
               std::vector<MPI_Request>& reqs) const {
        const size_t es = comm_type_size(t);
        for (int64_t o = 0; o < count; o += opt_.max_piece_elems) {
            const int n = static_cast<int>(std::min(opt_.max_piece_elems, count - o));
            reqs.emplace_back();
            ZT_MPI(MPI_Irecv(bytes(buf, o, es), n, mpi_detail::datatype(t), peer, tag, c,
                             &reqs.back()));
        }
    }
    void check_peer(int peer, const char* op) const {
        ZT_CHECK(peer >= 0 && peer < size_, "comm ", op, ": peer ", peer,
                 " out of range; expected 0..", size_ - 1);
    }
    // Chunks of an op over `elems` elements of t issued now (Note [Chunked ops]); marks op urgent
    // or streamed.
    Chunks chunks_for(Op& op, int64_t elems, CommType t) const;
    // Appends the gather of every rank's segment of recv (this rank's already in place), chunk by
    // chunk, point-to-point. MPI_Iallgatherv measured no faster here (docs/benchmarks-comm.md)
    // and needs int counts.
    void add_gather_phases(Op& op, void* recv, std::vector<int64_t> counts, CommType t,
                           const Chunks& ch);
    // Appends a fixed-order reduce_scatter of send (segments in rank order) into recv, chunk by
    // chunk.
    void add_reduce_scatter_phases(Op& op, const void* send, void* recv,
                                   std::vector<int64_t> counts, CommType t, const Chunks& ch);

    MPI_Comm comm_, coll_;
    MpiOptions opt_;
    int rank_ = 0, size_ = 1, tag_ub_ = 32767;
    std::shared_ptr<StatsRecorder> stats_ = std::make_shared<StatsRecorder>();

    // Hang detection (Note [Hang detection]). issued_seq_ and fault_ under q_mu_; cur_, coll_tag_
    // and last_serve_ touched by the worker only.
    std::unique_ptr<mpi_detail::Watchdog> watchdog_;
    std::atomic<double> timeout_s_{kDefaultCommTimeoutS};
    std::atomic<bool> check_sequence_{false};
    std::atomic<bool> urgent_{false};      // Note [Urgent ops]
    std::atomic<int64_t> chunk_bytes_{0};  // Note [Chunked ops]
    uint64_t issued_seq_ = 0;
    comm_detail::FaultSkip fault_ = comm_detail::fault_skip_from_env();
    OpState cur_;
    OpState last_started_;  // the collective started last (cur_ when none runs)
    int coll_tag_ = 0;      // the tag of the collective whose phase is posting
    double last_serve_ = 0;
    int split_count_ = 0;  // caller's thread

    std::mutex q_mu_;
    std::condition_variable q_cv_;
    std::shared_ptr<Bell> bell_ = std::make_shared<Bell>();  // Note [Idle polling]
    std::deque<Op> queue_;
    bool stop_ = false;
    std::thread worker_;
};

}  // namespace zt::mpi_impl
