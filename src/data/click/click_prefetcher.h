// Fills the next click batch on one background thread while the current one trains. One slot:
// prefetch(first, count) asks for a batch; load(first, count) returns it when it matches (waiting
// for it), else fills the asked batch on the calling thread. Either way the result equals
// ClickDataset::fill, with index_distinct_ids done. The thread runs in the idle scheduling class,
// on cores the step leaves free (Note [Background at idle priority], util/background_thread.cpp).
// Leaves out: more than one batch in flight.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#include "data/click/click_dataset.h"

namespace zt {

// Borrows the dataset, which must outlive the prefetcher. Not thread-safe: one caller.
class ClickPrefetcher {
  public:
    explicit ClickPrefetcher(const ClickDataset& ds);
    ~ClickPrefetcher();  // joins the thread (after the fill in flight, if any)
    ClickPrefetcher(const ClickPrefetcher&) = delete;
    ClickPrefetcher& operator=(const ClickPrefetcher&) = delete;

    // Starts filling samples [first, first + count) in the background; replaces a prefetched
    // batch not yet loaded (waiting for one in flight).
    void prefetch(int64_t first, int64_t count);
    // Samples [first, first + count): the prefetched batch if it is this one (an error the thread
    // met filling it is rethrown here), else filled now. Valid until the next load or prefetch.
    const ClickBatchBuffers& load(int64_t first, int64_t count);
    // The prefetched batch [first, first + count), waiting for its fill; null when another (or
    // none) is prefetched or its fill failed (load() reports the error). Valid until the next
    // load or prefetch.
    const ClickBatchBuffers* peek(int64_t first, int64_t count);
    // Whether the fill thread runs in the idle scheduling class (known once a prefetched batch
    // was loaded or peeked; false before, and where the system has no such class).
    bool fills_at_idle_priority() const { return at_idle_; }

  private:
    void run();
    void wait_idle(std::unique_lock<std::mutex>& lock);

    const ClickDataset& ds_;
    ClickBatchBuffers current_, slot_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool requested_ = false;  // a fill of slot_ is asked for or running
    bool ready_ = false;      // slot_ holds [first_, first_ + count_) (or error_)
    bool stop_ = false;
    int64_t first_ = -1, count_ = -1;
    std::exception_ptr error_;
    std::atomic<bool> at_idle_{false};
    std::thread thread_;  // last: starts after the members it reads
};

}  // namespace zt
