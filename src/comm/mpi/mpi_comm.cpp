// MPI communicator (mpi_comm.h). One worker thread per communicator owns every MPI call: it takes
// ops from a FIFO queue, posts their nonblocking requests and polls them with MPI_Testall and a
// short back-off (never a blocking MPI_Wait), so the watchdog bounds every wait (Note [Hang
// detection], comm/watchdog.h; mpi_watchdog.h).
// Collectives run one at a time, in issue order, on a duplicate communicator of their own;
// point-to-point ops start in issue order on the user communicator and stay in flight beside them
// (an Irecv issued before a collective does not block it, as in MPI).
// Note [Fixed-order reduction] (comm/reduce.h): reduce_scatter sends each owner its segment from
// every rank; the owner sums the n contributions in rank order. all_reduce is that over even
// segments, then an all_gather.
#include "comm/mpi/mpi_comm.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/detail.h"
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
// wrong data. Under 32767, MPI's least MPI_TAG_UB.
int coll_tag(uint64_t seq, int op) { return static_cast<int>(seq % 2048) * 16 + op; }

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
    double t_issue = 0;
    double t_start = 0;    // a collective: when it started on the worker
    OpState state;         // a collective: what the watchdog reports (seq set by enqueue)
    double timeout_s = 0;  // 0: no limit
    std::shared_ptr<Work> work;
    std::vector<std::function<void(std::vector<MPI_Request>&)>> phases;
    size_t next_phase = 0;
    std::vector<MPI_Request> reqs;
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
    // the running collective has waited past its limit.
    void watch(const Op* coll);

    void worker_loop();
    bool abandon_at_stop(std::deque<Op>& active);
    bool start_ready_ops(std::deque<Op>& active);
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
    // The phases of a fixed-order reduce_scatter of send (segments at off) into recv, appended to
    // phases; tmp holds the other ranks' contributions to this rank's segment.
    void post_gather(void* recv, const std::vector<int64_t>& counts,
                     const std::vector<int64_t>& off, CommType t,
                     std::vector<MPI_Request>& reqs) const;
    void add_reduce_scatter_phases(Op& op, const void* send, void* recv,
                                   std::vector<int64_t> counts, CommType t);

    MPI_Comm comm_, coll_;
    MpiOptions opt_;
    int rank_ = 0, size_ = 1, tag_ub_ = 32767;
    std::shared_ptr<StatsRecorder> stats_ = std::make_shared<StatsRecorder>();

    // Hang detection (Note [Hang detection]). issued_seq_ and fault_ under q_mu_; cur_, coll_tag_
    // and last_serve_ touched by the worker only.
    std::unique_ptr<mpi_detail::Watchdog> watchdog_;
    std::atomic<double> timeout_s_{kDefaultCommTimeoutS};
    std::atomic<bool> check_sequence_{false};
    uint64_t issued_seq_ = 0;
    comm_detail::FaultSkip fault_ = comm_detail::fault_skip_from_env();
    OpState cur_;
    int coll_tag_ = 0;
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
    std::deque<Op> active;  // started ops: point-to-point ones and at most one collective
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
                    watch(nullptr);
                    continue;
                }
            }
        }
        if (abandon_at_stop(active)) return;
        moved |= start_ready_ops(active);
        const Op* coll = nullptr;
        for (const Op& o : active) {
            if (o.collective) coll = &o;
        }
        watch(coll);
        for (auto it = active.begin(); it != active.end();) {
            if (progress(*it)) {
                it = active.erase(it);
                moved = true;
            } else {
                ++it;
            }
        }
        if (moved) {
            idle_polls = 0;
        } else if (++idle_polls < kSpinYields) {
            sched_yield();
        } else if (coll != nullptr || std::any_of(active.begin(), active.end(),
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

// Starts queued ops in issue order: point-to-point at once, a collective only when no other
// collective is active (and nothing queued behind it starts before it).
bool MpiComm::start_ready_ops(std::deque<Op>& active) {
    bool started = false;
    for (;;) {
        Op op;
        {
            std::lock_guard lock(q_mu_);
            if (queue_.empty()) return started;
            const bool coll_busy =
                std::any_of(active.begin(), active.end(), [](const Op& o) { return o.collective; });
            if (queue_.front().collective && coll_busy) return started;
            op = std::move(queue_.front());
            queue_.pop_front();
        }
        if (op.collective) {
            op.t_start = now_s();
            cur_ = op.state;
            coll_tag_ = coll_tag(op.state.seq, op.state.op);
        }
        started = true;
        active.push_back(std::move(op));
    }
}

bool MpiComm::progress(Op& op) {
    try {
        for (;;) {
            if (!op.reqs.empty()) {
                int done = 0;
                auto g = mpi_detail::lock();
                ZT_MPI(MPI_Testall(static_cast<int>(op.reqs.size()), op.reqs.data(), &done,
                                   MPI_STATUSES_IGNORE));
                if (!done) return false;
                op.reqs.clear();
            }
            if (op.next_phase == op.phases.size()) break;
            auto& phase = op.phases[op.next_phase++];
            phase(op.reqs);
        }
    } catch (...) {
        finish(op, std::current_exception());
        return true;
    }
    finish(op, nullptr);
    return true;
}

void MpiComm::watch(const Op* coll) {
    if (timeout_s_ <= 0 && !coll) return;
    const double now = now_s();
    if (coll && coll->timeout_s > 0 && now - coll->t_start > coll->timeout_s)
        watchdog_->report_and_abort(cur_, now - coll->t_start, coll->timeout_s);
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
    if (op.collective) cur_.active = false;
    if (op.record) stats_->record(op.kind, op.t_issue, now_s());
    op.phases.clear();  // release captured buffers before waking the caller
    op.work->complete(std::move(error));
}

void MpiComm::add_reduce_scatter_phases(Op& op, const void* send, void* recv,
                                        std::vector<int64_t> counts, CommType t) {
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    const auto off = comm_detail::segment_offsets(counts);
    const int64_t mine = counts[static_cast<size_t>(r)];
    // Contributions of the other ranks to this rank's segment, in rank order (this rank's own
    // slot unused).
    auto tmp = std::make_shared<std::vector<char>>();
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        tmp->resize(static_cast<size_t>(mine) * es * static_cast<size_t>(n));
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            if (q != r) irecv(bytes(tmp->data(), mine * q, es), mine, t, q, coll_tag_, coll_, reqs);
        }
        for (int k = 1; k < n; ++k) {  // staggered: rank r sends to r+1 first, spreading load
            const int q = (r + k) % n;
            isend(cbytes(send, off[static_cast<size_t>(q)], es), counts[static_cast<size_t>(q)], t,
                  q, coll_tag_, coll_, reqs);
        }
    });
    op.phases.push_back([=](std::vector<MPI_Request>&) {
        std::vector<const void*> srcs(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) {
            srcs[static_cast<size_t>(q)] = q == r ? cbytes(send, off[static_cast<size_t>(r)], es)
                                                  : cbytes(tmp->data(), mine * q, es);
        }
        comm_detail::reduce_fixed_order(srcs, recv, mine, t);
        tmp->clear();
        tmp->shrink_to_fit();
    });
}

