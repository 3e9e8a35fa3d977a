#include "data/click/click_prefetcher.h"

#include <utility>

#include "util/background_thread.h"

namespace zt {

ClickPrefetcher::ClickPrefetcher(const ClickDataset& ds) : ds_(ds), thread_([this] { run(); }) {}

ClickPrefetcher::~ClickPrefetcher() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void ClickPrefetcher::run() {
    at_idle_ = run_at_idle_priority() && at_idle_priority();  // Note [Background at idle priority]
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        cv_.wait(lock, [this] { return stop_ || requested_; });
        if (stop_) return;
        const int64_t first = first_, count = count_;
        std::exception_ptr err;
        lock.unlock();
        try {
            ds_.fill(first, count, slot_);  // slot_ is the thread's alone while requested_
            index_distinct_ids(slot_);
        } catch (...) {
            err = std::current_exception();
        }
        lock.lock();
        error_ = err;
        requested_ = false;
        ready_ = true;
        cv_.notify_all();
    }
}

void ClickPrefetcher::wait_idle(std::unique_lock<std::mutex>& lock) {
    cv_.wait(lock, [this] { return !requested_; });
}

void ClickPrefetcher::prefetch(int64_t first, int64_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    wait_idle(lock);
    first_ = first;
    count_ = count;
    ready_ = false;
    error_ = nullptr;
    requested_ = true;
    lock.unlock();
    cv_.notify_all();
}

const ClickBatchBuffers* ClickPrefetcher::peek(int64_t first, int64_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!(requested_ || ready_) || first_ != first || count_ != count) return nullptr;
    wait_idle(lock);
    return ready_ && !error_ ? &slot_ : nullptr;
}

const ClickBatchBuffers& ClickPrefetcher::load(int64_t first, int64_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool match = (requested_ || ready_) && first_ == first && count_ == count;
    wait_idle(lock);  // slot_ must not be written while current_ is swapped or filled
    ready_ = false;
    if (match) {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
        std::swap(current_, slot_);
        return current_;
    }
    error_ = nullptr;  // a mismatched batch's error is dropped; the fill below meets it if it hits
    lock.unlock();
    ds_.fill(first, count, current_);
    index_distinct_ids(current_);
    return current_;
}

}  // namespace zt
