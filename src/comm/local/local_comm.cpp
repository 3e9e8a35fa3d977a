// Local backend (local_comm.h). Each communicator runs its ops in issue order on one worker thread.
// A collective publishes this rank's buffer pointers (Post), meets the other ranks at a barrier,
// reads their buffers directly, and meets them again before returning, so no rank reuses a buffer
// another may still read. Point-to-point is eager: a send whose receive is not posted yet copies
// its bytes into the mailbox and completes, so send/recv pairs in any order never deadlock.
// Urgent ops and chunks (Note [Urgent ops], comm/communicator.h) change nothing here: ops run in
// issue order, each collective meeting the other ranks at barriers and finishing at once, with no
// link between them to share; so LocalComm keeps the base class's set_urgent and set_chunk_bytes,
// which accept the settings and ignore them.
#include "comm/local/local_comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "comm/detail.h"
#include "comm/local/local_group.h"
#include "comm/reduce.h"
#include "comm/watchdog.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt {
namespace {

using comm_detail::OpState;
using comm_detail::StatsRecorder;
using comm_detail::Work;
using local_detail::Domain;
using local_detail::Group;
using local_detail::Post;

const char* cbytes(const void* p, int64_t elems, size_t es) {
    return static_cast<const char*>(p) + elems * static_cast<int64_t>(es);
}
char* bytes(void* p, int64_t elems, size_t es) {
    return static_cast<char*>(p) + elems * static_cast<int64_t>(es);
}

class LocalComm final : public Communicator {
public:
    LocalComm(std::shared_ptr<Group> g, int rank)
        : g_(std::move(g)), rank_(rank), worker_([this] { worker_loop(); }) {}
    ~LocalComm() override {
        {
            std::lock_guard lock(q_mu_);
            stop_ = true;
        }
        q_cv_.notify_all();
        worker_.join();
    }
    LocalComm(const LocalComm&) = delete;
    LocalComm& operator=(const LocalComm&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return g_->n; }
    std::string backend() const override { return "local"; }
    int world_rank() const { return g_->world_ranks[static_cast<size_t>(rank_)]; }
    Domain& domain() { return *g_->dom; }

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
    }
    void set_check_sequence(bool on) override { check_sequence_ = on; }

    // Blocks until every queued op has run (a pending receive may still wait for its message).
    void drain() {
        std::unique_lock lock(q_mu_);
        idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    }

private:
    // body returns false when the op completes later (a receive waiting for its message).
    struct Task {
        std::function<bool()> body;
        CollectiveKind kind;
        int64_t bytes;
        bool record;
        double t_issue;
        std::shared_ptr<Work> work;
        std::optional<OpState> coll;  // a collective: what the watchdog reports
        double timeout_s = 0;
        bool check_sequence = false;
    };

    // A collective's OpState (numbered by enqueue).
    static OpState coll_state(int op, int64_t count = 0, CommType t = CommType::kU8,
                              int64_t root = -1, bool count_agrees = true) {
        return OpState{true, op, 0, count, t, root, count_agrees};
    }
    static OpState coll_state(CollectiveKind k, int64_t count = 0, CommType t = CommType::kU8,
                              int64_t root = -1, bool count_agrees = true) {
        return coll_state(static_cast<int>(k), count, t, root, count_agrees);
    }

    CommHandle enqueue(CollectiveKind kind, int64_t bytes_sent, std::function<bool()> body,
                       bool record = true, std::optional<OpState> coll = std::nullopt) {
        auto work = std::make_shared<Work>();
        {
            std::lock_guard lock(q_mu_);
            if (coll) {
                if (fault_.world_rank == world_rank() && fault_.seq == issued_seq_ + 1) {
                    fault_.world_rank = -1;  // once; the op takes no number
                    work->complete(nullptr);
                    return work;
                }
                coll->seq = ++issued_seq_;
            }
            const double t_issue = now_s();
            if (record) {
                work->count_waits_in(stats_, t_issue);  // Note [Busy time]
                stats_->issued(kind, bytes_sent);       // Note [Counted at issue]
            }
            queue_.push_back(Task{std::move(body), kind, bytes_sent, record, t_issue, work, coll,
                                  timeout_s_, check_sequence_});
        }
        comm_detail::Work* w = work.get();
        work->on_blocking_wait([this, w] { run_if_next(w); });  // Note [Ops run by their waiter]
        q_cv_.notify_one();
        return work;
    }

