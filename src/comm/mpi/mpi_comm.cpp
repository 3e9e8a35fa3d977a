// MPI communicator (mpi_comm.h). One worker thread per communicator owns every MPI call: it takes
// ops from a FIFO queue, posts their nonblocking requests and polls them with MPI_Testall and a
// short back-off (never a blocking MPI_Wait), so the watchdog bounds every wait (Note [Hang
// detection], comm/watchdog.h; mpi_watchdog.h).
// Collectives run in issue order, on a duplicate communicator of their own, one at a time except
// that an urgent one may start beside a bulk one that moves in chunks (Note [Two collectives in
// flight]); point-to-point ops start in issue order on the user communicator and stay in flight
// beside them (an Irecv issued before a collective does not block it, as in MPI).
// Note [Fixed-order reduction] (comm/reduce.h): reduce_scatter sends each owner its segment from
// every rank; the owner sums the n contributions in rank order. all_reduce is that over even
// segments, then an all_gather.
#include "comm/mpi/mpi_comm.h"

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
#include "comm/mpi/mpi_runtime.h"
#include "comm/mpi/mpi_watchdog.h"
#include "comm/reduce.h"
#include "comm/watchdog.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt {
namespace {

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
int coll_tag(uint64_t seq, int op) { return static_cast<int>(seq % 2048) * 16 + op; }

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

const char* cbytes(const void* p, int64_t elems, size_t es) {
    return static_cast<const char*>(p) + elems * static_cast<int64_t>(es);
}
char* bytes(void* p, int64_t elems, size_t es) {
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

void MpiComm::worker_loop() {
    // Started ops: point-to-point ones, at most one bulk and one urgent collective.
    std::deque<Op> active;
    int idle_polls = 0;
    for (;;) {
        bool moved = false;
        {
            std::unique_lock lock(q_mu_);
            if (active.empty()) {
                auto ready = [&] { return !queue_.empty() || stop_; };
                if (timeout_s_ > 0) {
                    // Idle, but other ranks' watchdogs may ask what this rank is in.
                    q_cv_.wait_for(lock, std::chrono::duration<double>(comm_detail::kIdleServiceS),
                                   ready);
                } else {
                    q_cv_.wait(lock, ready);
                }
                if (queue_.empty()) {
                    if (stop_) return;  // nothing left
                    lock.unlock();
                    watch(active);
                    continue;
                }
            }
        }
        if (abandon_at_stop(active)) return;
        moved |= start_ready_ops(active);
        const bool coll =
            std::any_of(active.begin(), active.end(), [](const Op& o) { return o.collective; });
        watch(active);
        bool finished = false;
        for (auto it = active.begin(); it != active.end();) {
            if (progress(*it)) {
                it = active.erase(it);
                finished = true;
            } else {
                ++it;
            }
        }
        if (finished) refresh_cur(active);
        if (moved || finished) {
            idle_polls = 0;
        } else if (++idle_polls < kSpinYields) {
            sched_yield();
        } else if (coll || std::any_of(active.begin(), active.end(),
                                       [](const Op& o) { return o.work->awaited(); })) {
            timespec ts{0, kPollSleepNs};
            nanosleep(&ts, nullptr);
        } else {
            // Only point-to-point ops nobody waits for (Note [Idle polling]).
            const int doublings = std::min(idle_polls - kSpinYields, 5);
            bell_->sleep(std::min(kIdleSleepMaxNs, kPollSleepNs << doublings));
        }
    }
}

// Destroyed with only point-to-point ops left (a failed run: a receive whose message will never
// come, from a stage that died or skipped its send): the worker would wait for them forever, so
// it cancels the receives, frees the requests and fails their handles. A clean run has nothing
// pending here.
bool MpiComm::abandon_at_stop(std::deque<Op>& active) {
    {
        std::lock_guard lock(q_mu_);
        if (!stop_ || !queue_.empty()) return false;
    }
    for (const Op& o : active)
        if (o.collective) return false;
    auto g = mpi_detail::lock();
    for (Op& o : active) {
        for (MPI_Request& r : o.reqs) {
            if (r == MPI_REQUEST_NULL) continue;
            if (o.kind == CollectiveKind::kRecv) MPI_Cancel(&r);
            MPI_Request_free(&r);
        }
        o.reqs.clear();
        o.work->complete(std::make_exception_ptr(
            Error(ErrorKind::kInternal, __FILE__, __LINE__,
                  str_cat("comm ", collective_kind_name(o.kind),
                          ": abandoned, the communicator was destroyed before it completed"))));
    }
    active.clear();
    return true;
}

// Starts queued ops in issue order: point-to-point at once, a collective when no other one of its
// kind (bulk or urgent) runs; an urgent collective may pass queued bulk ones, and is looked at
// first, so that a bulk one queued before it does not take the slot a finished one left (Note
// [Two collectives in flight]).
bool MpiComm::start_ready_ops(std::deque<Op>& active) {
    bool started = false;
    std::lock_guard lock(q_mu_);
    for (const bool urgent_only : {true, false}) {
        bool waiting = false, overtakable = true;
        for (auto it = queue_.begin(); it != queue_.end() && overtakable;) {
            if ((urgent_only && !it->urgent) || !may_start(*it, active, waiting, overtakable)) {
                waiting = true;
                overtakable =
                    it->collective && !it->urgent && it->state.op != comm_detail::kOpSplit;
                ++it;
                continue;
            }
            Op& op = active.emplace_back(std::move(*it));
            it = queue_.erase(it);
            if (op.collective) {
                op.t_start = now_s();
                last_started_ = op.state;
            }
            started = true;
        }
    }
    if (started) refresh_cur(active);
    return started;
}

bool MpiComm::may_start(const Op& op, const std::deque<Op>& active, bool waiting,
                        bool overtakable) const {
    if (!op.collective) return !waiting;
    if (op.urgent ? !overtakable : waiting) return false;
    for (const Op& o : active) {
        if (!o.collective) continue;
        if (o.tag == op.tag || op.state.op == comm_detail::kOpSplit) return false;
        if (o.urgent == op.urgent) return false;     // one of each kind at a time
        if (op.urgent && !o.streamed) return false;  // the bulk one goes first, whole
    }
    return true;
}

void MpiComm::refresh_cur(const std::deque<Op>& active) {
    const Op* oldest = nullptr;
    for (const Op& o : active)
        if (o.collective && (!oldest || o.state.seq < oldest->state.seq)) oldest = &o;
    if (oldest) {
        cur_ = oldest->state;
    } else {
        cur_ = last_started_;
        cur_.active = false;
    }
}

// True when every request completed (then cleared).
bool test_all(std::vector<MPI_Request>& reqs) {
    if (reqs.empty()) return true;
    int done = 0;
    auto g = mpi_detail::lock();
    ZT_MPI(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (done) reqs.clear();
    return done != 0;
}

// Posts s's chunks, at most depth in flight, and retires them in order; true when all arrived.
bool pump(Stream& s) {
    auto fill = [&] {
        while (s.posted < s.chunks.count &&
               static_cast<int64_t>(s.in_flight.size()) < s.chunks.depth) {
            s.in_flight.emplace_back();
            s.post(s.posted++, s.in_flight.back());
        }
    };
    for (;;) {
        fill();
        if (s.in_flight.empty()) return true;
        if (!test_all(s.in_flight.front())) return false;
        s.in_flight.pop_front();
        fill();  // the next chunk travels while this one is summed
        if (s.arrived) s.arrived(s.arrived_count);
        ++s.arrived_count;
    }
}

bool MpiComm::progress(Op& op) {
    try {
        if (op.collective) coll_tag_ = op.tag;  // Note [Two collectives in flight]
        for (;;) {
            if (!test_all(op.reqs)) return false;
            if (op.stream) {
                if (!pump(*op.stream)) return false;
                op.stream = nullptr;
            }
            if (op.next_phase == op.phases.size()) break;
            Phase& phase = op.phases[op.next_phase++];
            if (phase.stream)
                op.stream = phase.stream.get();
            else
                phase.post(op.reqs);
        }
    } catch (...) {
        finish(op, std::current_exception());
        return true;
    }
    finish(op, nullptr);
    return true;
}

void MpiComm::watch(const std::deque<Op>& active) {
    const bool coll =
        std::any_of(active.begin(), active.end(), [](const Op& o) { return o.collective; });
    if (timeout_s_ <= 0 && !coll) return;
    const double now = now_s();
    for (const Op& o : active)
        if (o.collective && o.timeout_s > 0 && now - o.t_start > o.timeout_s)
            watchdog_->report_and_abort(o.state, now - o.t_start, o.timeout_s);
    if (now - last_serve_ < kServeEveryS) return;
    last_serve_ = now;
    watchdog_->serve(cur_);
}

void MpiComm::add_check_phases(Op& op) {
    const int n = size_, r = rank_;
    const int tag = mpi_detail::Watchdog::check_tag(op.state.seq);
    using Words = std::array<int64_t, OpState::kWords>;
    auto all = std::make_shared<std::vector<Words>>(static_cast<size_t>(n));
    const OpState mine = op.state;
    auto post = [=, this](std::vector<MPI_Request>& reqs) {
        (*all)[static_cast<size_t>(r)] = mine.encode();
        const MPI_Comm wd = watchdog_->comm();
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            if (q == r) continue;
            reqs.emplace_back();
            ZT_MPI(MPI_Irecv((*all)[static_cast<size_t>(q)].data(), OpState::kWords, MPI_INT64_T, q,
                             tag, wd, &reqs.back()));
            reqs.emplace_back();
            ZT_MPI(MPI_Isend((*all)[static_cast<size_t>(r)].data(), OpState::kWords, MPI_INT64_T, q,
                             tag, wd, &reqs.back()));
        }
    };
    auto compare = [=, this](std::vector<MPI_Request>&) {
        std::vector<OpState> issued;
        bool same = true;
        for (const Words& w : *all) {
            issued.push_back(OpState::decode(w));
            same &= comm_detail::same_op(issued.front(), issued.back(), true);
        }
        ZT_CHECK(same,
                 comm_detail::sequence_mismatch("comm check_sequence", watchdog_->group(), issued));
    };
    op.phases.insert(op.phases.begin(), {post, compare});
}

void MpiComm::finish(Op& op, std::exception_ptr error) {
    if (op.record) stats_->record(op.kind, op.t_issue, now_s());
    op.phases.clear();  // release captured buffers before waking the caller
    op.stream = nullptr;
    op.work->complete(std::move(error));
}

Chunks MpiComm::chunks_for(Op& op, int64_t elems, CommType t) const {
    op.urgent = urgent_;
    const Chunks ch = size_ == 1 ? Chunks{}
                                 : Chunks::of(elems, static_cast<int64_t>(comm_type_size(t)),
                                              chunk_bytes_, op.urgent);
    op.streamed = ch.streamed();
    return ch;
}

void MpiComm::add_reduce_scatter_phases(Op& op, const void* send, void* recv,
                                        std::vector<int64_t> counts, CommType t, const Chunks& ch) {
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    auto off = std::make_shared<const std::vector<int64_t>>(comm_detail::segment_offsets(counts));
    auto cnt = std::make_shared<const std::vector<int64_t>>(std::move(counts));
    const int64_t mine = (*cnt)[static_cast<size_t>(r)];
    // The other ranks' contributions to chunk k of this rank's segment arrive in tmp[k % (depth +
    // 1)] (block q, of the chunk's length: rank q's; this rank's own block unused), one buffer per
    // chunk in flight and one for the chunk being summed (Note [Chunked ops]).
    auto tmp = std::make_shared<std::vector<std::vector<char>>>(static_cast<size_t>(ch.depth + 1));
    auto buf = [tmp, ch](int64_t k) -> std::vector<char>& {
        return (*tmp)[static_cast<size_t>(k % (ch.depth + 1))];
    };
    auto stream = std::make_shared<Stream>();
    stream->chunks = ch;
    stream->post = [=, this](int64_t k, std::vector<MPI_Request>& reqs) {
        const int64_t len = ch.cut(mine, k + 1) - ch.cut(mine, k);
        std::vector<char>& b = buf(k);
        b.resize(static_cast<size_t>(len) * es * static_cast<size_t>(n));
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            if (q != r) irecv(bytes(b.data(), len * q, es), len, t, q, coll_tag_, coll_, reqs);
        }
        for (int i = 1; i < n; ++i) {  // staggered: rank r sends to r+1 first, spreading load
            const int q = (r + i) % n;
            const int64_t c = (*cnt)[static_cast<size_t>(q)];
            isend(cbytes(send, (*off)[static_cast<size_t>(q)] + ch.cut(c, k), es),
                  ch.cut(c, k + 1) - ch.cut(c, k), t, q, coll_tag_, coll_, reqs);
        }
    };
    stream->arrived = [=](int64_t k) {
        const int64_t lo = ch.cut(mine, k), len = ch.cut(mine, k + 1) - lo;
        const std::vector<char>& b = buf(k);
        std::vector<const void*> srcs(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) {
            srcs[static_cast<size_t>(q)] =
                q == r ? cbytes(send, (*off)[static_cast<size_t>(r)] + lo, es)
                       : cbytes(b.data(), len * q, es);
        }
        comm_detail::reduce_fixed_order(srcs, bytes(recv, lo, es), len, t);
    };
    op.phases.emplace_back(std::move(stream));
    op.phases.emplace_back([tmp](std::vector<MPI_Request>&) { *tmp = {}; });
}

void MpiComm::add_gather_phases(Op& op, void* recv, std::vector<int64_t> counts, CommType t,
                                const Chunks& ch) {
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    auto off = std::make_shared<const std::vector<int64_t>>(comm_detail::segment_offsets(counts));
    auto cnt = std::make_shared<const std::vector<int64_t>>(std::move(counts));
    auto stream = std::make_shared<Stream>();
    stream->chunks = ch;
    stream->post = [=, this](int64_t k, std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            const int64_t c = (*cnt)[static_cast<size_t>(q)];
            if (q != r)
                irecv(bytes(recv, (*off)[static_cast<size_t>(q)] + ch.cut(c, k), es),
                      ch.cut(c, k + 1) - ch.cut(c, k), t, q, coll_tag_, coll_, reqs);
        }
        const int64_t own = (*cnt)[static_cast<size_t>(r)];
        const void* piece = bytes(recv, (*off)[static_cast<size_t>(r)] + ch.cut(own, k), es);
        for (int i = 1; i < n; ++i) {
            isend(piece, ch.cut(own, k + 1) - ch.cut(own, k), t, (r + i) % n, coll_tag_, coll_,
                  reqs);
        }
    };
    op.phases.emplace_back(std::move(stream));
}