// Posts the gather of every rank's segment of recv (this rank's already in place), point-to-point
// in pieces. MPI_Iallgatherv measured no faster here (docs/benchmarks-comm.md) and needs int
// counts.
void MpiComm::post_gather(void* recv, const std::vector<int64_t>& counts,
                          const std::vector<int64_t>& off, CommType t,
                          std::vector<MPI_Request>& reqs) const {
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    auto g = mpi_detail::lock();
    for (int q = 0; q < n; ++q) {
        if (q != r)
            irecv(bytes(recv, off[static_cast<size_t>(q)], es), counts[static_cast<size_t>(q)], t,
                  q, coll_tag_, coll_, reqs);
    }
    const void* own = bytes(recv, off[static_cast<size_t>(r)], es);
    for (int k = 1; k < n; ++k) {
        isend(own, counts[static_cast<size_t>(r)], t, (r + k) % n, coll_tag_, coll_, reqs);
    }
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
    // In place: this rank's segment is reduced into itself (reduce_fixed_order allows the alias).
    add_reduce_scatter_phases(op, buf, bytes(buf, off[static_cast<size_t>(r)], es), seg, t);
    op.phases.push_back(
        [=, this](std::vector<MPI_Request>& reqs) { post_gather(buf, seg, off, t, reqs); });
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
    add_reduce_scatter_phases(op, send, recv, std::move(counts), t);
    return enqueue(std::move(op));
}

CommHandle MpiComm::all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                               CommType t) {
    comm_detail::check_type(t, "all_gather");
    const int64_t total = comm_detail::checked_total(counts, size_, "all_gather");
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    const auto off = comm_detail::segment_offsets(counts);
    const int64_t mine = counts[static_cast<size_t>(r)];
    Op op(CollectiveKind::kAllGather);
    op.state.count = total;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * mine * (n - 1);
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        void* own = bytes(recv, off[static_cast<size_t>(r)], es);
        if (own != send) std::memmove(own, send, static_cast<size_t>(mine) * es);
        post_gather(recv, counts, off, t, reqs);
    });
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
