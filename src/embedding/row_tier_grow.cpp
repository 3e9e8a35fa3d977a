// RowTier's operations for tables that grow and compact (dynamic tables on a tier,
// embedding/dynamic_rows.h): more rows, a larger cache, rows dropped or moved to another row
// number, reads of any rows, and forgetting everything. See row_tier.h.
#include <algorithm>
#include <cstring>

#include "embedding/row_tier.h"
#include "util/error.h"

// Note [Growing tier]
// A dynamic table's rows are numbered by slot, dense in [0, n), and its slots double when full
// (dynamic_table.cpp); on a tier the store grows with them (offload/segmented_store.h) and
// grow_rows() admits the new row numbers. A new row (an admission) has nothing on the store: fetch
// with its `fresh` flag gives it a slot without a read and the caller writes it there, dirty, so it
// reaches the store when it leaves the cache. An eviction moves the last row into the hole
// (Note [Eviction]): drop() forgets the rows that left (their records are dead, so nothing is
// written), and relocate() renames each moved row: a resident row only changes its row number (no
// I/O: the moved rows are the newest, usually still cached), a row not resident is fetched first,
// all of them in one batch at the queue depth; either way the moved row is dirty, since the store
// holds another record at its new place. Every other row keeps its record, so the rule of Note
// [Row fetch] (a row not resident or not dirty is current on the store) still holds, and so do
// read-ahead images (a dropped row's stale record in an image is never read: the row is either
// resident or dead). The cache starts at the configured share and may grow (grow_cache(), or on
// demand with grow_cache_when_full) to hold the rows one step pins; it never shrinks.