CommHandle MpiComm::all_reduce(void* buf, int64_t count, CommType t) {
    comm_detail::check_type(t, "all_reduce");
    ZT_CHECK(count >= 0, "comm all_reduce: count ", count, " < 0");
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    const auto seg = comm_detail::even_counts(count, n);
    const auto off = comm_detail::segment_offsets(seg);
    const int64_t mine = seg[static_cast<size_t>(r)];
    Op op(CollectiveKind::kAllReduce);
    op.state.count = count;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * ((count - mine) + mine * (n - 1));
    const Chunks ch = chunks_for(op, count, t);
    // In place: this rank's segment is reduced into itself (reduce_fixed_order allows the alias).
    add_reduce_scatter_phases(op, buf, bytes(buf, off[static_cast<size_t>(r)], es), seg, t, ch);
    add_gather_phases(op, buf, seg, t, ch);
    return enqueue(std::move(op));
}

CommHandle MpiComm::reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                                   CommType t) {
    comm_detail::check_type(t, "reduce_scatter");
    const int64_t total = comm_detail::checked_total(counts, size_, "reduce_scatter");
    const size_t es = comm_type_size(t);
    const int64_t mine = counts[static_cast<size_t>(rank_)];
    const char* s0 = static_cast<const char*>(send);
    const char* d0 = static_cast<const char*>(recv);
    ZT_CHECK(mine == 0 || total == 0 || d0 + mine * static_cast<int64_t>(es) <= s0 ||
                 s0 + total * static_cast<int64_t>(es) <= d0,
             "comm reduce_scatter: recv overlaps send; pass a separate recv buffer");
    Op op(CollectiveKind::kReduceScatter);
    op.state.count = total;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * (total - mine);
    const Chunks ch = chunks_for(op, total, t);
    add_reduce_scatter_phases(op, send, recv, std::move(counts), t, ch);
    return enqueue(std::move(op));
}