    // Note [Ops run by their waiter]
    // A caller that waits for an op the worker has not taken yet runs it itself, when it is next
    // in the queue and the worker is idle (so issue order holds and one thread at a time runs the
    // rank's ops: busy_). Handing a collective to the worker and back costs two thread wakes per
    // rank; on a 2-vCPU VM under OMP_WAIT_POLICY=passive that was about 100 us per collective,
    // and a sub-millisecond step (the planner bench's DLRM at 512 samples, 2 ranks) took 0.76-0.85
    // ms at ZeRO-0 and 0.94-1.02 ms at ZeRO-1; with this, 0.72-0.74 and 0.77-0.79 ms (context
    // switches 38 -> 33 and 52 -> 46 a step). An op issued and left in flight still starts on the
    // worker at once, so overlap is unchanged.
    void run_if_next(comm_detail::Work* w) {
        Task task;
        {
            std::lock_guard lock(q_mu_);
            if (busy_ || queue_.empty() || queue_.front().work.get() != w) return;
            task = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
        }
        run_task(task);
    }

    // Runs a task taken from the queue (busy_ set), on the worker or on its waiter.
    void run_task(Task& task) {
        if (task.coll) {
            watch_ = {now_s(), task.timeout_s, task.check_sequence};
            std::lock_guard lock(g_->dom->mu);
            g_->cur[static_cast<size_t>(rank_)] = *task.coll;
        }
        bool done = true;
        std::exception_ptr error;
        try {
            done = task.body();
        } catch (...) {
            error = std::current_exception();
        }
        if (task.coll) {
            std::lock_guard lock(g_->dom->mu);
            g_->cur[static_cast<size_t>(rank_)].active = false;
        }
        if (done) {
            if (task.record) stats_->record(task.kind, task.t_issue, now_s());
            task.work->complete(error);
        }
        bool more;
        {
            std::lock_guard lock(q_mu_);
            busy_ = false;
            more = !queue_.empty();
        }
        idle_cv_.notify_all();
        if (more) q_cv_.notify_one();  // the worker waits for !busy_ (an op its waiter ran)
    }

    void worker_loop() {
        for (;;) {
            Task task;
            {
                std::unique_lock lock(q_mu_);
                // Not while a waiter runs an op (Note [Ops run by their waiter]).
                q_cv_.wait(lock, [&] { return !busy_ && (!queue_.empty() || stop_); });
                if (queue_.empty()) return;  // stop_ and drained
                task = std::move(queue_.front());
                queue_.pop_front();
                busy_ = true;
            }
            run_task(task);
        }
    }

    // Publishes p, meets the other ranks, runs body (which may call sync() for more phases) and
    // meets them again. A failure aborts the domain so that no other rank waits for this one.
    template <typename F>
    void collective(const Post& p, F&& body) {
        g_->posts[static_cast<size_t>(rank_)] = p;
        try {
            g_->barrier(rank_, watch_);
            body(g_->posts);
            g_->barrier(rank_, watch_);
        } catch (const Error& e) {
            std::lock_guard lock(g_->dom->mu);
            g_->dom->abort_locked(str_cat("rank ", world_rank(), " failed: ", e.message()));
            throw;
        }
    }
    void sync() { g_->barrier(rank_, watch_); }
    void check_peer(int peer, const char* op) const {
        ZT_CHECK(peer >= 0 && peer < g_->n, "comm ", op, ": peer ", peer,
                 " out of range; expected 0..", g_->n - 1);
    }

    std::shared_ptr<Group> g_;
    int rank_;
    std::shared_ptr<StatsRecorder> stats_ = std::make_shared<StatsRecorder>();
    uint64_t split_seq_ = 0;  // touched by the thread running an op (busy_)
    local_detail::BarrierWatch watch_;  // the running collective's; likewise

    // Hang detection (Note [Hang detection]); issued_seq_ and fault_ under q_mu_.
    std::atomic<double> timeout_s_{kDefaultCommTimeoutS};
    std::atomic<bool> check_sequence_{false};
    uint64_t issued_seq_ = 0;
    comm_detail::FaultSkip fault_ = comm_detail::fault_skip_from_env();

    std::mutex q_mu_;
    std::condition_variable q_cv_, idle_cv_;
    std::deque<Task> queue_;
    bool busy_ = false;
    bool stop_ = false;
    std::thread worker_;  // last: starts after the members above exist
};

