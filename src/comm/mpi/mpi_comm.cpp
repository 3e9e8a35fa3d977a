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

#include "comm/mpi/mpi_comm_impl.h"

namespace zt::mpi_impl {

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
static bool test_all(std::vector<MPI_Request>& reqs) {
    if (reqs.empty()) return true;
    int done = 0;
    auto g = mpi_detail::lock();
    ZT_MPI(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
    if (done) reqs.clear();
    return done != 0;
}

// Posts s's chunks, at most depth in flight, and retires them in order; true when all arrived.
static bool pump(Stream& s) {
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

}  // namespace zt::mpi_impl

namespace zt {

using mpi_impl::MpiComm;

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