CommHandle MpiComm::all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                               CommType t) {
    comm_detail::check_type(t, "all_gather");
    const int64_t total = comm_detail::checked_total(counts, size_, "all_gather");
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    const int64_t own = comm_detail::segment_offsets(counts)[static_cast<size_t>(r)];
    const int64_t mine = counts[static_cast<size_t>(r)];
    Op op(CollectiveKind::kAllGather);
    op.state.count = total;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * mine * (n - 1);
    const Chunks ch = chunks_for(op, total, t);
    op.phases.push_back([=](std::vector<MPI_Request>&) {
        void* at = bytes(recv, own, es);
        if (at != send) std::memmove(at, send, static_cast<size_t>(mine) * es);
    });
    add_gather_phases(op, recv, std::move(counts), t, ch);
    return enqueue(std::move(op));
}

CommHandle MpiComm::broadcast(void* buf, int64_t count, CommType t, int root) {
    comm_detail::check_type(t, "broadcast");
    ZT_CHECK(count >= 0, "comm broadcast: count ", count, " < 0");
    check_peer(root, "broadcast");
    const size_t es = comm_type_size(t);
    Op op(CollectiveKind::kBroadcast);
    op.state.count = count;
    op.state.type = t;
    op.state.root = root;
    op.bytes = rank_ == root ? static_cast<int64_t>(es) * count * (size_ - 1) : 0;
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        // MPI's own tree broadcast: no arithmetic, so no order to fix.
        for (int64_t o = 0; o < count; o += opt_.max_piece_elems) {
            const int m = static_cast<int>(std::min(opt_.max_piece_elems, count - o));
            reqs.emplace_back();
            ZT_MPI(MPI_Ibcast(bytes(buf, o, es), m, mpi_detail::datatype(t), root, coll_,
                              &reqs.back()));
        }
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                               std::vector<int64_t> recv_counts, CommType t) {
    comm_detail::check_type(t, "all_to_all");
    const int64_t total = comm_detail::checked_total(send_counts, size_, "all_to_all send");
    comm_detail::checked_total(recv_counts, size_, "all_to_all recv");
    const int n = size_, r = rank_;
    ZT_CHECK(send_counts[static_cast<size_t>(r)] == recv_counts[static_cast<size_t>(r)],
             "comm all_to_all: rank ", r, " sends itself ", send_counts[static_cast<size_t>(r)],
             " elements but expects ", recv_counts[static_cast<size_t>(r)]);
    const size_t es = comm_type_size(t);
    const auto soff = comm_detail::segment_offsets(send_counts);
    const auto roff = comm_detail::segment_offsets(recv_counts);
    Op op(CollectiveKind::kAllToAll);
    op.state.count = total;
    op.state.type = t;
    op.state.count_agrees = false;  // each rank sends its own total
    op.bytes = static_cast<int64_t>(es) * (total - send_counts[static_cast<size_t>(r)]);
    op.urgent = urgent_;  // never chunked: its counts, and so its chunks, would differ by rank
    op.phases.push_back([=, this, sc = std::move(send_counts),
                         rc = std::move(recv_counts)](std::vector<MPI_Request>& reqs) {
        std::memcpy(bytes(recv, roff[static_cast<size_t>(r)], es),
                    cbytes(send, soff[static_cast<size_t>(r)], es),
                    static_cast<size_t>(sc[static_cast<size_t>(r)]) * es);
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            if (q != r)
                irecv(bytes(recv, roff[static_cast<size_t>(q)], es), rc[static_cast<size_t>(q)], t,
                      q, coll_tag_, coll_, reqs);
        }
        for (int k = 1; k < n; ++k) {
            const int q = (r + k) % n;
            isend(cbytes(send, soff[static_cast<size_t>(q)], es), sc[static_cast<size_t>(q)], t, q,
                  coll_tag_, coll_, reqs);
        }
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::send(const void* buf, int64_t count, CommType t, int peer, int tag) {
    comm_detail::check_type(t, "send");
    check_peer(peer, "send");
    ZT_CHECK(count >= 0 && tag >= 0 && tag <= tag_ub_, "comm send: count ", count, " and tag ", tag,
             " must be >= 0, tag <= ", tag_ub_);
    Op op(CollectiveKind::kSend);
    op.collective = false;
    op.bytes = static_cast<int64_t>(comm_type_size(t)) * count;
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        isend(buf, count, t, peer, tag, comm_, reqs);
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::recv(void* buf, int64_t count, CommType t, int peer, int tag) {
    comm_detail::check_type(t, "recv");
    check_peer(peer, "recv");
    ZT_CHECK(count >= 0 && tag >= 0 && tag <= tag_ub_, "comm recv: count ", count, " and tag ", tag,
             " must be >= 0, tag <= ", tag_ub_);
    Op op(CollectiveKind::kRecv);
    op.collective = false;
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        irecv(buf, count, t, peer, tag, comm_, reqs);
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::barrier() {
    Op op(CollectiveKind::kBarrier);
    op.phases.push_back([this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        reqs.emplace_back();
        ZT_MPI(MPI_Ibarrier(coll_, &reqs.back()));
    });
    return enqueue(std::move(op));
}

std::unique_ptr<Communicator> MpiComm::split(int color, int key) {
    MPI_Comm sub = MPI_COMM_NULL, sub_coll = MPI_COMM_NULL, sub_wd = MPI_COMM_NULL;
    Op op(CollectiveKind::kBarrier);
    op.state.op = comm_detail::kOpSplit;
    op.record = false;
    // MPI_Comm_split and MPI_Comm_dup block; on the worker, between collectives, that is safe:
    // every rank runs them at the same place in its op order.
    op.phases.push_back([&, this](std::vector<MPI_Request>&) {
        auto g = mpi_detail::lock();
        ZT_MPI(MPI_Comm_split(coll_, color < 0 ? MPI_UNDEFINED : color, key, &sub));
        if (sub != MPI_COMM_NULL) ZT_MPI(MPI_Comm_dup(sub, &sub_coll));
        if (sub != MPI_COMM_NULL) ZT_MPI(MPI_Comm_dup(sub, &sub_wd));
    });
    enqueue(std::move(op))->wait();
    ++split_count_;
    if (sub == MPI_COMM_NULL) return nullptr;
    auto c = std::make_unique<MpiComm>(
        sub, sub_coll, sub_wd,
        str_cat(watchdog_->group(), "/split", split_count_, "(color ", color, ")"), opt_);
    c->set_timeout(timeout_s_);
    c->set_check_sequence(check_sequence_);
    c->set_chunk_bytes(chunk_bytes_);
    return c;
}

}  // namespace

std::unique_ptr<Communicator> mpi_world(const MpiOptions& options) {
    mpi_detail::ensure_initialized();
    MPI_Comm comm = MPI_COMM_NULL, coll = MPI_COMM_NULL, wd = MPI_COMM_NULL;
    {
        auto g = mpi_detail::lock();
        ZT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
        ZT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &coll));
        ZT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &wd));
    }
    return std::make_unique<MpiComm>(comm, coll, wd, "world", options);
}

}  // namespace zt