void check_same(const Post& mine, const Post& theirs, int q, const char* op) {
    ZT_CHECK(theirs.count == mine.count && theirs.type == mine.type, "comm ", op,
             ": rank ", q, " passed ", theirs.count, " ", comm_type_name(theirs.type),
             " elements, this rank ", mine.count, " ", comm_type_name(mine.type),
             "; every rank must pass the same count and type");
}

void check_same_counts(const Post& mine, const Post& theirs, int q, const char* op) {
    ZT_CHECK(*theirs.counts == *mine.counts && theirs.type == mine.type, "comm ", op, ": rank ",
             q, " passed other counts or type than this rank; every rank must pass the same");
}

CommHandle LocalComm::all_reduce(void* buf, int64_t count, CommType t) {
    comm_detail::check_type(t, "all_reduce");
    ZT_CHECK(count >= 0, "comm all_reduce: count ", count, " < 0");
    const size_t es = comm_type_size(t);
    const int n = g_->n, r = rank_;
    auto seg = comm_detail::even_counts(count, n);
    const auto off = comm_detail::segment_offsets(seg);
    const auto mine = seg[static_cast<size_t>(r)];
    const int64_t sent = static_cast<int64_t>(es) * ((count - mine) + mine * (n - 1));
    // Note [Fixed-order reduction]: a reduce_scatter over even segments, then an all_gather.
    return enqueue(CollectiveKind::kAllReduce, sent, [=, this] {
        collective(Post{buf, buf, nullptr, count, t}, [&](const std::vector<Post>& posts) {
            std::vector<const void*> srcs(static_cast<size_t>(n));
            for (int q = 0; q < n; ++q) {
                check_same(posts[static_cast<size_t>(r)], posts[static_cast<size_t>(q)], q,
                           "all_reduce");
                srcs[static_cast<size_t>(q)] =
                    cbytes(posts[static_cast<size_t>(q)].in, off[static_cast<size_t>(r)], es);
            }
            comm_detail::reduce_fixed_order(srcs, bytes(buf, off[static_cast<size_t>(r)], es),
                                            mine, t);
            sync();  // every segment reduced by its owner before anyone gathers it
            for (int q = 0; q < n; ++q) {
                if (q == r) continue;
                const auto o = off[static_cast<size_t>(q)];
                std::memcpy(bytes(buf, o, es), cbytes(posts[static_cast<size_t>(q)].in, o, es),
                            static_cast<size_t>(seg[static_cast<size_t>(q)]) * es);
            }
        });
        return true;
    }, /*record=*/true, coll_state(CollectiveKind::kAllReduce, count, t));
}

CommHandle LocalComm::reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                                     CommType t) {
    comm_detail::check_type(t, "reduce_scatter");
    const int64_t total = comm_detail::checked_total(counts, g_->n, "reduce_scatter");
    const size_t es = comm_type_size(t);
    const int n = g_->n, r = rank_;
    const auto off = comm_detail::segment_offsets(counts);
    const auto mine = counts[static_cast<size_t>(r)];
    const char* s0 = static_cast<const char*>(send);
    const char* d0 = static_cast<const char*>(recv);
    ZT_CHECK(mine == 0 || total == 0 || d0 + mine * static_cast<int64_t>(es) <= s0 ||
                 s0 + total * static_cast<int64_t>(es) <= d0,
             "comm reduce_scatter: recv overlaps send; pass a separate recv buffer");
    const int64_t sent = static_cast<int64_t>(es) * (total - mine);
    return enqueue(CollectiveKind::kReduceScatter, sent, [=, this, counts = std::move(counts)] {
        collective(Post{send, recv, &counts, total, t}, [&](const std::vector<Post>& posts) {
            std::vector<const void*> srcs(static_cast<size_t>(n));
            for (int q = 0; q < n; ++q) {
                check_same_counts(posts[static_cast<size_t>(r)], posts[static_cast<size_t>(q)],
                                  q, "reduce_scatter");
                srcs[static_cast<size_t>(q)] =
                    cbytes(posts[static_cast<size_t>(q)].in, off[static_cast<size_t>(r)], es);
            }
            comm_detail::reduce_fixed_order(srcs, recv, mine, t);
        });
        return true;
    }, /*record=*/true, coll_state(CollectiveKind::kReduceScatter, total, t));
}

