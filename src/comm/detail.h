// Internal to the comm layer: the op handle both backends complete, per-op stats, and count
// arithmetic shared by the backends. Not part of the public interface (parallel/ includes only
// communicator.h and a backend's factory header).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace zt::comm_detail {

class StatsRecorder;

// The shared state of an issued op: done flag and error, completed once by a backend's worker.
class Work final : public CommWork {
  public:
    void wait() override;
    bool test() override;
    void need() override { mark_awaited(); }
    // Marks the op done (error empty on success) and wakes waiters. Called exactly once.
    void complete(std::exception_ptr error);
    // A wait that blocks adds [t_issue, the moment the waiter woke] to stats' busy time, so that
    // the time a caller waited always lies within it (Note [Busy time]). Set before returning the
    // handle.
    void count_waits_in(std::shared_ptr<StatsRecorder> stats, double t_issue);
    // Called once, the first time a caller waits for the op or says it needs it (need()): a
    // backend that polls slowly for ops nobody needs yet polls fast from then on (Note [Idle
    // polling], mpi_comm.cpp). Set before returning the handle.
    void on_awaited(std::function<void()> f);
    // Whether a caller has waited for the op or said it needs it.
    bool awaited() const { return awaited_.load(std::memory_order_acquire); }
    // Called by a wait() that finds the op not done, before it blocks: a backend may run the op
    // on the waiting thread there (Note [Ops run by their waiter], local_comm.cpp). Set before
    // returning the handle.
    void on_blocking_wait(std::function<void()> f);

  private:
    void mark_awaited();

    std::atomic<bool> awaited_{false};
    std::function<void()> on_awaited_;
    std::function<void()> on_blocking_wait_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
    std::shared_ptr<StatsRecorder> stats_;
    double t_issue_ = 0;
};

// Thread-safe CommStats: ops complete on worker threads while the caller reads stats.
// Note [Busy time]: busy_s is the length of the union of the recorded ops' [issue, done]
// intervals, each extended to the moment a caller blocked in wait() woke up (a waiter may wake a
// little after the worker completed the op; that latency is waiting on communication too, so the
// time callers waited is always a part of busy_s). They arrive as ops complete, out of order of
// issue, so the recorder keeps the union as sorted disjoint intervals and folds into a plain sum
// those that ended more than kBusyHorizonS before the latest completion (an op in flight that long
// is a hang the watchdog reports; one that still completed would be counted in full, at worst a few
// overlapping seconds).
class StatsRecorder {
  public:
    // An op is counted, with its bytes, when it is issued (Note [Counted at issue]); its seconds
    // and busy time when it completes.
    void issued(CollectiveKind k, int64_t bytes_sent);
    void record(CollectiveKind k, double t_issue, double t_done);
    // [t_issue, t_seen]: an op's caller waited until t_seen; busy time only, no op counted.
    void waited(double t_issue, double t_seen);
    CommStats get() const;
    void reset();

    static constexpr double kBusyHorizonS = 900;

  private:
    void add_busy(double a, double b);  // under mu_

    mutable std::mutex mu_;
    CommStats stats_;
    std::vector<std::pair<double, double>> open_;  // disjoint, sorted by start, within the horizon
};

// Checks a counts vector (one entry per rank, none negative) and returns its sum.
int64_t checked_total(std::span<const int64_t> counts, int size, const char* op);
// Offsets of the segments: offsets[r] = counts[0] + ... + counts[r-1], size+1 entries.
std::vector<int64_t> segment_offsets(std::span<const int64_t> counts);
// Segments of `count` elements over `n` ranks as equal as possible (the first count % n get one
// more): the split all_reduce uses for its reduce_scatter phase.
std::vector<int64_t> even_counts(int64_t count, int n);
void check_type(CommType t, const char* op);

}  // namespace zt::comm_detail