namespace zt {

void RowTier::grow_rows(int64_t rows) {
    if (rows <= rows_) return;
    ZT_ASSERT(store_->capacity() >= store_bytes(rows, cols_, sc_),
              "RowTier::grow_rows: the store is smaller than the rows' pages");
    rows_ = rows;
}

void RowTier::grow_cache(int64_t capacity) {
    if (capacity <= capacity_) return;
    ZT_ASSERT(capacity <= rows_, "RowTier::grow_cache: ", capacity, " slots for ", rows_, " rows");
    MemScope scope(pool_, name_, MemPhase::kOther);
    Tensor w = Tensor::empty(pool_, {capacity, cols_}, DType::kF32, MemCategory::kEmbedding);
    std::memcpy(w.raw(), w_.raw(), static_cast<size_t>(capacity_ * cols_) * sizeof(float));
    w_ = std::move(w);
    if (sc_ > 0) {
        Tensor st = Tensor::empty(pool_, {capacity, sc_}, DType::kF32, MemCategory::kEmbedding);
        std::memcpy(st.raw(), state_.raw(), static_cast<size_t>(capacity_ * sc_) * sizeof(float));
        state_ = std::move(st);
    }
    const auto cap = static_cast<size_t>(capacity);
    row_of_.resize(cap, -1);
    dirty_.resize(cap, 0);
    pin_epoch_.resize(cap, 0);
    prev_.resize(cap, -1);
    next_.resize(cap, -1);
    uses_.resize(cap, 0);
    touched_.resize(cap, 0);
    // The new slots go under the free ones (taken last), the lowest on top of them.
    std::vector<int64_t> added;
    for (int64_t s = capacity - 1; s >= capacity_; --s) added.push_back(s);
    free_.insert(free_.begin(), added.begin(), added.end());
    capacity_ = capacity;
}

void RowTier::drop(std::span<const int64_t> rows) {
    for (int64_t r : rows) {
        const int64_t s = slot_of_.find(static_cast<uint64_t>(r));
        if (s < 0) continue;
        const auto su = static_cast<size_t>(s);
        forget(s);
        slot_of_.erase(static_cast<uint64_t>(r));
        row_of_[su] = -1;
        dirty_[su] = 0;
        pin_epoch_[su] = 0;
        free_.push_back(s);
        --resident_;
    }
}

void RowTier::relocate(std::span<const std::pair<int64_t, int64_t>> moves) {
    ++epoch_;  // nothing of a step is pinned any more
    std::vector<int64_t> from, slots;
    for (size_t k0 = 0; k0 < moves.size();) {
        // At most a cache of sources at once (they are pinned while they move).
        const size_t k1 = std::min(moves.size(), k0 + static_cast<size_t>(capacity_));
        from.clear();
        for (size_t k = k0; k < k1; ++k) {
            ZT_ASSERT(slot_of_.find(static_cast<uint64_t>(moves[k].second)) < 0,
                      "RowTier::relocate: row ", moves[k].second, " is still resident");
            from.push_back(moves[k].first);
        }
        slots.resize(from.size());
        for (int64_t r : from) stats_.moved_reads += slot_of_.find(static_cast<uint64_t>(r)) < 0;
        counting_ = false;  // not lookups
        fetch(from, slots.data());
        counting_ = true;
        for (size_t k = k0; k < k1; ++k) {
            const int64_t s = slots[k - k0];
            const auto su = static_cast<size_t>(s);
            slot_of_.erase(static_cast<uint64_t>(moves[k].first));
            slot_of_.insert(static_cast<uint64_t>(moves[k].second), s);
            row_of_[su] = moves[k].second;
            dirty_[su] = 1;
        }
        ++epoch_;
        k0 = k1;
    }
    stats_.moved += static_cast<int64_t>(moves.size());
}

void RowTier::read_rows(std::span<const int64_t> rows, float* w, float* state) {
    drain_writes();  // the store is current for every row not resident
    const size_t cb = static_cast<size_t>(cols_) * sizeof(float);
    const size_t sb = static_cast<size_t>(sc_) * sizeof(float);
    std::vector<std::pair<int64_t, size_t>> todo;  // (row, index) of rows not resident
    std::vector<float> tmp(static_cast<size_t>(rec_floats_));
    auto put = [&](size_t i, const std::byte* rec) {
        std::memcpy(w + static_cast<int64_t>(i) * cols_, rec, cb);
        if (state && sc_ > 0) std::memcpy(state + static_cast<int64_t>(i) * sc_, rec + cb, sb);
    };
    for (size_t i = 0; i < rows.size(); ++i) {
        ZT_ASSERT(rows[i] >= 0 && rows[i] < rows_, "RowTier::read_rows: row ", rows[i],
                  " outside [0, ", rows_, ")");
        const int64_t s = slot_of_.find(static_cast<uint64_t>(rows[i]));
        if (s < 0) {
            todo.emplace_back(rows[i], i);
            continue;
        }
        copy_to_record(s, reinterpret_cast<std::byte*>(tmp.data()));
        put(i, reinterpret_cast<const std::byte*>(tmp.data()));
    }
    std::sort(todo.begin(), todo.end());
    std::vector<Page> batch;
    for (size_t k = 0; k < todo.size();) {
        // The next pages of rows to read, at most kBatchPages.
        batch.clear();
        size_t e = k;
        for (; e < todo.size(); ++e) {
            const int64_t p = page_of(todo[e].first);
            if (batch.empty() || batch.back().page != p) {
                if (batch.size() == kBatchPages) break;
                reserve_pages(batch.size() + 1);
                batch.push_back({p, batch.size()});
            }
        }
        read_pages(batch);
        size_t b = 0;
        for (; k < e; ++k) {
            while (batch[b].page != page_of(todo[k].first)) ++b;
            put(todo[k].second, page_image(batch[b].buf) + record_at(todo[k].first));
        }
    }
}

void RowTier::clear() {
    settle();
    slot_of_.clear();
    std::fill(row_of_.begin(), row_of_.end(), -1);
    std::fill(dirty_.begin(), dirty_.end(), 0);
    std::fill(pin_epoch_.begin(), pin_epoch_.end(), 0);
    std::fill(prev_.begin(), prev_.end(), -1);
    std::fill(next_.begin(), next_.end(), -1);
    std::fill(uses_.begin(), uses_.end(), 0);
    std::fill(touched_.begin(), touched_.end(), 0);
    lfu_.clear();
    head_ = tail_ = -1;
    free_.clear();
    for (int64_t s = capacity_ - 1; s >= 0; --s) free_.push_back(s);
    resident_ = 0;
}

}  // namespace zt
