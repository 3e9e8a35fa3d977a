// Names and sizes of the comm types and collective kinds, and the helpers both backends share
// (op handles, stats, count checks).
#include "comm/communicator.h"

#include <algorithm>

#include "comm/detail.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt {

size_t comm_type_size(CommType t) {
    switch (t) {
        case CommType::kF32:
            return 4;
        case CommType::kBF16:
            return 2;
        case CommType::kF16:
            return 2;
        case CommType::kF64:
            return 8;
        case CommType::kI32:
            return 4;
        case CommType::kI64:
            return 8;
        case CommType::kU8:
            return 1;
    }
    ZT_FAIL("comm: unknown CommType ", static_cast<int>(t));
}

const char* comm_type_name(CommType t) {
    switch (t) {
        case CommType::kF32:
            return "f32";
        case CommType::kBF16:
            return "bf16";
        case CommType::kF16:
            return "f16";
        case CommType::kF64:
            return "f64";
        case CommType::kI32:
            return "i32";
        case CommType::kI64:
            return "i64";
        case CommType::kU8:
            return "u8";
    }
    return "unknown";
}

const char* collective_kind_name(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::kAllReduce:
            return "all_reduce";
        case CollectiveKind::kReduceScatter:
            return "reduce_scatter";
        case CollectiveKind::kAllGather:
            return "all_gather";
        case CollectiveKind::kBroadcast:
            return "broadcast";
        case CollectiveKind::kAllToAll:
            return "all_to_all";
        case CollectiveKind::kSend:
            return "send";
        case CollectiveKind::kRecv:
            return "recv";
        case CollectiveKind::kBarrier:
            return "barrier";
    }
    return "unknown";
}

namespace comm_detail {

void Work::wait() {
    std::unique_lock lock(mu_);
    const bool blocks = !done_;
    if (blocks) {
        const std::function<void()> run_here = on_blocking_wait_;
        lock.unlock();
        mark_awaited();
        if (run_here) run_here();
        lock.lock();
    }
    cv_.wait(lock, [&] { return done_; });
    if (blocks && stats_) stats_->waited(t_issue_, now_s());
    if (error_) std::rethrow_exception(error_);
}

void Work::count_waits_in(std::shared_ptr<StatsRecorder> stats, double t_issue) {
    std::lock_guard lock(mu_);
    stats_ = std::move(stats);
    t_issue_ = t_issue;
}

bool Work::test() {
    std::lock_guard lock(mu_);
    return done_;
}

void Work::on_awaited(std::function<void()> f) {
    std::lock_guard lock(mu_);
    on_awaited_ = std::move(f);
}

void Work::on_blocking_wait(std::function<void()> f) {
    std::lock_guard lock(mu_);
    on_blocking_wait_ = std::move(f);
}

void Work::mark_awaited() {
    if (awaited_.exchange(true, std::memory_order_acq_rel)) return;
    std::function<void()> f;
    {
        std::lock_guard lock(mu_);
        f = on_awaited_;
    }
    if (f) f();
}

void Work::complete(std::exception_ptr error) {
    {
        std::lock_guard lock(mu_);
        ZT_ASSERT(!done_, "comm op completed twice");
        done_ = true;
        error_ = std::move(error);
    }
    cv_.notify_all();
}

// Note [Counted at issue]
// An op's count and bytes are added when the caller issues it, not when a worker completes it:
// a caller that reads the stats between steps then sees exactly the ops it issued in the step,
// even those left in flight across the step boundary (the stale embedding exchanges, Note [Stale
// embedding updates], complete whenever their channel's worker gets to them). Counting at
// completion made those steps' bytes depend on thread timing. An op that fails still counts: the
// run fails with it.
void StatsRecorder::issued(CollectiveKind k, int64_t bytes_sent) {
    const auto i = static_cast<int>(k);
    std::lock_guard lock(mu_);
    stats_.count[i] += 1;
    stats_.bytes_sent[i] += bytes_sent;
}

void StatsRecorder::record(CollectiveKind k, double t_issue, double t_done) {
    const auto i = static_cast<int>(k);
    std::lock_guard lock(mu_);
    stats_.seconds[i] += t_done - t_issue;
    add_busy(t_issue, std::max(t_issue, t_done));
}

void StatsRecorder::waited(double t_issue, double t_seen) {
    std::lock_guard lock(mu_);
    add_busy(t_issue, std::max(t_issue, t_seen));
}

void StatsRecorder::add_busy(double a, double b) {
    // The first interval that ends at or after a; those from it up to the first that starts
    // after b overlap [a, b] and merge with it.
    auto first = std::lower_bound(
        open_.begin(), open_.end(), a,
        [](const std::pair<double, double>& iv, double x) { return iv.second < x; });
    auto last = first;
    double lo = a, hi = b;
    while (last != open_.end() && last->first <= b) {
        lo = std::min(lo, last->first);
        hi = std::max(hi, last->second);
        stats_.busy_s -= last->second - last->first;
        ++last;
    }
    first = open_.erase(first, last);
    open_.insert(first, {lo, hi});
    stats_.busy_s += hi - lo;
    // Fold what ended long before the latest completion (Note [Busy time]).
    const double latest = open_.back().second;
    auto keep = open_.begin();
    while (keep != open_.end() && keep->second < latest - kBusyHorizonS) ++keep;
    open_.erase(open_.begin(), keep);
}

CommStats StatsRecorder::get() const {
    std::lock_guard lock(mu_);
    return stats_;
}

void StatsRecorder::reset() {
    std::lock_guard lock(mu_);
    stats_ = CommStats{};
    open_.clear();
}

int64_t checked_total(std::span<const int64_t> counts, int size, const char* op) {
    ZT_CHECK(static_cast<int>(counts.size()) == size, "comm ", op, ": counts has ", counts.size(),
             " entries; expected one per rank (", size, ")");
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        ZT_CHECK(counts[r] >= 0, "comm ", op, ": counts[", r, "] is ", counts[r],
                 "; expected >= 0");
        total += counts[r];
    }
    return total;
}

std::vector<int64_t> segment_offsets(std::span<const int64_t> counts) {
    std::vector<int64_t> off(counts.size() + 1, 0);
    for (size_t r = 0; r < counts.size(); ++r) off[r + 1] = off[r] + counts[r];
    return off;
}

std::vector<int64_t> even_counts(int64_t count, int n) {
    std::vector<int64_t> c(static_cast<size_t>(n), count / n);
    for (int64_t r = 0; r < count % n; ++r) c[static_cast<size_t>(r)] += 1;
    return c;
}

void check_type(CommType t, const char* op) {
    ZT_CHECK(static_cast<int>(t) <= static_cast<int>(CommType::kU8), "comm ", op,
             ": unknown CommType ", static_cast<int>(t));
}

}  // namespace comm_detail
}  // namespace zt