CommHandle LocalComm::all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                                 CommType t) {
    comm_detail::check_type(t, "all_gather");
    const int64_t total = comm_detail::checked_total(counts, g_->n, "all_gather");
    const size_t es = comm_type_size(t);
    const int n = g_->n, r = rank_;
    const auto off = comm_detail::segment_offsets(counts);
    const int64_t sent = static_cast<int64_t>(es) * counts[static_cast<size_t>(r)] * (n - 1);
    return enqueue(CollectiveKind::kAllGather, sent, [=, this, counts = std::move(counts)] {
        collective(Post{send, recv, &counts, total, t}, [&](const std::vector<Post>& posts) {
            for (int q = 0; q < n; ++q) {
                check_same_counts(posts[static_cast<size_t>(r)], posts[static_cast<size_t>(q)],
                                  q, "all_gather");
                const void* src = posts[static_cast<size_t>(q)].in;
                void* dst = bytes(recv, off[static_cast<size_t>(q)], es);
                // send may alias its own segment of recv (in place); memmove covers any overlap.
                if (src != dst)
                    std::memmove(dst, src, static_cast<size_t>(counts[static_cast<size_t>(q)]) * es);
            }
        });
        return true;
    }, /*record=*/true, coll_state(CollectiveKind::kAllGather, total, t));
}

CommHandle LocalComm::broadcast(void* buf, int64_t count, CommType t, int root) {
    comm_detail::check_type(t, "broadcast");
    ZT_CHECK(count >= 0, "comm broadcast: count ", count, " < 0");
    check_peer(root, "broadcast");
    const size_t es = comm_type_size(t);
    const int n = g_->n, r = rank_;
    const int64_t sent = r == root ? static_cast<int64_t>(es) * count * (n - 1) : 0;
    return enqueue(CollectiveKind::kBroadcast, sent, [=, this] {
        collective(Post{buf, buf, nullptr, count, t, root},
                   [&](const std::vector<Post>& posts) {
                       const Post& rp = posts[static_cast<size_t>(root)];
                       check_same(posts[static_cast<size_t>(r)], rp, root, "broadcast");
                       ZT_CHECK(rp.a == root, "comm broadcast: rank ", root, " passed root ",
                                rp.a, ", this rank ", root, "; every rank must pass the same");
                       if (r != root) std::memcpy(buf, rp.in, static_cast<size_t>(count) * es);
                   });
        return true;
    }, /*record=*/true, coll_state(CollectiveKind::kBroadcast, count, t, root));
}

CommHandle LocalComm::all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                                 std::vector<int64_t> recv_counts, CommType t) {
    comm_detail::check_type(t, "all_to_all");
    const int64_t total = comm_detail::checked_total(send_counts, g_->n, "all_to_all send");
    comm_detail::checked_total(recv_counts, g_->n, "all_to_all recv");
    const size_t es = comm_type_size(t);
    const int n = g_->n, r = rank_;
    const auto roff = comm_detail::segment_offsets(recv_counts);
    const int64_t sent = static_cast<int64_t>(es) * (total - send_counts[static_cast<size_t>(r)]);
    return enqueue(CollectiveKind::kAllToAll, sent,
                   [=, this, sc = std::move(send_counts), rc = std::move(recv_counts)] {
        collective(Post{send, recv, &sc, total, t}, [&](const std::vector<Post>& posts) {
            for (int q = 0; q < n; ++q) {
                const Post& qp = posts[static_cast<size_t>(q)];
                const auto& qsc = *qp.counts;
                ZT_CHECK(qp.type == t && qsc[static_cast<size_t>(r)] == rc[static_cast<size_t>(q)],
                         "comm all_to_all: rank ", q, " sends ", qsc[static_cast<size_t>(r)],
                         " elements to rank ", r, ", which expects ", rc[static_cast<size_t>(q)],
                         "; send_counts[j] on rank i must equal recv_counts[i] on rank j");
                int64_t soff = 0;
                for (int k = 0; k < r; ++k) soff += qsc[static_cast<size_t>(k)];
                std::memcpy(bytes(recv, roff[static_cast<size_t>(q)], es), cbytes(qp.in, soff, es),
                            static_cast<size_t>(rc[static_cast<size_t>(q)]) * es);
            }
        });
        return true;
    }, /*record=*/true, coll_state(CollectiveKind::kAllToAll, total, t, -1, false));
}

