// Internal to the comm layer: the op handle both backends complete, per-op stats, and count
// arithmetic shared by the backends. Not part of the public interface (parallel/ includes only
// communicator.h and a backend's factory header).
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <span>
#include <vector>

#include "comm/communicator.h"

namespace zt::comm_detail {

// The shared state of an issued op: done flag and error, completed once by a backend's worker.
class Work final : public CommWork {
public:
    void wait() override;
    bool test() override;
    // Marks the op done (error empty on success) and wakes waiters. Called exactly once.
    void complete(std::exception_ptr error);

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
};

// Thread-safe CommStats: ops complete on worker threads while the caller reads stats.
class StatsRecorder {
public:
    void record(CollectiveKind k, int64_t bytes_sent, double seconds);
    CommStats get() const;
    void reset();

private:
    mutable std::mutex mu_;
    CommStats stats_;
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