CommHandle LocalComm::send(const void* buf, int64_t count, CommType t, int peer, int tag) {
    comm_detail::check_type(t, "send");
    check_peer(peer, "send");
    ZT_CHECK(count >= 0 && tag >= 0, "comm send: count ", count, " and tag ", tag,
             " must be >= 0");
    const size_t es = comm_type_size(t);
    return enqueue(CollectiveKind::kSend, static_cast<int64_t>(es) * count, [=, this] {
        Domain& dom = *g_->dom;
        std::lock_guard lock(dom.mu);
        dom.throw_if_aborted_locked();
        auto& box = dom.mail[{g_->id, rank_, peer, tag}];
        const size_t nbytes = static_cast<size_t>(count) * es;
        if (box.recvs.empty()) {
            local_detail::BufferedMsg m{std::vector<uint8_t>(nbytes), count, t};
            if (nbytes > 0) std::memcpy(m.bytes.data(), buf, nbytes);
            box.msgs.push_back(std::move(m));
            return true;
        }
        local_detail::PendingRecv pr = std::move(box.recvs.front());
        box.recvs.erase(box.recvs.begin());
        if (pr.count != count || pr.type != t) {
            const auto msg = str_cat("rank ", world_rank(), " failed: comm send of ", count, " ",
                                     comm_type_name(t), " to rank ", peer, " (tag ", tag,
                                     ") meets a recv of ", pr.count, " ",
                                     comm_type_name(pr.type), "; counts and types must match");
            pr.work->complete(std::make_exception_ptr(Error(ErrorKind::kInput, __FILE__,
                                                            __LINE__, msg)));
            dom.abort_locked(msg);
            dom.throw_if_aborted_locked();
        }
        if (nbytes > 0) std::memcpy(pr.buf, buf, nbytes);
        pr.stats->record(CollectiveKind::kRecv, pr.t_issue, now_s());
        pr.work->complete(nullptr);
        return true;
    });
}

CommHandle LocalComm::recv(void* buf, int64_t count, CommType t, int peer, int tag) {
    comm_detail::check_type(t, "recv");
    check_peer(peer, "recv");
    ZT_CHECK(count >= 0 && tag >= 0, "comm recv: count ", count, " and tag ", tag,
             " must be >= 0");
    const size_t es = comm_type_size(t);
    auto work = std::make_shared<Work>();
    // The handle enqueue makes is not the one returned: a receive that waits for its message is
    // completed by the sender's thread through `work`.
    const double t_issue = now_s();
    work->count_waits_in(stats_, t_issue);     // Note [Busy time]
    stats_->issued(CollectiveKind::kRecv, 0);  // Note [Counted at issue]
    enqueue(
        CollectiveKind::kRecv, 0,
        [=, this] {
            Domain& dom = *g_->dom;
            std::lock_guard lock(dom.mu);
            try {
                dom.throw_if_aborted_locked();
                auto& box = dom.mail[{g_->id, peer, rank_, tag}];
                if (box.msgs.empty()) {
                    const int src_world = g_->world_ranks[static_cast<size_t>(peer)];
                    ZT_CHECK(!dom.exited[static_cast<size_t>(src_world)], "rank ", src_world,
                             " failed: it returned while rank ", world_rank(),
                             " waits for a message from it (tag ", tag, ")");
                    box.recvs.push_back({buf, count, t, src_world, t_issue, work, stats_.get()});
                    return true;
                }
                local_detail::BufferedMsg m = std::move(box.msgs.front());
                box.msgs.erase(box.msgs.begin());
                ZT_CHECK(m.count == count && m.type == t, "comm recv of ", count, " ",
                         comm_type_name(t), " from rank ", peer, " (tag ", tag,
                         ") meets a send of ", m.count, " ", comm_type_name(m.type),
                         "; counts and types must match");
                if (count > 0) std::memcpy(buf, m.bytes.data(), static_cast<size_t>(count) * es);
            } catch (const Error& e) {
                dom.abort_locked(str_cat("rank ", world_rank(), " failed: ", e.message()));
                work->complete(std::current_exception());
                return true;
            }
            stats_->record(CollectiveKind::kRecv, t_issue, now_s());
            work->complete(nullptr);
            return true;
        },
        /*record=*/false);
    return work;
}

CommHandle LocalComm::barrier() {
    return enqueue(CollectiveKind::kBarrier, 0, [this] {
        collective(Post{}, [](const std::vector<Post>&) {});
        return true;
    }, /*record=*/true, coll_state(CollectiveKind::kBarrier));
}

std::unique_ptr<Communicator> LocalComm::split(int color, int key) {
    std::unique_ptr<Communicator> out;
    auto h = enqueue(
        CollectiveKind::kBarrier, 0,
        [&, this] {
            collective(Post{nullptr, nullptr, nullptr, 0, CommType::kU8, color, key},
                       [&](const std::vector<Post>& posts) {
                           if (color < 0) return;  // like MPI_UNDEFINED: not in any new group
                           std::vector<std::pair<int, int>> members;  // (key, rank)
                           for (int q = 0; q < g_->n; ++q) {
                               if (posts[static_cast<size_t>(q)].a == color)
                                   members.emplace_back(posts[static_cast<size_t>(q)].b, q);
                           }
                           std::sort(members.begin(), members.end());
                           int new_rank = 0;
                           std::vector<int> world;
                           for (size_t i = 0; i < members.size(); ++i) {
                               if (members[i].second == rank_) new_rank = static_cast<int>(i);
                               world.push_back(g_->world_ranks[static_cast<size_t>(members[i].second)]);
                           }
                           std::shared_ptr<Group> sub;
                           {
                               std::lock_guard lock(g_->dom->mu);
                               auto& entry = g_->splits[{split_seq_, color}];
                               if (!entry.first) {
                                   entry.first = std::make_shared<Group>(
                                       g_->dom, world,
                                       str_cat(g_->name, "/split", split_seq_ + 1, "(color ",
                                               color, ")"));
                                   entry.first->id = ++g_->dom->next_group_id;
                               }
                               sub = entry.first;
                               if (++entry.second == static_cast<int>(members.size()))
                                   g_->splits.erase({split_seq_, color});
                           }
                           auto c = std::make_unique<LocalComm>(std::move(sub), new_rank);
                           c->set_timeout(timeout_s_);
                           c->set_check_sequence(check_sequence_);
                           out = std::move(c);
                       });
            ++split_seq_;
            return true;
        },
        /*record=*/false, coll_state(comm_detail::kOpSplit));
    h->wait();
    return out;
}

std::vector<std::unique_ptr<LocalComm>> make_local_comms(int n) {
    ZT_CHECK(n >= 1, "make_local_group: n is ", n, "; expected >= 1");
    auto dom = std::make_shared<Domain>();
    dom->exited.assign(static_cast<size_t>(n), false);
    std::vector<int> world(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) world[static_cast<size_t>(r)] = r;
    auto g = std::make_shared<Group>(dom, world, "world");
    std::vector<std::unique_ptr<LocalComm>> comms;
    for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<LocalComm>(g, r));
    return comms;
}

std::string error_text(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const Error& x) {
        return x.message();
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "unknown exception";
    }
}

// Under dom.mu: rank w has returned; whoever waits for it (in a barrier or a receive) fails.
void mark_exited_locked(Domain& dom, int w) {
    dom.exited[static_cast<size_t>(w)] = true;
    for (auto& [k, box] : dom.mail) {
        for (auto& r : box.recvs) {
            if (r.src_world == w && !dom.aborted) {
                dom.abort_locked(str_cat("rank ", w, " failed: it returned while another rank "
                                                     "waits for a message from it"));
                return;
            }
        }
    }
    dom.cv.notify_all();
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int n) {
    auto comms = make_local_comms(n);
    return {std::make_move_iterator(comms.begin()), std::make_move_iterator(comms.end())};
}

void run_local_ranks(int n, const std::function<void(Communicator&)>& fn) {
    auto comms = make_local_comms(n);
    Domain& dom = comms[0]->domain();
    std::mutex err_mu;
    std::exception_ptr first_error;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
            LocalComm& c = *comms[static_cast<size_t>(r)];
            try {
                fn(c);
                c.drain();
            } catch (...) {
                auto e = std::current_exception();
                {
                    std::lock_guard lock(err_mu);
                    if (!first_error) first_error = e;
                }
                std::lock_guard lock(dom.mu);
                dom.abort_locked(str_cat("rank ", r, " failed: ", error_text(e)));
            }
            c.drain();  // after an abort, queued ops fail at once
            std::lock_guard lock(dom.mu);
            mark_exited_locked(dom, r);
        });
    }
    for (auto& t : threads) t.join();
    comms.clear();
    if (first_error) std::rethrow_exception(first_error);
}

}  // namespace zt
